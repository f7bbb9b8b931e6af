package rules

import (
	"time"

	"github.com/sluice-go/sluice/internal/ruledef"
)

// Adaptive makes a concurrency flow rule adaptive: instead of Threshold
// (then unused, and may be zero), the limit on requests in flight follows
// the resource's response time, settling near throughput × no-load RT
// (docs/adaptive.md). Zero fields take their defaults.
type Adaptive struct {
	// Min and Max bound the limit. Min defaults to 1, Max to 1000.
	Min int64 `json:"min,omitempty" yaml:"min,omitempty"`
	Max int64 `json:"max,omitempty" yaml:"max,omitempty"`
	// Initial is the limit before the first measurement, in [Min, Max];
	// it defaults to Min.
	Initial int64 `json:"initial,omitempty" yaml:"initial,omitempty"`
	// Window is the shortest sample window, in [1ms, 1m]; default 100ms.
	Window time.Duration `json:"window,omitempty" yaml:"window,omitempty"`
	// Tolerance is the rise of the mean RT over the no-load RT read as
	// queueing, in [0.01, 10]; default 0.2.
	Tolerance float64 `json:"tolerance,omitempty" yaml:"tolerance,omitempty"`
	// ProbeInterval is the longest time between two measurements of the
	// no-load RT, in [1s, 24h]; default 30s.
	ProbeInterval time.Duration `json:"probeInterval,omitempty" yaml:"probeInterval,omitempty"`
}

// validate checks the adaptive section of r, when set.
func (a *Adaptive) validate(c *check, r *Flow) {
	if a == nil {
		return
	}
	d := *a
	d.Min, d.Max, d.Initial, d.Window, d.Tolerance, d.ProbeInterval =
		ruledef.AdaptiveDefaults(a.Min, a.Max, a.Initial, a.Window, a.Tolerance, a.ProbeInterval)
	c.fail(r.Metric != Concurrency, "Adaptive", "needs the concurrency metric")
	c.fail(r.RefResource != "", "Adaptive", "applies to the rule's own resource only (RefResource is set)")
	c.fail(r.Cluster != nil, "Adaptive", "is a local limit; it cannot be shared through a cluster section")
	c.fail(!in(a.Min, 0, MaxThreshold), "Adaptive.Min", "must be in [1, %g] (or 0 for 1), got %d", MaxThreshold, a.Min)
	c.fail(!in(a.Max, 0, MaxThreshold), "Adaptive.Max", "must be in [1, %g] (or 0 for 1000), got %d", MaxThreshold, a.Max)
	c.fail(a.Max != 0 && d.Max < d.Min, "Adaptive.Max", "must be at least Min (%d), got %d", d.Min, a.Max)
	c.fail(!in(d.Initial, d.Min, d.Max), "Adaptive.Initial",
		"must be in [Min, Max] = [%d, %d] (or 0 for Min), got %d", d.Min, d.Max, a.Initial)
	c.fail(!in(d.Window, time.Millisecond, time.Minute), "Adaptive.Window",
		"must be in [1ms, 1m] (or 0 for 100ms), got %v", a.Window)
	c.fail(!in(d.Tolerance, 0.01, 10), "Adaptive.Tolerance", "must be in [0.01, 10] (or 0 for 0.2), got %v", a.Tolerance)
	c.fail(!in(d.ProbeInterval, time.Second, 24*time.Hour), "Adaptive.ProbeInterval",
		"must be in [1s, 24h] (or 0 for 30s), got %v", a.ProbeInterval)
}
