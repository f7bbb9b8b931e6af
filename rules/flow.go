package rules

import (
	"cmp"
	"fmt"
	"math"
	"time"

	"github.com/sluice-go/sluice/internal/ruledef"
)

// Flow limits how many requests a resource admits.
//
// With Metric QPS, at most Threshold requests are admitted per StatInterval,
// counted over a sliding window of ten buckets: at most Threshold in any
// interval that starts on a bucket boundary, at most twice that in one that
// does not (see Exact). With Metric Concurrency, at most Threshold requests
// are in flight at once. With Strategy TokenBucket, a bucket of at most Burst
// tokens refills at Threshold per StatInterval, continuously, and a request
// of Batch n takes n tokens (with Throttle, waiting at most MaxQueueing for
// tokens still to come, as rate.Limiter.ReserveN). A zero optional field
// means its default.
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
	// Shadow puts the rule in shadow mode: evaluated and counted as if
	// enforced, it never refuses nor makes a request wait; what it would
	// have refused is counted and logged (docs/rollout.md). Flipping it by
	// a reload keeps the rule's counting state.
	Shadow bool `json:"shadow,omitempty" yaml:"shadow,omitempty"`
	// Tiers, when set, make the threshold of a QPS rule (direct strategy,
	// reject behavior, own resource) follow TierMetric: Tiers[i] applies
	// while the metric is above its Above and has not fallen below its
	// Below, the highest such tier winning; below them the rule admits
	// Threshold, or every request when Threshold is 0. See Tier.
	Tiers []Tier `json:"tiers,omitempty" yaml:"tiers,omitempty"`
	// TierMetric is what chooses the tier: TierAvgRT (default),
	// TierErrorRatio or TierCPU. It must be empty without Tiers.
	TierMetric TierMetric `json:"tierMetric,omitempty" yaml:"tierMetric,omitempty"`
	// Adaptive, when set on a concurrency rule, makes its limit follow the
	// resource's response time between Adaptive.Min and Adaptive.Max
	// instead of Threshold (see Adaptive). Nil means a static limit.
	Adaptive *Adaptive `json:"adaptive,omitempty" yaml:"adaptive,omitempty"`
	// PriorityWait is, for a local QPS rule of the direct strategy and the
	// reject behavior, the longest a critical entry (core.PriorityCritical)
	// the window refuses may wait to be admitted at the start of the
	// window's next bucket (StatInterval/10 later), counted against that
	// bucket, so the limit holds in every interval all the same. Zero means
	// critical entries are refused like the others.
	PriorityWait time.Duration `json:"priorityWait,omitempty" yaml:"priorityWait,omitempty"`
}

// MaxThreshold bounds every threshold; larger values are refused as absurd.
const MaxThreshold = 1e12

// interval returns StatInterval, or its default when it is zero.
func (r *Flow) interval() time.Duration { return cmp.Or(r.StatInterval, ruledef.StatInterval) }

