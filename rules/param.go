package rules

import (
	"cmp"
	"math"
	"time"

	"github.com/sluice-go/sluice/internal/ruledef"
)

// Param limits one resource per value of one of its arguments ("10 requests
// per second per user"), each value identified by its string form. With QPS
// and no Throttle every value owns a token bucket of Threshold+Burst tokens
// that earns Threshold per Duration. An entry without the argument passes. A zero
// optional field means its default.
type Param struct {
	// ID is an optional label, shown in block errors and logs.
	ID string `json:"id,omitempty" yaml:"id,omitempty"`
	// Resource is the name of the resource the rule protects. Required.
	Resource string `json:"resource" yaml:"resource"`
	// Index is the position of the argument in sluice.WithArgs, in [0,
	// 255]; 0 when Key is set.
	Index int `json:"index,omitempty" yaml:"index,omitempty"`
	// Key, when set, names the attachment (sluice.WithAttachment) counted
	// instead.
	Key string `json:"key,omitempty" yaml:"key,omitempty"`
	// Metric is QPS (default; requests per Duration) or Concurrency.
	Metric FlowMetric `json:"metric,omitempty" yaml:"metric,omitempty"`
	// Threshold is the limit of each value not listed in Exceptions, in
	// [1, MaxThreshold].
	Threshold int64 `json:"threshold" yaml:"threshold"`
	// Burst is, for QPS without Throttle, how many requests beyond Threshold a
	// quiet value may make at once, in [0, MaxThreshold]; zero otherwise.
	Burst int64 `json:"burst,omitempty" yaml:"burst,omitempty"`
	// Duration is, for QPS, the period Threshold is counted over: a whole
	// number of milliseconds up to 366 days; zero means 1s. Concurrency takes only 0 or 1s (sentinel-golang's default).
	Duration time.Duration `json:"duration,omitempty" yaml:"duration,omitempty"`
	// Throttle, when set (QPS only), paces each value's requests evenly,
	// one every Duration/Threshold, instead of refusing those over the limit.
	Throttle *Throttle `json:"throttle,omitempty" yaml:"throttle,omitempty"`
	// Exceptions gives listed values their own threshold in [0,
	// MaxThreshold] (0 refuses the value), keyed by the value's string form:
	// {"vip-1": 100, "42": 5}. At most 65,536 entries.
	Exceptions map[string]int64 `json:"exceptions,omitempty" yaml:"exceptions,omitempty"`
	// Capacity is the most distinct values whose state the rule keeps, at
	// most 2^24; zero means 10,000. When full, the value least worth keeping
	// is forgotten. Size it to the values active within one Duration.
	Capacity int `json:"capacity,omitempty" yaml:"capacity,omitempty"`
	// Cluster, when set, makes each value's limit a budget shared by every
	// instance. Nil means a local rule.
	Cluster *Cluster `json:"cluster,omitempty" yaml:"cluster,omitempty"`
	// Shadow puts the rule in shadow mode (see Flow.Shadow).
	Shadow bool `json:"shadow,omitempty" yaml:"shadow,omitempty"`
	// Quota, when set, makes Threshold each value's calendar quota (see
	// Quota); Capacity then bounds the values counted in one period, and a
	// new value past it is refused. Nil means none.
	Quota *Quota `json:"quota,omitempty" yaml:"quota,omitempty"`
}

// window returns Duration, or its default when it is zero.
func (r *Param) window() time.Duration { return cmp.Or(r.Duration, ruledef.ParamDuration) }

// validate reports the first problem with the rule as an *Error, or nil.
func (r *Param) validate() error {
	c := &check{kind: "param", resource: r.Resource}
	c.fail(r.Resource == "", "Resource", "must not be empty")
	r.validateQuota(c)
	enum(c, "Metric", r.Metric, true, QPS, Concurrency)
	c.fail(!in(r.Index, 0, ruledef.MaxParamIndex), "Index", "must be in [0, %d], got %d", ruledef.MaxParamIndex, r.Index)
	c.fail(r.Key != "" && r.Index != 0, "Index", "must be 0 when Key names an attachment, got %d", r.Index)
	c.fail(!in(r.Threshold, 1, MaxThreshold), "Threshold", "must be in [1, %g], got %d", MaxThreshold, r.Threshold)
	c.fail(!in(r.Burst, 0, MaxThreshold), "Burst", "must be in [0, %g], got %d", MaxThreshold, r.Burst)
	c.fail(r.Burst != 0 && (cmp.Or(r.Metric, QPS) != QPS || r.Throttle != nil), "Burst",
		"is only used with the qps metric without Throttle; leave it zero "+
			"(sentinel-golang ignores a BurstCount there: drop it when migrating)")
	r.Throttle.validate(c, r.Metric, false)
	c.fail(r.Metric == Concurrency && r.window() != ruledef.ParamDuration, "Duration",
		"has no meaning for the concurrency metric; leave it zero "+
			"(or 1s, sentinel-golang's default DurationInSec: 1), got %v", r.Duration)
	d := r.Duration
	c.fail(d != 0 && (!in(d, time.Millisecond, ruledef.MaxParamDuration) || d%time.Millisecond != 0),
		"Duration", "must be a whole number of milliseconds in [1ms, %v], got %v", ruledef.MaxParamDuration, r.Duration)
	c.fail(!in(r.Capacity, 0, ruledef.MaxParamCapacity), "Capacity", "must be in [0, %d] (0 for %d), got %d",
		ruledef.MaxParamCapacity, ruledef.ParamCapacity, r.Capacity)
	c.fail(len(r.Exceptions) > ruledef.MaxParamExceptions, "Exceptions",
		"must have at most %d entries, got %d", ruledef.MaxParamExceptions, len(r.Exceptions))
	bad, found := "", false
	for v, t := range r.Exceptions {
		if !in(t, 0, MaxThreshold) && (!found || v < bad) {
			bad, found = v, true // report the first in sorted order, not map order
		}
	}
	c.fail(found, "Exceptions", "threshold of %q must be in [0, %g], got %d", bad, MaxThreshold, r.Exceptions[bad])
	if cl := r.Cluster; cl != nil {
		cl.validate(c, r.Metric)
		c.fail(cmp.Or(cl.Fallback, FallbackLocal) == FallbackLocal && cl.LocalThreshold != math.Trunc(cl.LocalThreshold),
			"Cluster.LocalThreshold",
			"must be a whole number for a param rule (each value's local bucket counts whole requests), got %v",
			cl.LocalThreshold)
	}
	return c.err
}
