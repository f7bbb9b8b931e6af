package rules

import (
	"cmp"
	"fmt"
	"math"
	"time"

	"github.com/sluice-go/sluice/internal/ruledef"
)

// Flow limits how many requests a resource admits: at most Threshold per
// StatInterval over a sliding window of ten buckets (QPS), or in flight at
// once (Concurrency). A zero optional field means its default.
type Flow struct {
	// ID is an optional label, shown in block errors and logs.
	ID string `json:"id,omitempty" yaml:"id,omitempty"`
	// Resource is the name of the resource the rule protects. Required.
	Resource string `json:"resource" yaml:"resource"`
	// Metric is what the rule counts: QPS (default) or Concurrency.
	Metric FlowMetric `json:"metric,omitempty" yaml:"metric,omitempty"`
	// Threshold is the limit: requests per StatInterval for QPS, in flight
	// for Concurrency. At least 1 for a QPS rule of its own resource without
	// WarmUp, Bucket or Throttle (it counts whole requests per window).
	Threshold float64 `json:"threshold" yaml:"threshold"`
	// WarmUp, when set, makes a cold resource start below Threshold and
	// reach it over WarmUp.Period (QPS only). Nil: the limit holds from the
	// start.
	WarmUp *WarmUp `json:"warmUp,omitempty" yaml:"warmUp,omitempty"`
	// Bucket, when set, makes the rule a token bucket (QPS only): Threshold
	// tokens per StatInterval, at most Bucket.Burst stored. Not with WarmUp.
	Bucket *Bucket `json:"bucket,omitempty" yaml:"bucket,omitempty"`
	// Throttle, when set, paces requests evenly (QPS only) instead of
	// refusing those over the limit. Nil: refuse at once.
	Throttle *Throttle `json:"throttle,omitempty" yaml:"throttle,omitempty"`
	// StatInterval is, for QPS, the period Threshold is counted over: a
	// whole number of milliseconds in [10ms, 1h], or zero for one second
	// (which associated-resource rules need).
	StatInterval time.Duration `json:"statInterval,omitempty" yaml:"statInterval,omitempty"`
	// Exact, for a local QPS rule of its own resource without WarmUp, Bucket,
	// Throttle or Tiers, makes the limit hold in every interval of
	// StatInterval's length, wherever it starts (Threshold a whole number, at
	// most 10,000).
	Exact bool `json:"exact,omitempty" yaml:"exact,omitempty"`
	// RefResource, when set, makes the rule measure that other resource
	// instead of its own: Resource is blocked while RefResource's QPS (or
	// concurrency) is over Threshold.
	RefResource string `json:"refResource,omitempty" yaml:"refResource,omitempty"`
	// Cluster, when set, makes Threshold a budget shared by every instance
	// of the service. Nil means a local rule.
	Cluster *Cluster `json:"cluster,omitempty" yaml:"cluster,omitempty"`
	// Shadow puts the rule in shadow mode: counted as if enforced, it never
	// refuses nor delays a request; what it would refuse is counted and logged.
	Shadow bool `json:"shadow,omitempty" yaml:"shadow,omitempty"`
	// Tiers, when set, make the threshold of a local QPS rule of its own
	// resource without WarmUp, Bucket, Throttle or Exact follow TierMetric
	// (see Tier); below the first tier the rule admits Threshold, or every
	// request when it is 0.
	Tiers []Tier `json:"tiers,omitempty" yaml:"tiers,omitempty"`
	// TierMetric is what chooses the tier: TierAvgRT (default),
	// TierErrorRatio or TierCPU. It must be empty without Tiers.
	TierMetric TierMetric `json:"tierMetric,omitempty" yaml:"tierMetric,omitempty"`
	// Adaptive, when set on a concurrency rule, makes its limit follow the
	// resource's RT between Adaptive.Min and Adaptive.Max instead of
	// Threshold. Nil means a static limit.
	Adaptive *Adaptive `json:"adaptive,omitempty" yaml:"adaptive,omitempty"`
	// PriorityWait is, for a rule that may take Tiers, the longest a
	// critical entry (sluice.PriorityCritical) it refuses may wait for the
	// window's next bucket, counted against that bucket. Zero means critical
	// entries are refused like the others.
	PriorityWait time.Duration `json:"priorityWait,omitempty" yaml:"priorityWait,omitempty"`
	// Quota, when set, makes Threshold a calendar quota: units per hour,
	// day, week, month or year of a time zone (see Quota). Nil means none.
	Quota *Quota `json:"quota,omitempty" yaml:"quota,omitempty"`
	// Caller says whose entries the rule counts (sluice.WithCaller): empty
	// for every entry together (the default); a caller's name for that
	// caller's entries only; "other" for each caller without
	// a rule of its own on the resource, each counted apart. Entries
	// without a caller count only towards rules without Caller. A
	// per-caller rule is a QPS or concurrency rule of the direct strategy
	// with a whole Threshold; see docs/rules.md for what it counts.
	Caller string `json:"caller,omitempty" yaml:"caller,omitempty"`
}

// MaxThreshold bounds every threshold; larger values are refused as absurd.
const MaxThreshold = 1e12

// interval returns StatInterval, or its default when it is zero.
func (r *Flow) interval() time.Duration { return cmp.Or(r.StatInterval, ruledef.StatInterval) }