// validate reports the first problem with the rule as an *Error, or nil.
func (r *Flow) validate() error {
	bad := func(field, format string, args ...any) error {
		return fieldErr("flow", r.Resource, field, format, args...)
	}
	if r.Resource == "" {
		return bad("Resource", "must not be empty")
	}
	if err := r.validateTiers(); err != nil {
		return err
	}
	if r.Adaptive != nil {
		if err := r.validateAdaptive(); err != nil {
			return err
		}
	}
	if err := r.validatePriorityWait(); err != nil {
		return err
	}
	// No Threshold: no limit below the first tier, or the adaptive section
	// sets the limit.
	unlimited := (len(r.Tiers) > 0 || r.Adaptive != nil) && r.Threshold == 0
	for _, err := range []error{
		checkEnum("flow", r.Resource, "Metric", r.Metric, true, QPS, Concurrency),
		checkEnum("flow", r.Resource, "Strategy", r.Strategy, true, Direct, WarmUp, TokenBucket),
		checkEnum("flow", r.Resource, "Behavior", r.Behavior, true, Reject, Throttle),
		checkThreshold("flow", r.Resource, "Threshold", r.Threshold),
	} {
		if err != nil && !(unlimited && err.(*Error).Field == "Threshold") {
			return err
		}
	}
	iv, qps, warm, bucket := r.StatInterval, or(r.Metric, QPS) == QPS, r.Strategy == WarmUp, r.Strategy == TokenBucket
	// A QPS rule of the direct strategy and the reject behavior on its own
	// resource counts whole requests in a window of StatInterval, which
	// cannot hold one when Threshold (or the local fallback's) is below 1.
	// (Warm-up admits lone requests at its allowance, pacing one per slot, a
	// token bucket holds at least one token, and an associated-resource rule
	// admits while the other resource is quiet.)
	plain := qps && or(r.Strategy, Direct) == Direct && or(r.Behavior, Reject) == Reject && r.RefResource == ""
	switch burst := cmp.Or(r.Burst, r.Threshold); {
	case !qps && r.Threshold != math.Trunc(r.Threshold):
		return bad("Threshold", "must be a whole number for the concurrency metric, got %v", r.Threshold)
	case iv != 0 && (iv < 10*time.Millisecond || iv > time.Hour || iv%time.Millisecond != 0):
		return bad("StatInterval", "must be a whole number of milliseconds in [10ms, 1h], got %v", iv)
	case iv != 0 && !qps:
		return bad("StatInterval", "has no meaning for the concurrency metric; leave it zero")
	case r.MaxQueueing < 0 || r.MaxQueueing > time.Hour:
		return bad("MaxQueueing", "must be in [0, 1h], got %v", r.MaxQueueing)
	case r.MaxQueueing != 0 && r.Behavior != Throttle:
		return bad("MaxQueueing", "is only used with the throttle behavior; leave it zero or set Behavior throttle")
	case !qps && r.Behavior == Throttle:
		return bad("Behavior", "throttle needs the qps metric (requests cannot be paced by concurrency)")
	case warm && !qps:
		return bad("Strategy", "warm-up needs the qps metric")
	case warm && (r.WarmUpPeriod <= 0 || r.WarmUpPeriod > 24*time.Hour):
		return bad("WarmUpPeriod", "must be in (0, 24h] with warm-up, got %v", r.WarmUpPeriod)
	case warm && r.ColdFactor != 0 && (r.ColdFactor <= 1 || r.ColdFactor > 1000 || math.IsNaN(r.ColdFactor)):
		return bad("ColdFactor", "must be in (1, 1000] (or 0 for 3), got %v", r.ColdFactor)
	case warm && r.RefResource != "":
		return bad("RefResource", "warm-up applies to the rule's own resource only")
	case !warm && r.WarmUpPeriod != 0:
		return bad("WarmUpPeriod", "is only used with the warm-up strategy")
	case !warm && r.ColdFactor != 0:
		return bad("ColdFactor", "is only used with the warm-up strategy")
	case !bucket && r.Burst != 0:
		return bad("Burst", "is only used with the token-bucket strategy; leave it zero or set Strategy token-bucket")
	case bucket && !qps:
		return bad("Strategy", "token-bucket needs the qps metric")
	case bucket && r.RefResource != "":
		return bad("RefResource", "token-bucket applies to the rule's own resource only")
	case bucket && r.Exact:
		return bad("Exact", "needs the direct strategy (a token bucket has no limit per interval)")
	case bucket && r.Burst == 0 && burst < 1:
		return bad("Burst", "must be set, at least 1, when Threshold is below 1 (zero means Threshold, %v)", r.Threshold)
	case bucket && (math.IsNaN(burst) || burst < 1 || burst > MaxThreshold):
		return bad("Burst", "must be in [1, %g] (or 0 for Threshold), got %v", MaxThreshold, r.Burst)
	case r.Exact && !qps:
		return bad("Exact", "needs the qps metric")
	case r.Exact && or(r.Strategy, Direct) != Direct:
		return bad("Exact", "needs the direct strategy (warm-up moves its limit)")
	case r.Exact && or(r.Behavior, Reject) != Reject:
		return bad("Exact", "needs the reject behavior (throttle already spaces requests evenly)")
	case r.Exact && r.RefResource != "":
		return bad("Exact", "applies to the rule's own resource only")
	case r.Exact && (r.Threshold != math.Trunc(r.Threshold) || r.Threshold > ruledef.MaxExactThreshold):
		return bad("Threshold", "must be a whole number of at most %d with exact, got %v", ruledef.MaxExactThreshold, r.Threshold)
	case r.RefResource != "" && r.RefResource == r.Resource:
		return bad("RefResource", "names the rule's own resource; leave it empty")
	case r.RefResource != "" && r.Behavior == Throttle:
		return bad("Behavior", "throttle cannot pace on another resource's traffic")
	case r.RefResource != "" && r.interval() != time.Second:
		return bad("StatInterval", "associated-resource rules read the one-second window; leave it zero")
	case plain && r.Threshold < 1 && !unlimited:
		return bad("Threshold", "%v per %v would refuse every request: the reject behavior counts whole requests in a window of StatInterval, so Threshold must be at least 1; %s",
			r.Threshold, r.interval(), belowOne(r.Threshold, r.interval()))
	case plain && r.Cluster != nil && r.Cluster.LocalThreshold != 0 && r.Cluster.LocalThreshold < 1:
		return bad("Cluster.LocalThreshold", "%v per %v would refuse every request while the store fails: it must be 0 or at least 1; %s",
			r.Cluster.LocalThreshold, r.interval(), belowOne(r.Cluster.LocalThreshold, r.interval()))
	case r.Cluster == nil:
		return nil
	}
	if err := r.Cluster.validate("flow", r.Resource, r.Metric); err != nil {
		return err
	}
	switch {
	case warm:
		return bad("Cluster", "needs the direct or token-bucket strategy (warm-up is not shared across instances)")
	case bucket && or(r.Behavior, Reject) != Reject:
		return bad("Cluster", "a shared token bucket needs the reject behavior")
	case r.Exact:
		return bad("Cluster", "cannot be exact: the shared window is the store's; use Cluster.Strict for exact decisions")
	case r.RefResource != "":
		return bad("Cluster", "applies to the rule's own resource only")
	}
	return nil
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

func checkThreshold(kind, resource, field string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		return fieldErr(kind, resource, field, "must be a positive number, got %v", v)
	}
	if v > MaxThreshold {
		return fieldErr(kind, resource, field, "must be at most %g, got %v", MaxThreshold, v)
	}
	return nil
}
