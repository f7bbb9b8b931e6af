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
	// for Concurrency. At least 1 for a QPS rule of the direct strategy and
	// the reject behavior on its own resource.
	Threshold float64 `json:"threshold" yaml:"threshold"`
	// Strategy is Direct (default), WarmUp or TokenBucket (QPS only).
	Strategy TokenStrategy `json:"strategy,omitempty" yaml:"strategy,omitempty"`
	// Behavior is Reject (default) or Throttle, which needs QPS.
	Behavior ControlBehavior `json:"behavior,omitempty" yaml:"behavior,omitempty"`
	// MaxQueueing is, with Throttle, the longest a request may wait for its
	// turn, in [0, 1h]; zero means requests never wait.
	MaxQueueing time.Duration `json:"maxQueueing,omitempty" yaml:"maxQueueing,omitempty"`
	// WarmUpPeriod is, with WarmUp, how long a cold resource takes to reach
	// Threshold, in (0, 24h].
	WarmUpPeriod time.Duration `json:"warmUpPeriod,omitempty" yaml:"warmUpPeriod,omitempty"`
	// ColdFactor is, with WarmUp, how many times below Threshold a cold
	// resource starts. Zero means 3; others must be in (1, 1000].
	ColdFactor float64 `json:"coldFactor,omitempty" yaml:"coldFactor,omitempty"`
	// StatInterval is, for QPS, the period Threshold is counted over: a
	// whole number of milliseconds in [10ms, 1h], or zero for one second
	// (which associated-resource rules need).
	StatInterval time.Duration `json:"statInterval,omitempty" yaml:"statInterval,omitempty"`
	// Burst is, with TokenBucket, the most tokens the bucket stores, in
	// [1, MaxThreshold]; zero means Threshold (so a Threshold below 1
	// needs a Burst).
	Burst float64 `json:"burst,omitempty" yaml:"burst,omitempty"`
	// Exact, for a QPS rule of the direct strategy and the reject behavior,
	// makes the limit hold in every interval of StatInterval's length,
	// wherever it starts (Threshold a whole number, at most 10,000).
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
	// Tiers, when set, make the threshold of a QPS rule of the direct
	// strategy and reject behavior follow TierMetric (see Tier); below the
	// first tier the rule admits Threshold, or every request when it is 0.
	Tiers []Tier `json:"tiers,omitempty" yaml:"tiers,omitempty"`
	// TierMetric is what chooses the tier: TierAvgRT (default),
	// TierErrorRatio or TierCPU. It must be empty without Tiers.
	TierMetric TierMetric `json:"tierMetric,omitempty" yaml:"tierMetric,omitempty"`
	// Adaptive, when set on a concurrency rule, makes its limit follow the
	// resource's RT between Adaptive.Min and Adaptive.Max instead of
	// Threshold. Nil means a static limit.
	Adaptive *Adaptive `json:"adaptive,omitempty" yaml:"adaptive,omitempty"`
	// PriorityWait is, for a local QPS reject rule of the direct strategy,
	// the longest a critical entry (core.PriorityCritical) it refuses may
	// wait for the window's next bucket, counted against that bucket. Zero
	// means critical entries are refused like the others.
	PriorityWait time.Duration `json:"priorityWait,omitempty" yaml:"priorityWait,omitempty"`
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

