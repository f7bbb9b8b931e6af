package rules

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFlowCallerValidate(t *testing.T) {
	tests := []struct {
		name      string
		give      func(r *Flow)
		wantField string // "" for valid
	}{
		{"named", func(r *Flow) {}, ""},
		{"other", func(r *Flow) { r.Caller = "other" }, ""},
		{"concurrency", func(r *Flow) { r.Metric = Concurrency }, ""},
		{"throttle", func(r *Flow) { r.Throttle = &Throttle{MaxQueueing: time.Second} }, ""},
		{"per minute", func(r *Flow) { r.StatInterval = time.Minute }, ""},
		{"default", func(r *Flow) { r.Caller = "default" }, "Caller"},
		{"control character", func(r *Flow) { r.Caller = "a\nb" }, "Caller"},
		{"too long", func(r *Flow) { r.Caller = strings.Repeat("a", 257) }, "Caller"},
		{"fractional threshold", func(r *Flow) { r.Threshold = 2.5 }, "Threshold"},
		{"threshold below one", func(r *Flow) { r.Threshold, r.Throttle = 0.5, &Throttle{} }, "Threshold"},
		{"warm-up", func(r *Flow) { r.WarmUp = &WarmUp{Period: time.Second} }, "WarmUp"},
		{"token bucket", func(r *Flow) { r.Bucket = &Bucket{} }, "Bucket"},
		{"quota", func(r *Flow) { r.Quota = &Quota{Period: "day"} }, "Quota"},
		{"exact", func(r *Flow) { r.Exact = true }, "Exact"},
		{"associated resource", func(r *Flow) { r.RefResource = "db" }, "RefResource"},
		{"priority wait", func(r *Flow) { r.PriorityWait = time.Millisecond }, "PriorityWait"},
		{"cluster", func(r *Flow) { r.Cluster = &Cluster{} }, ""},
		{"cluster, fractional local share", func(r *Flow) { r.Cluster = &Cluster{LocalThreshold: 2.5} }, "Cluster.LocalThreshold"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Flow{Resource: "api", Threshold: 100, Caller: "partner"}
			tc.give(&r)
			err := (&Set{Flow: []Flow{r}}).Validate()
			if tc.wantField == "" {
				require.NoError(t, err)
				return
			}
			var re *Error
			require.True(t, errors.As(err, &re), "%v", err)
			assert.Equal(t, "flow", re.Kind)
			assert.Equal(t, tc.wantField, re.Field, "%v", err)
		})
	}
}

// TestFlowCallerFile: 100/s per calling service with 1,000/s for one
// partner, as a rule file; rules that differ only in Caller are not
// duplicates, and two with the same Caller are.
func TestFlowCallerFile(t *testing.T) {
	doc := `flow:
  - resource: GET /quotes
    threshold: 100
    caller: other
  - resource: GET /quotes
    threshold: 1000
    caller: partner-bank
`
	s, err := Decode([]byte(doc), YAML)
	require.NoError(t, err)
	require.Equal(t, []Flow{{Resource: "GET /quotes", Threshold: 100, Caller: "other"}, {Resource: "GET /quotes", Threshold: 1000, Caller: "partner-bank"}}, s.Flow)
	for _, f := range []Format{JSON, YAML} {
		b, err := Encode(s, f)
		require.NoError(t, err)
		back, err := Decode(b, f)
		require.NoError(t, err)
		require.Equal(t, s, back)
	}
	s.Flow = append(s.Flow, Flow{Resource: "GET /quotes", Threshold: 5, Caller: "other"})
	err = s.Validate()
	var re *Error
	require.True(t, errors.As(err, &re))
	assert.Equal(t, 2, re.Index)
	assert.Contains(t, re.Reason, "duplicates rule 0")
}
