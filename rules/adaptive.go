package rules

import (
	"math"
	"time"

	"github.com/sluice-go/sluice/internal/ruledef"
)

// Adaptive makes a concurrency flow rule adaptive: instead of Threshold,
// the limit on requests in flight follows the resource's measured response
// time, settling near throughput × no-load RT (the most it can have in
// flight without queueing; see docs/adaptive.md). Set it on a rule of
// Metric Concurrency; the rule's Threshold is then unused and may be zero.
// Zero fields take their defaults.
type Adaptive struct {
	// Min and Max bound the limit. Min defaults to 1, Max to 1000.
	Min int64 `json:"min,omitempty" yaml:"min,omitempty"`
	Max int64 `json:"max,omitempty" yaml:"max,omitempty"`
	// Initial is the limit before the first measurement; it defaults to
	// Min and must lie within [Min, Max].
	Initial int64 `json:"initial,omitempty" yaml:"initial,omitempty"`
	// Window is the shortest sample window, in [1ms, 1m]; it defaults to
	// 100ms. A window also lasts at least twice the no-load RT, and until
	// it holds 16 samples.
	Window time.Duration `json:"window,omitempty" yaml:"window,omitempty"`
	// Tolerance is the rise of the mean RT over the no-load RT read as
	// queueing: above (1+Tolerance) times it the limit is cut, within
	// (1+Tolerance/2) it may grow. It defaults to 0.2 and must lie in
	// [0.01, 10].
	Tolerance float64 `json:"tolerance,omitempty" yaml:"tolerance,omitempty"`
	// ProbeInterval is the longest time between two measurements of the
	// no-load RT (each halves the limit for one window), in [1s, 24h]; it
	// defaults to 30s.
	ProbeInterval time.Duration `json:"probeInterval,omitempty" yaml:"probeInterval,omitempty"`
}

// withDefaults returns a with every zero field set to its default.
func (a Adaptive) withDefaults() Adaptive {
	a.Min, a.Max, a.Initial, a.Window, a.Tolerance, a.ProbeInterval = ruledef.AdaptiveDefaults(a.Min, a.Max, a.Initial, a.Window, a.Tolerance, a.ProbeInterval)
	return a
}

// validateAdaptive checks the adaptive section and the rule fields it
// excludes.
func (r *Flow) validateAdaptive() error {
	const kind = "flow"
	a := r.Adaptive
	if r.Metric != Concurrency {
		return fieldErr(kind, r.Resource, "Adaptive", "needs the concurrency metric")
	}
	switch {
	case r.RefResource != "":
		return fieldErr(kind, r.Resource, "Adaptive", "applies to the rule's own resource only (RefResource is set)")
	case r.Cluster != nil:
		return fieldErr(kind, r.Resource, "Adaptive", "is a local limit; it cannot be shared through a cluster section")
	case a.Min < 0 || a.Min > MaxThreshold:
		return fieldErr(kind, r.Resource, "Adaptive.Min", "must be in [1, %g] (or 0 for 1), got %d", MaxThreshold, a.Min)
	case a.Max < 0 || a.Max > MaxThreshold:
		return fieldErr(kind, r.Resource, "Adaptive.Max", "must be in [1, %g] (or 0 for 1000), got %d", MaxThreshold, a.Max)
	}
	d := a.withDefaults()
	switch {
	case a.Max != 0 && d.Max < d.Min:
		return fieldErr(kind, r.Resource, "Adaptive.Max", "must be at least Min (%d), got %d", d.Min, a.Max)
	case d.Initial < d.Min || d.Initial > d.Max:
		return fieldErr(kind, r.Resource, "Adaptive.Initial", "must be in [Min, Max] = [%d, %d] (or 0 for Min), got %d", d.Min, d.Max, a.Initial)
	case d.Window < time.Millisecond || d.Window > time.Minute:
		return fieldErr(kind, r.Resource, "Adaptive.Window", "must be in [1ms, 1m] (or 0 for 100ms), got %v", a.Window)
	case math.IsNaN(d.Tolerance) || d.Tolerance < 0.01 || d.Tolerance > 10:
		return fieldErr(kind, r.Resource, "Adaptive.Tolerance", "must be in [0.01, 10] (or 0 for 0.2), got %v", a.Tolerance)
	case d.ProbeInterval < time.Second || d.ProbeInterval > 24*time.Hour:
		return fieldErr(kind, r.Resource, "Adaptive.ProbeInterval", "must be in [1s, 24h] (or 0 for 30s), got %v", a.ProbeInterval)
	}
	return nil
}

// validatePriorityWait checks PriorityWait: a bounded wait for the next
// bucket of a QPS window, so only for rules that count in one.
func (r *Flow) validatePriorityWait() error {
	const kind = "flow"
	switch {
	case r.PriorityWait == 0:
		return nil
	case r.PriorityWait < 0 || r.PriorityWait > time.Hour:
		return fieldErr(kind, r.Resource, "PriorityWait", "must be in [0, 1h], got %v", r.PriorityWait)
	case or(r.Metric, QPS) != QPS || or(r.Strategy, Direct) != Direct || or(r.Behavior, Reject) != Reject || r.Exact || r.RefResource != "" || r.Cluster != nil:
		return fieldErr(kind, r.Resource, "PriorityWait", "needs a local QPS rule of the direct strategy and the reject behavior, without Exact or RefResource")
	}
	return nil
}
