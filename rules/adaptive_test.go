package rules

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAdaptiveRuleFile: a rule file's adaptive section and priorityWait
// decode into the fields their yaml tags name, in both formats, and the
// set round-trips (Encode, Decode) unchanged.
func TestAdaptiveRuleFile(t *testing.T) {
	doc := `flow:
  - resource: GET /items
    metric: concurrency
    adaptive:
      min: 4
      max: 400
      initial: 20
      window: 250ms
      tolerance: 0.3
      probeInterval: 1m
  - resource: POST /orders
    threshold: 100
    priorityWait: 50ms
`
	want := Set{Flow: []Flow{
		{Resource: "GET /items", Metric: Concurrency, Adaptive: &Adaptive{Min: 4, Max: 400, Initial: 20, Window: 250 * time.Millisecond, Tolerance: 0.3, ProbeInterval: time.Minute}},
		{Resource: "POST /orders", Threshold: 100, PriorityWait: 50 * time.Millisecond},
	}}
	got, err := Decode([]byte(doc), YAML)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	require.NoError(t, got.Validate())
	roundTrip(t, got)
	for _, f := range []Format{YAML, JSON} {
		b, err := Encode(got, f)
		require.NoError(t, err)
		back, err := Decode(b, f)
		require.NoError(t, err)
		assert.Equal(t, want, back, "%v:\n%s", f, b)
	}
}

// TestAdaptiveValidate: every bad value is refused with an *Error naming
// the rule's resource and the field.
func TestAdaptiveValidate(t *testing.T) {
	conc := func(a Adaptive) Flow { return Flow{Resource: "r", Metric: Concurrency, Adaptive: &a} }
	tests := []struct {
		name  string
		rule  Flow
		field string
	}{
		{"qps metric", Flow{Resource: "r", Threshold: 1, Adaptive: &Adaptive{}}, "Adaptive"},
		{"associated", Flow{Resource: "r", Metric: Concurrency, RefResource: "o", Adaptive: &Adaptive{}}, "Adaptive"},
		{"cluster", Flow{Resource: "r", Metric: Concurrency, Threshold: 1, Cluster: &Cluster{}, Adaptive: &Adaptive{}}, "Adaptive"},
		{"negative min", conc(Adaptive{Min: -1}), "Adaptive.Min"},
		{"max below min", conc(Adaptive{Min: 10, Max: 5}), "Adaptive.Max"},
		{"initial above max", conc(Adaptive{Max: 5, Initial: 6}), "Adaptive.Initial"},
		{"initial below min", conc(Adaptive{Min: 5, Initial: 4}), "Adaptive.Initial"},
		{"window too short", conc(Adaptive{Window: time.Microsecond}), "Adaptive.Window"},
		{"window too long", conc(Adaptive{Window: time.Hour}), "Adaptive.Window"},
		{"tolerance too small", conc(Adaptive{Tolerance: 0.001}), "Adaptive.Tolerance"},
		{"tolerance negative", conc(Adaptive{Tolerance: -1}), "Adaptive.Tolerance"},
		{"probe too often", conc(Adaptive{ProbeInterval: time.Millisecond}), "Adaptive.ProbeInterval"},
		{"bad threshold beside it", Flow{Resource: "r", Metric: Concurrency, Threshold: -1, Adaptive: &Adaptive{}}, "Threshold"},
		{"priority wait on concurrency", Flow{Resource: "r", Metric: Concurrency, Threshold: 1, PriorityWait: time.Millisecond}, "PriorityWait"},
		{"priority wait on throttle", Flow{Resource: "r", Threshold: 1, Throttle: &Throttle{}, PriorityWait: time.Millisecond}, "PriorityWait"},
		{"priority wait exact", Flow{Resource: "r", Threshold: 1, Exact: true, PriorityWait: time.Millisecond}, "PriorityWait"},
		{"priority wait negative", Flow{Resource: "r", Threshold: 1, PriorityWait: -1}, "PriorityWait"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := (&Set{Flow: []Flow{tt.rule}}).Validate()
			var re *Error
			require.True(t, errors.As(err, &re), "got %v", err)
			assert.Equal(t, "r", re.Resource)
			assert.Equal(t, tt.field, re.Field, "%v", err)
		})
	}
	for _, ok := range []Flow{conc(Adaptive{}), conc(Adaptive{Min: 2000}), {Resource: "r", Metric: Concurrency, Threshold: 5, Adaptive: &Adaptive{Max: 5}}, {Resource: "r", Threshold: 5, PriorityWait: time.Second}} {
		assert.NoError(t, (&Set{Flow: []Flow{ok}}).Validate(), "%+v", ok)
	}
}