// validate reports the first problem with the rule as an *Error, or nil:
// the rule's own fields, then each section's.
func (r *Flow) validate() error {
	c := &check{kind: "flow", resource: r.Resource}
	c.fail(r.Resource == "", "Resource", "must not be empty")
	enum(c, "Metric", r.Metric, true, QPS, Concurrency)
	r.validateTiers(c)
	r.Adaptive.validate(c, r)
	r.validateThreshold(c)
	r.WarmUp.validate(c, r)
	r.Bucket.validate(c, r)
	r.Throttle.validate(c, r.Metric, r.RefResource != "")
	r.validateRef(c)
	r.validateWindow(c)
	r.validateAdmits(c)
	r.validateQuota(c)
	if r.Cluster != nil {
		r.Cluster.validate(c, r.Metric)
	}
	r.validateCaller(c) // flowcaller.go
	return c.err
}

// qps reports whether the rule counts requests per interval.
func (r *Flow) qps() bool { return cmp.Or(r.Metric, QPS) == QPS }

// plain reports whether the rule counts whole requests per window of its
// own resource and refuses the others: QPS, without WarmUp, Bucket,
// Throttle or RefResource.
func (r *Flow) plain() bool {
	return r.qps() && r.WarmUp == nil && r.Bucket == nil && r.Throttle == nil && r.RefResource == ""
}

// validateThreshold checks Threshold and StatInterval.
func (r *Flow) validateThreshold(c *check) {
	// No limit below the first tier, or the adaptive section sets it.
	if r.Threshold != 0 || (len(r.Tiers) == 0 && r.Adaptive == nil) {
		c.threshold("Threshold", r.Threshold)
	}
	iv := r.StatInterval
	c.fail(!r.qps() && r.Threshold != math.Trunc(r.Threshold), "Threshold",
		"must be a whole number for the concurrency metric, got %v", r.Threshold)
	c.fail(iv != 0 && (!in(iv, 10*time.Millisecond, time.Hour) || iv%time.Millisecond != 0),
		"StatInterval", "must be a whole number of milliseconds in [10ms, 1h], got %v", iv)
	c.fail(iv != 0 && !r.qps(), "StatInterval", "has no meaning for the concurrency metric; leave it zero")
}

// validateRef checks RefResource, when set.
func (r *Flow) validateRef(c *check) {
	if r.RefResource == "" {
		return
	}
	c.fail(r.RefResource == r.Resource, "RefResource", "names the rule's own resource; leave it empty")
	c.fail(r.interval() != time.Second, "StatInterval",
		"associated-resource rules read the one-second window; leave it zero")
	c.fail(r.Cluster != nil, "Cluster", "applies to the rule's own resource only")
}

// validateWindow checks the options of a plain rule: Exact, PriorityWait.
func (r *Flow) validateWindow(c *check) {
	local, w := r.plain() && r.Cluster == nil, r.PriorityWait
	c.fail(r.Exact && !local, "Exact", "needs a local qps rule of its own resource without WarmUp, Bucket or Throttle "+
		"(they move, store or pace the limit; a cluster rule takes Cluster.Strict for exact decisions)")
	c.fail(r.Exact && (r.Threshold != math.Trunc(r.Threshold) || r.Threshold > ruledef.MaxExactThreshold),
		"Threshold", "must be a whole number of at most %d with exact, got %v", ruledef.MaxExactThreshold, r.Threshold)
	c.fail(!in(w, 0, time.Hour), "PriorityWait", "must be in [0, 1h], got %v", w)
	c.fail(w != 0 && (!local || r.Exact), "PriorityWait",
		"needs a local qps rule of its own resource without WarmUp, Bucket, Throttle or Exact")
}

// validateAdmits refuses a plain rule that could never admit a request:
// below one per StatInterval, or so on the store's failure.
func (r *Flow) validateAdmits(c *check) {
	if !r.plain() || c.err != nil {
		return
	}
	if iv := r.interval(); r.Threshold > 0 && r.Threshold < 1 {
		c.fail(true, "Threshold", "%v per %v would refuse every request: the reject behavior counts whole requests "+
			"in a window of StatInterval, so Threshold must be at least 1; %s", r.Threshold, iv, belowOne(r.Threshold, iv))
	} else if cl := r.Cluster; cl != nil && cl.LocalThreshold > 0 && cl.LocalThreshold < 1 {
		c.fail(true, "Cluster.LocalThreshold",
			"%v per %v would refuse every request while the store fails: it must be 0 or at least 1; %s",
			cl.LocalThreshold, iv, belowOne(cl.LocalThreshold, iv))
	}
}

// belowOne says how to write a rate of t per iv, below one per interval.
func belowOne(t float64, iv time.Duration) string {
	alt := "for that rate add a throttle section (one request every StatInterval/Threshold) or a bucket with Burst 1"
	if long := float64(iv) / t; long <= float64(time.Hour) {
		d := time.Duration(math.Ceil(long/float64(time.Millisecond))) * time.Millisecond
		return fmt.Sprintf("write Threshold 1 with StatInterval %v, or %s", d, alt)
	}
	return alt + " (one request per StatInterval of at most 1h is faster)"
}

func (c *check) threshold(field string, v float64) {
	c.fail(math.IsNaN(v) || math.IsInf(v, 0) || v <= 0, field, "must be a positive number, got %v", v)
	c.fail(v > MaxThreshold, field, "must be at most %g, got %v", MaxThreshold, v)
}
