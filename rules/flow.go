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
// counted over a sliding window of ten buckets (StatInterval/10 each): at
// most Threshold in any interval of StatInterval that starts on a bucket
// boundary, and at most twice that in one that does not (see Exact). With
// Metric Concurrency, at most Threshold requests are in flight at once.
// With Strategy TokenBucket, a bucket of at most Burst tokens refills at
// Threshold per StatInterval, continuously, and a request of Batch n takes n
// tokens (Reject: at once or not at all; Throttle: waiting at most
// MaxQueueing for tokens still to come, as rate.Limiter.ReserveN).
//
// The zero values of the optional fields are: Metric QPS, Strategy Direct,
// Behavior Reject, StatInterval one second, ColdFactor 3, no queueing, the
// bucketed window, and the rule's own resource as the one measured.
type Flow struct {
	// ID is an optional label for the rule, shown in block errors and logs.
	// It plays no part in matching rules across reloads.
	ID string `json:"id,omitempty" yaml:"id,omitempty"`
	// Resource is the name of the resource the rule protects. Required.
	Resource string `json:"resource" yaml:"resource"`
	// Metric is what the rule counts: QPS (default) or Concurrency.
	Metric FlowMetric `json:"metric,omitempty" yaml:"metric,omitempty"`
	// Threshold is the limit: requests per StatInterval for QPS, requests
	// in flight for Concurrency. It must be positive, and at least 1 for a
	// QPS rule of the direct strategy and the reject behavior on its own
	// resource (a window cannot admit part of a request: write a rate below
	// one per interval with a longer StatInterval, Throttle or TokenBucket).
	Threshold float64 `json:"threshold" yaml:"threshold"`
	// Strategy is Direct (default), WarmUp or TokenBucket. WarmUp and
	// TokenBucket need Metric QPS.
	Strategy TokenStrategy `json:"strategy,omitempty" yaml:"strategy,omitempty"`
	// Behavior is Reject (default) or Throttle. Throttle needs Metric QPS.
	Behavior ControlBehavior `json:"behavior,omitempty" yaml:"behavior,omitempty"`
	// MaxQueueing is, with Throttle, the longest a request may wait for its
	// turn; a request whose wait would be longer is refused at once. Zero
	// means requests never wait: one is admitted each 1/rate, the others are
	// refused.
	MaxQueueing time.Duration `json:"maxQueueing,omitempty" yaml:"maxQueueing,omitempty"`
	// WarmUpPeriod is, with WarmUp, how long a cold resource takes to reach
	// Threshold. Required with WarmUp.
	WarmUpPeriod time.Duration `json:"warmUpPeriod,omitempty" yaml:"warmUpPeriod,omitempty"`
	// ColdFactor is, with WarmUp, how many times below Threshold a cold
	// resource starts (it admits Threshold/ColdFactor). Zero means 3; other
	// values must be greater than 1.
	ColdFactor float64 `json:"coldFactor,omitempty" yaml:"coldFactor,omitempty"`
	// StatInterval is, for QPS, the period Threshold is counted over. Zero
	// means one second (Threshold is then QPS). It must be a whole number of
	// milliseconds, at least 10 ms and at most one hour. Associated-resource
	// rules read the other resource's one-second window and need one
	// second.
	StatInterval time.Duration `json:"statInterval,omitempty" yaml:"statInterval,omitempty"`
	// Burst is, with TokenBucket, the most tokens the bucket stores: how
	// many requests a resource idle for Burst/Threshold intervals admits at
	// once. Zero means Threshold. It need not be a whole number; it must be
	// at least 1 (so that a request of one can pass) and at most
	// MaxThreshold, so a Threshold below 1 needs an explicit Burst.
	Burst float64 `json:"burst,omitempty" yaml:"burst,omitempty"`
	// Exact, for a QPS rule with the direct strategy and the reject
	// behavior, makes the limit hold in every interval of StatInterval's
	// length, wherever it starts: at most Threshold admissions in any such
	// interval. The rule keeps the admission times of its last Threshold
	// requests instead of bucket counts, so Threshold must then be a whole
	// number of at most ruledef.MaxExactThreshold.
	Exact bool `json:"exact,omitempty" yaml:"exact,omitempty"`
	// RefResource, when set, makes the rule measure that other resource
	// instead of its own: Resource is blocked while RefResource's QPS (or
	// concurrency) is over Threshold. Used to let a write path yield to a
	// read path, for example.
	RefResource string `json:"refResource,omitempty" yaml:"refResource,omitempty"`
	// Cluster, when set, makes Threshold a budget shared by every instance
	// of the service through the engine's cluster store instead of a limit
	// of this engine alone (see Cluster). Nil means a local rule.
	Cluster *Cluster `json:"cluster,omitempty" yaml:"cluster,omitempty"`
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

func (r *Flow) validateEnums(kind string) error {
	if err := checkEnum(kind, r.Resource, "Metric", r.Metric, true, QPS, Concurrency); err != nil {
		return err
	}
	if err := checkEnum(kind, r.Resource, "Strategy", r.Strategy, true, Direct, WarmUp, TokenBucket); err != nil {
		return err
	}
	return checkEnum(kind, r.Resource, "Behavior", r.Behavior, true, Reject, Throttle)
}

// Validate reports the first problem with the rule as an *Error, or nil.
func (r *Flow) Validate() error {
	const kind = "flow"
	switch {
	case r.Resource == "":
		return fieldErr(kind, r.Resource, "Resource", "must not be empty")
	}
	if err := r.validateEnums(kind); err != nil {
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
	if r.Adaptive != nil && r.Threshold == 0 {
		// Unused: the adaptive section sets the limit.
	} else if err := checkThreshold(kind, r.Resource, "Threshold", r.Threshold); err != nil {
		return err
	}
	if r.Metric == Concurrency && r.Threshold != math.Trunc(r.Threshold) {
		return fieldErr(kind, r.Resource, "Threshold", "must be a whole number for the concurrency metric, got %v", r.Threshold)
	}
	if r.StatInterval != 0 {
		iv := r.StatInterval
		if iv < 10*time.Millisecond || iv > time.Hour || iv%time.Millisecond != 0 {
			return fieldErr(kind, r.Resource, "StatInterval", "must be a whole number of milliseconds in [10ms, 1h], got %v", iv)
		}
		if r.Metric == Concurrency {
			return fieldErr(kind, r.Resource, "StatInterval", "has no meaning for the concurrency metric; leave it zero")
		}
	}
	if r.MaxQueueing < 0 || r.MaxQueueing > time.Hour {
		return fieldErr(kind, r.Resource, "MaxQueueing", "must be in [0, 1h], got %v", r.MaxQueueing)
	}
	if r.MaxQueueing != 0 && r.Behavior != Throttle {
		return fieldErr(kind, r.Resource, "MaxQueueing", "is only used with the throttle behavior; leave it zero or set Behavior throttle")
	}
	if r.Metric == Concurrency && r.Behavior == Throttle {
		return fieldErr(kind, r.Resource, "Behavior", "throttle needs the qps metric (requests cannot be paced by concurrency)")
	}
	if r.Strategy == WarmUp {
		if or(r.Metric, QPS) != QPS {
			return fieldErr(kind, r.Resource, "Strategy", "warm-up needs the qps metric")
		}
		if r.WarmUpPeriod <= 0 || r.WarmUpPeriod > 24*time.Hour {
			return fieldErr(kind, r.Resource, "WarmUpPeriod", "must be in (0, 24h] with warm-up, got %v", r.WarmUpPeriod)
		}
		if r.ColdFactor != 0 && (r.ColdFactor <= 1 || r.ColdFactor > 1000 || math.IsNaN(r.ColdFactor)) {
			return fieldErr(kind, r.Resource, "ColdFactor", "must be in (1, 1000] (or 0 for 3), got %v", r.ColdFactor)
		}
		if r.RefResource != "" {
			return fieldErr(kind, r.Resource, "RefResource", "warm-up applies to the rule's own resource only")
		}
	} else {
		if r.WarmUpPeriod != 0 {
			return fieldErr(kind, r.Resource, "WarmUpPeriod", "is only used with the warm-up strategy")
		}
		if r.ColdFactor != 0 {
			return fieldErr(kind, r.Resource, "ColdFactor", "is only used with the warm-up strategy")
		}
	}
	if err := r.validateBurst(); err != nil {
		return err
	}
	if r.Exact {
		switch {
		case or(r.Metric, QPS) != QPS:
			return fieldErr(kind, r.Resource, "Exact", "needs the qps metric")
		case or(r.Strategy, Direct) != Direct:
			return fieldErr(kind, r.Resource, "Exact", "needs the direct strategy (warm-up moves its limit)")
		case or(r.Behavior, Reject) != Reject:
			return fieldErr(kind, r.Resource, "Exact", "needs the reject behavior (throttle already spaces requests evenly)")
		case r.RefResource != "":
			return fieldErr(kind, r.Resource, "Exact", "applies to the rule's own resource only")
		case r.Threshold != math.Trunc(r.Threshold) || r.Threshold > ruledef.MaxExactThreshold:
			return fieldErr(kind, r.Resource, "Threshold", "must be a whole number of at most %d with exact, got %v", ruledef.MaxExactThreshold, r.Threshold)
		}
	}
	if r.RefResource != "" {
		if r.RefResource == r.Resource {
			return fieldErr(kind, r.Resource, "RefResource", "names the rule's own resource; leave it empty")
		}
		if r.Behavior == Throttle {
			return fieldErr(kind, r.Resource, "Behavior", "throttle cannot pace on another resource's traffic")
		}
		if r.interval() != time.Second {
			return fieldErr(kind, r.Resource, "StatInterval", "associated-resource rules read the one-second window; leave it zero")
		}
	}
	if err := r.validateAdmits(); err != nil {
		return err
	}
	if r.Cluster != nil {
		return r.validateCluster()
	}
	return nil
}

// validateAdmits refuses a rule that could never admit a request: a QPS
// rule of the direct strategy and the reject behavior on its own resource
// counts whole requests in a window of StatInterval, which cannot hold one
// when Threshold is below 1 (nor can its local fallback's window, below 1
// per StatInterval). The message says what to write instead. (Warm-up rules
// admit lone requests at their allowance, pacing rules one per slot, token
// buckets hold at least one token, and associated-resource rules admit
// while the other resource is quiet.)
func (r *Flow) validateAdmits() error {
	if or(r.Metric, QPS) != QPS || or(r.Strategy, Direct) != Direct || or(r.Behavior, Reject) != Reject || r.RefResource != "" {
		return nil
	}
	if r.Threshold < 1 {
		return fieldErr("flow", r.Resource, "Threshold", "%v per %v would refuse every request: the reject behavior counts whole requests in a window of StatInterval, so Threshold must be at least 1; %s",
			r.Threshold, r.interval(), belowOne(r.Threshold, r.interval()))
	}
	if c := r.Cluster; c != nil && c.LocalThreshold != 0 && c.LocalThreshold < 1 {
		return fieldErr("flow", r.Resource, "Cluster.LocalThreshold", "%v per %v would refuse every request while the store fails: it must be 0 or at least 1; %s",
			c.LocalThreshold, r.interval(), belowOne(c.LocalThreshold, r.interval()))
	}
	return nil
}

// belowOne says how to write a rate of t per iv, below one request per
// interval: a longer StatInterval holding one request, when one of at most
// an hour does, or pacing, or a token bucket.
func belowOne(t float64, iv time.Duration) string {
	alt := "for that rate set Behavior throttle (one request every StatInterval/Threshold) or Strategy token-bucket with Burst 1"
	if long := float64(iv) / t; long <= float64(time.Hour) {
		d := time.Duration(math.Ceil(long/float64(time.Millisecond))) * time.Millisecond
		return fmt.Sprintf("write Threshold 1 with StatInterval %v, or %s", d, alt)
	}
	return alt + " (one request per StatInterval of at most 1h is faster)"
}

// validateBurst checks the token-bucket fields: Strategy TokenBucket and
// Burst.
func (r *Flow) validateBurst() error {
	const kind = "flow"
	if r.Strategy != TokenBucket {
		if r.Burst != 0 {
			return fieldErr(kind, r.Resource, "Burst", "is only used with the token-bucket strategy; leave it zero or set Strategy token-bucket")
		}
		return nil
	}
	switch {
	case or(r.Metric, QPS) != QPS:
		return fieldErr(kind, r.Resource, "Strategy", "token-bucket needs the qps metric")
	case r.RefResource != "":
		return fieldErr(kind, r.Resource, "RefResource", "token-bucket applies to the rule's own resource only")
	case r.Exact:
		return fieldErr(kind, r.Resource, "Exact", "needs the direct strategy (a token bucket has no limit per interval)")
	}
	b := cmp.Or(r.Burst, r.Threshold)
	if math.IsNaN(b) || b < 1 || b > MaxThreshold {
		if r.Burst == 0 {
			return fieldErr(kind, r.Resource, "Burst", "must be set, at least 1, when Threshold is below 1 (zero means Threshold, %v)", r.Threshold)
		}
		return fieldErr(kind, r.Resource, "Burst", "must be in [1, %g] (or 0 for Threshold), got %v", MaxThreshold, r.Burst)
	}
	return nil
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

// isolation is a rule of the file key "isolation": an in-flight cap, read
// as the flow rule of the concurrency metric that enforces it (one
// mechanism caps requests in flight; see docs/architecture.md).
type isolation struct {
	ID        string `yaml:"id,omitempty"`
	Resource  string `yaml:"resource"`
	Threshold int64  `yaml:"threshold"`
}

func (r isolation) flow() Flow {
	return Flow{ID: r.ID, Resource: r.Resource, Metric: Concurrency, Threshold: float64(r.Threshold)}
}
