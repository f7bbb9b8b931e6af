package rules

import (
	"cmp"
	"math"
	"strconv"
)

// maxTiers bounds the tiers of one flow rule.
const maxTiers = 16

// Tier is one step of a flow rule with Tiers: once the rule's TierMetric is
// above Above the rule admits Threshold per StatInterval, until the metric
// falls below Below. Tiers go from the mildest to the most severe: each
// Above higher, each Threshold lower, and each Below above the previous
// tier's Above.
type Tier struct {
	// Above is in the metric's unit: milliseconds for TierAvgRT, a ratio in
	// [0, 1] for the others.
	Above float64 `json:"above" yaml:"above"`
	// Below is the value under which the rule leaves the tier; zero means
	// Above.
	Below float64 `json:"below,omitempty" yaml:"below,omitempty"`
	// Threshold is the rule's limit on this tier, requests per
	// StatInterval, at least 1.
	Threshold float64 `json:"threshold" yaml:"threshold"`
}

// validateTiers checks Tiers and TierMetric.
func (r *Flow) validateTiers(c *check) {
	enum(c, "TierMetric", r.TierMetric, true, TierAvgRT, TierErrorRatio, TierCPU)
	c.fail(len(r.Tiers) == 0 && r.TierMetric != "", "TierMetric", "is only used with Tiers; leave it empty")
	if len(r.Tiers) == 0 {
		return
	}
	c.fail(len(r.Tiers) > maxTiers, "Tiers", "must have at most %d steps, got %d", maxTiers, len(r.Tiers))
	c.fail(!r.plain() || r.Exact || r.Cluster != nil, "Tiers",
		"need a local qps rule of its own resource without WarmUp, Bucket, Throttle or Exact")
	c.fail(r.Threshold != 0 && !in(r.Threshold, 1, MaxThreshold), "Threshold",
		"must be 0 (no limit below the first tier) or in [1, %g] with Tiers, got %v", MaxThreshold, r.Threshold)
	metric, prev := cmp.Or(r.TierMetric, TierAvgRT), Tier{Above: math.Inf(-1), Threshold: cmp.Or(r.Threshold, math.Inf(1))}
	for i, t := range r.Tiers {
		t.validate(c, "Tiers["+strconv.Itoa(i)+"].", prev, metric)
		prev = t
	}
}

// validate checks tier t, field prefix f, after tier prev (or the rule's
// own limit) of a rule whose tiers follow metric.
func (t Tier) validate(c *check, f string, prev Tier, metric TierMetric) {
	unit := 1.0
	if metric == TierAvgRT {
		unit = 3600e3 // an hour, in milliseconds
	}
	c.fail(t.Above <= 0 || !in(t.Above, 0, unit), f+"Above",
		"must be in (0, %g] for the %s metric, got %v", unit, string(metric), t.Above)
	c.fail(t.Above <= prev.Above, f+"Above",
		"must be above the previous tier's (%v): tiers go from the mildest to the most severe, got %v",
		prev.Above, t.Above)
	c.fail(!in(t.Below, 0, t.Above), f+"Below", "must be in [0, Above] (0 for Above), got %v", t.Below)
	below := cmp.Or(t.Below, t.Above)
	c.fail(below <= prev.Above, f+"Below",
		"%v overlaps the band of the previous tier (which it enters above %v): it must be above that",
		below, prev.Above)
	c.fail(!in(t.Threshold, 1, MaxThreshold), f+"Threshold", "must be in [1, %g], got %v", MaxThreshold, t.Threshold)
	c.fail(t.Threshold >= prev.Threshold, f+"Threshold",
		"must be below the limit of the step before (%v): a more severe tier admits less, got %v",
		prev.Threshold, t.Threshold)
}
