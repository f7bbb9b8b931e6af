package rules

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTierValidation: tiers that are not ordered from the mildest to the
// most severe, bands that overlap, and tiers on rules they do not apply to
// are refused, naming the rule and the field.
func TestTierValidation(t *testing.T) {
	ok := []Tier{{Above: 100, Below: 80, Threshold: 500}, {Above: 200, Below: 180, Threshold: 200}}
	require.NoError(t, (&Set{Flow: []Flow{{Resource: "api", Tiers: ok}}}).Validate())
	require.NoError(t, (&Set{Flow: []Flow{{Resource: "api", Threshold: 800, Tiers: ok}}}).Validate())
	require.NoError(t, (&Set{Flow: []Flow{{Resource: "api", TierMetric: TierCPU, Tiers: []Tier{{Above: 0.8, Threshold: 5}}}}}).Validate())
	for _, c := range []struct {
		name  string
		rule  Flow
		field string
	}{
		{"Above not rising", Flow{Tiers: []Tier{{Above: 200, Threshold: 500}, {Above: 100, Threshold: 200}}}, "Tiers[1].Above"},
		{"equal Above", Flow{Tiers: []Tier{{Above: 100, Threshold: 500}, {Above: 100, Threshold: 200}}}, "Tiers[1].Above"},
		{"Threshold not falling", Flow{Tiers: []Tier{{Above: 100, Threshold: 200}, {Above: 200, Threshold: 500}}}, "Tiers[1].Threshold"},
		{"tier above the base", Flow{Threshold: 300, Tiers: []Tier{{Above: 100, Threshold: 500}}}, "Tiers[0].Threshold"},
		{"bands overlap", Flow{Tiers: []Tier{{Above: 100, Below: 80, Threshold: 500}, {Above: 200, Below: 90, Threshold: 200}}}, "Tiers[1].Below"},
		{"Below above Above", Flow{Tiers: []Tier{{Above: 100, Below: 120, Threshold: 500}}}, "Tiers[0].Below"},
		{"ratio over 1", Flow{TierMetric: TierErrorRatio, Tiers: []Tier{{Above: 5, Threshold: 500}}}, "Tiers[0].Above"},
		{"tier threshold below 1", Flow{Tiers: []Tier{{Above: 5, Threshold: 0.5}}}, "Tiers[0].Threshold"},
		{"unknown metric", Flow{TierMetric: "p99", Tiers: ok}, "TierMetric"},
		{"metric without tiers", Flow{Threshold: 5, TierMetric: TierCPU}, "TierMetric"},
		{"concurrency", Flow{Metric: Concurrency, Tiers: ok}, "Tiers"},
		{"throttle", Flow{Throttle: &Throttle{}, Tiers: ok}, "Tiers"},
		{"exact", Flow{Exact: true, Threshold: 900, Tiers: ok}, "Tiers"},
		{"base below 1", Flow{Threshold: 0.5, Tiers: []Tier{{Above: 5, Threshold: 0.25}}}, "Threshold"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.rule.Resource = "api"
			err := (&Set{Flow: []Flow{{Resource: "other", Threshold: 1}, c.rule}}).Validate()
			var re *Error
			require.True(t, errors.As(err, &re), "%v", err)
			assert.Equal(t, c.field, re.Field, "%v", err)
			assert.Equal(t, "api", re.Resource)
			assert.Equal(t, 1, re.Index)
			t.Log(err)
		})
	}
}

// TestShadowRoundTrip: the shadow field of every kind and a tiered rule
// read back from both formats as written.
func TestShadowRoundTrip(t *testing.T) {
	s := Set{
		Flow:           []Flow{{Resource: "api", Shadow: true, TierMetric: TierErrorRatio, Tiers: []Tier{{Above: 0.1, Below: 0.05, Threshold: 100}}}},
		System:         []System{{Metric: CPUUsage, Threshold: 0.8, Shadow: true}},
		CircuitBreaker: []CircuitBreaker{{Resource: "db", Strategy: ErrorCount, Threshold: 3, RetryTimeout: 1e9, Shadow: true}},
		Param:          []Param{{Resource: "api", Threshold: 3, Shadow: true}},
	}
	roundTrip(t, s)
	got, err := Decode([]byte("flow:\n  - resource: api\n    shadow: true\n    tiers:\n      - above: 100\n        below: 80\n        threshold: 500\n"), YAML)
	require.NoError(t, err)
	assert.Equal(t, []Tier{{Above: 100, Below: 80, Threshold: 500}}, got.Flow[0].Tiers)
	_, err = Decode([]byte("flow:\n  - resource: api\n    tiers:\n      - above: 100\n        treshold: 500\n"), YAML)
	require.ErrorContains(t, err, "treshold")
	_, err = Decode([]byte("flow:\n  - resource: api\n    tiers: 5\n"), YAML)
	require.ErrorContains(t, err, "list")
}
