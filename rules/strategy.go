package rules

import (
	"cmp"
	"time"
)

// WarmUp makes a QPS flow rule warm up: a cold resource (one that has seen
// little traffic) admits Threshold/ColdFactor per StatInterval, rising to
// Threshold over Period as traffic comes (Sentinel's warm-up, after Guava's
// SmoothWarmingUp). Not with Bucket, RefResource, Exact or Cluster.
type WarmUp struct {
	// Period is how long a cold resource takes to reach Threshold, in
	// (0, 24h]. Required.
	Period time.Duration `json:"period" yaml:"period"`
	// ColdFactor is how many times below Threshold a cold resource starts.
	// Zero means 3; others must be in (1, 1000].
	ColdFactor float64 `json:"coldFactor,omitempty" yaml:"coldFactor,omitempty"`
}

// Bucket makes a QPS flow rule a token bucket: it earns Threshold tokens
// per StatInterval, stores at most Burst, and each request takes one. Not
// with WarmUp, RefResource or Exact; a cluster bucket does not take
// Throttle.
type Bucket struct {
	// Burst is the most tokens the bucket stores, in [1, MaxThreshold];
	// zero means Threshold (so a Threshold below 1 needs a Burst).
	Burst float64 `json:"burst,omitempty" yaml:"burst,omitempty"`
}

// Throttle makes a QPS flow or param rule pace requests evenly, one every
// StatInterval/Threshold (Duration/Threshold for a param rule's value),
// instead of refusing those over the limit: a request waits for its turn.
// Not with RefResource, nor on the concurrency metric.
type Throttle struct {
	// MaxQueueing is the longest a request may wait for its turn, in
	// [0, 1h]; zero means requests never wait (a request refused is one
	// whose turn has not come).
	MaxQueueing time.Duration `json:"maxQueueing,omitempty" yaml:"maxQueueing,omitempty"`
}

// validate checks the warm-up section of r, when set.
func (w *WarmUp) validate(c *check, r *Flow) {
	if w == nil {
		return
	}
	c.fail(!r.qps(), "WarmUp", "needs the qps metric")
	c.fail(!in(w.Period, 1, 24*time.Hour), "WarmUp.Period", "must be in (0, 24h], got %v", w.Period)
	c.fail(w.ColdFactor != 0 && (w.ColdFactor <= 1 || !in(w.ColdFactor, 1, 1000)), "WarmUp.ColdFactor",
		"must be in (1, 1000] (or 0 for 3), got %v", w.ColdFactor)
	c.fail(r.RefResource != "", "WarmUp", "applies to the rule's own resource only (RefResource is set)")
	c.fail(r.Bucket != nil, "WarmUp", "contradicts Bucket: a rule warms up or stores tokens, not both")
	c.fail(r.Cluster != nil, "WarmUp", "is not shared across instances: a cluster rule cannot warm up")
}

// validate checks the token-bucket section of r, when set.
func (b *Bucket) validate(c *check, r *Flow) {
	if b == nil {
		return
	}
	burst := cmp.Or(b.Burst, r.Threshold)
	c.fail(!r.qps(), "Bucket", "needs the qps metric")
	c.fail(r.RefResource != "", "Bucket", "applies to the rule's own resource only (RefResource is set)")
	c.fail(b.Burst == 0 && burst < 1, "Bucket.Burst",
		"must be set, at least 1, when Threshold is below 1 (zero means Threshold, %v)", r.Threshold)
	c.fail(!in(burst, 1, MaxThreshold), "Bucket.Burst",
		"must be in [1, %g] (or 0 for Threshold), got %v", MaxThreshold, b.Burst)
	c.fail(r.Cluster != nil && r.Throttle != nil, "Throttle",
		"cannot pace a token bucket shared through a cluster section")
}

// validate checks the throttle section of a rule of metric, when set; ref
// is whether the rule measures another resource.
func (t *Throttle) validate(c *check, metric FlowMetric, ref bool) {
	if t == nil {
		return
	}
	c.fail(cmp.Or(metric, QPS) != QPS, "Throttle", "needs the qps metric (requests cannot be paced by concurrency)")
	c.fail(ref, "Throttle", "cannot pace on another resource's traffic (RefResource is set)")
	c.fail(!in(t.MaxQueueing, 0, time.Hour), "Throttle.MaxQueueing", "must be in [0, 1h], got %v", t.MaxQueueing)
}

// in reports whether v is in [lo, hi] (a NaN is not).
func in[T int | int64 | float64 | time.Duration](v, lo, hi T) bool { return v >= lo && v <= hi }
