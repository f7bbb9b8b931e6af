package rules

import (
	"errors"
	"testing"
	_ "time/tzdata" // the tests' zones, whatever the host has

	"github.com/stretchr/testify/require"
)

// TestQuotaDecodeEncode: a quota section reads from YAML and JSON and
// writes back to the same rules.
func TestQuotaDecodeEncode(t *testing.T) {
	yml := `
flow:
  - resource: api
    threshold: 10000
    quota: {period: month, zone: Europe/Berlin}
param:
  - resource: api
    threshold: 100
    quota:
      period: week
      weekStart: sunday
    cluster: {fallback: block}
`
	s, err := Decode([]byte(yml), YAML)
	require.NoError(t, err)
	require.Equal(t, &Quota{Period: "month", Zone: "Europe/Berlin"}, s.Flow[0].Quota)
	require.Equal(t, &Quota{Period: "week", WeekStart: "sunday"}, s.Param[0].Quota)
	for _, f := range []Format{JSON, YAML} {
		b, err := Encode(s, f)
		require.NoError(t, err)
		back, err := Decode(b, f)
		require.NoError(t, err, "%s", b)
		require.Equal(t, s, back, "%s", b)
	}
	js := `{"flow": [{"resource": "api", "threshold": 3, "quota": {"period": "day"}}]}`
	s, err = Decode([]byte(js), JSON)
	require.NoError(t, err)
	require.Equal(t, "day", s.Flow[0].Quota.Period)
}

// TestQuotaDecodeRefuses: hostile or mistaken sections are refused with
// the rule, the field and, when decoding found it, the line.
func TestQuotaDecodeRefuses(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"flow:\n  - resource: api\n    threshold: 3\n    quota: {period: fortnight}\n",
			`rules: flow rule 0 (resource "api"): Quota.Period: unknown value "fortnight" (want one of hour, day, week, month, year)`},
		{"flow:\n  - resource: api\n    threshold: 3\n    quota: {period: day, zone: Europe/Atlantis}\n",
			`rules: flow rule 0 (resource "api"): Quota.Zone: unknown time zone "Europe/Atlantis"`},
		{"flow:\n  - resource: api\n    threshold: 3\n    quota: {period: day, zone: ../../etc/passwd}\n",
			`Quota.Zone: unknown time zone "../../etc/passwd"`},
		{"flow:\n  - resource: api\n    threshold: 3\n    quota: {}\n",
			`Quota.Period: must be set (one of hour, day, week, month, year)`},
		{"param:\n  - resource: api\n    threshold: 3\n    duration: 1h\n    quota: {period: day}\n",
			`rules: param rule 0 (resource "api"): Duration: has no meaning with a quota`},
		{"param:\n  - resource: api\n    threshold: 3\n    quota: {period: week, weekStart: caturday}\n",
			`Quota.WeekStart: unknown day "caturday" (want one of sunday, monday, tuesday, wednesday, thursday, friday, saturday)`},
		{"flow:\n  - resource: api\n    threshold: 3\n    quota: {period: day, zones: UTC}\n",
			`zones`},
		{"flow:\n  - resource: api\n    threshold: 3\n    quota: {period: day}\n    cluster: {mode: per-instance}\n",
			`Cluster.Mode: must be total for a quota`},
	} {
		_, err := Decode([]byte(c.doc), YAML)
		require.Error(t, err, c.doc)
		var re *Error
		require.True(t, errors.As(err, &re), "%v", err)
		require.Contains(t, err.Error(), c.want)
	}
}

// TestQuotaDuplicates: two quotas on one resource with different periods
// are two rules ("100 a day and 2,000 a month"); the same period twice is a
// duplicate, the default week start written out or not.
func TestQuotaDuplicates(t *testing.T) {
	day := Flow{Resource: "api", Threshold: 100, Quota: &Quota{Period: "day"}}
	month := Flow{Resource: "api", Threshold: 2000, Quota: &Quota{Period: "month"}}
	plain := Flow{Resource: "api", Threshold: 10}
	require.NoError(t, (&Set{Flow: []Flow{day, month, plain}}).Validate())
	w1 := Flow{Resource: "api", Threshold: 1, Quota: &Quota{Period: "week"}}
	w2 := Flow{Resource: "api", Threshold: 2, Quota: &Quota{Period: "week", WeekStart: "monday"}}
	err := (&Set{Flow: []Flow{w1, w2}}).Validate()
	require.ErrorContains(t, err, "duplicates rule 0")
}