// validate reports the first problem with the rule as an *Error, or nil.
// complexity: one bounds check per field, a line each (&& and || of the checks count); splitting scatters the rule's checks
func (r *Flow) validate() error {
	c := &check{kind: "flow", resource: r.Resource}
	c.fail(r.Resource == "", "Resource", "must not be empty")
	r.validateTiers(c)
	r.validateAdaptive(c)
	enum(c, "Metric", r.Metric, true, QPS, Concurrency)
	enum(c, "Strategy", r.Strategy, true, Direct, WarmUp, TokenBucket)
	enum(c, "Behavior", r.Behavior, true, Reject, Throttle)
	// No limit below the first tier, or the adaptive section sets it.
	unlimited := (len(r.Tiers) > 0 || r.Adaptive != nil) && r.Threshold == 0
	if !unlimited {
		c.threshold("Threshold", r.Threshold)
	}
	iv, qps, warm, bucket := r.StatInterval, cmp.Or(r.Metric, QPS) == QPS, r.Strategy == WarmUp, r.Strategy == TokenBucket
	// A plain rule counts whole requests per window: a Threshold below 1
	// would refuse them all (the other kinds pace, store or borrow a token).
	plain := qps && cmp.Or(r.Strategy, Direct) == Direct && cmp.Or(r.Behavior, Reject) == Reject && r.RefResource == ""
	burst, ref, cl := cmp.Or(r.Burst, r.Threshold), r.RefResource != "", r.Cluster != nil
	c.fail(!qps && r.Threshold != math.Trunc(r.Threshold), "Threshold", "must be a whole number for the concurrency metric, got %v", r.Threshold)
	c.fail(iv != 0 && (iv < 10*time.Millisecond || iv > time.Hour || iv%time.Millisecond != 0), "StatInterval", "must be a whole number of milliseconds in [10ms, 1h], got %v", iv)
	c.fail(iv != 0 && !qps, "StatInterval", "has no meaning for the concurrency metric; leave it zero")
	c.fail(r.MaxQueueing < 0 || r.MaxQueueing > time.Hour, "MaxQueueing", "must be in [0, 1h], got %v", r.MaxQueueing)
	c.fail(r.MaxQueueing != 0 && r.Behavior != Throttle, "MaxQueueing", "is only used with the throttle behavior; leave it zero or set Behavior throttle")
	c.fail(!qps && r.Behavior == Throttle, "Behavior", "throttle needs the qps metric (requests cannot be paced by concurrency)")
	c.fail(warm && !qps, "Strategy", "warm-up needs the qps metric")
	c.fail(warm && (r.WarmUpPeriod <= 0 || r.WarmUpPeriod > 24*time.Hour), "WarmUpPeriod", "must be in (0, 24h] with warm-up, got %v", r.WarmUpPeriod)
	c.fail(warm && r.ColdFactor != 0 && (r.ColdFactor <= 1 || r.ColdFactor > 1000 || math.IsNaN(r.ColdFactor)), "ColdFactor", "must be in (1, 1000] (or 0 for 3), got %v", r.ColdFactor)
	c.fail(warm && ref, "RefResource", "warm-up applies to the rule's own resource only")
	c.fail(!warm && r.WarmUpPeriod != 0, "WarmUpPeriod", "is only used with the warm-up strategy")
	c.fail(!warm && r.ColdFactor != 0, "ColdFactor", "is only used with the warm-up strategy")
	c.fail(!bucket && r.Burst != 0, "Burst", "is only used with the token-bucket strategy; leave it zero or set Strategy token-bucket")
	c.fail(bucket && !qps, "Strategy", "token-bucket needs the qps metric")
	c.fail(bucket && ref, "RefResource", "token-bucket applies to the rule's own resource only")
	c.fail(bucket && r.Exact, "Exact", "needs the direct strategy (a token bucket has no limit per interval)")
	c.fail(bucket && r.Burst == 0 && burst < 1, "Burst", "must be set, at least 1, when Threshold is below 1 (zero means Threshold, %v)", r.Threshold)
	c.fail(bucket && (math.IsNaN(burst) || burst < 1 || burst > MaxThreshold), "Burst", "must be in [1, %g] (or 0 for Threshold), got %v", MaxThreshold, r.Burst)
	c.fail(r.Exact && !qps, "Exact", "needs the qps metric")
	c.fail(r.Exact && cmp.Or(r.Strategy, Direct) != Direct, "Exact", "needs the direct strategy (warm-up moves its limit)")
	c.fail(r.Exact && cmp.Or(r.Behavior, Reject) != Reject, "Exact", "needs the reject behavior (throttle already spaces requests evenly)")
	c.fail(r.Exact && ref, "Exact", "applies to the rule's own resource only")
	c.fail(r.Exact && (r.Threshold != math.Trunc(r.Threshold) || r.Threshold > ruledef.MaxExactThreshold), "Threshold", "must be a whole number of at most %d with exact, got %v", ruledef.MaxExactThreshold, r.Threshold)
	c.fail(ref && r.RefResource == r.Resource, "RefResource", "names the rule's own resource; leave it empty")
	c.fail(ref && r.Behavior == Throttle, "Behavior", "throttle cannot pace on another resource's traffic")
	c.fail(ref && r.interval() != time.Second, "StatInterval", "associated-resource rules read the one-second window; leave it zero")
	if plain && r.Threshold < 1 && !unlimited && c.err == nil {
		c.fail(true, "Threshold", "%v per %v would refuse every request: the reject behavior counts whole requests in a window of StatInterval, so Threshold must be at least 1; %s",
			r.Threshold, r.interval(), belowOne(r.Threshold, r.interval()))
	}
	if plain && cl && r.Cluster.LocalThreshold != 0 && r.Cluster.LocalThreshold < 1 && c.err == nil {
		c.fail(true, "Cluster.LocalThreshold", "%v per %v would refuse every request while the store fails: it must be 0 or at least 1; %s",
			r.Cluster.LocalThreshold, r.interval(), belowOne(r.Cluster.LocalThreshold, r.interval()))
	}
	if cl {
		r.Cluster.validate(c, r.Metric)
	}
	c.fail(cl && warm, "Cluster", "needs the direct or token-bucket strategy (warm-up is not shared across instances)")
	c.fail(cl && bucket && cmp.Or(r.Behavior, Reject) != Reject, "Cluster", "a shared token bucket needs the reject behavior")
	c.fail(cl && r.Exact, "Cluster", "cannot be exact: the shared window is the store's; use Cluster.Strict for exact decisions")
	c.fail(cl && ref, "Cluster", "applies to the rule's own resource only")
	r.validateCaller(c) // flowcaller.go
	return c.err
}

// belowOne says how to write a rate of t per iv, below one per interval.
func belowOne(t float64, iv time.Duration) string {
	alt := "for that rate set Behavior throttle (one request every StatInterval/Threshold) or Strategy token-bucket with Burst 1"
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
