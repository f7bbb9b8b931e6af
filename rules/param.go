package rules

import (
	"cmp"
	"time"

	"github.com/sluice-go/sluice/internal/ruledef"
)

// Param limits one resource per value of one of its arguments: "10 requests
// per second per user", "100 per day per API key", "5 in flight per tenant".
// Each distinct value of the argument gets its own limit, so a hot value is
// refused while the others keep flowing.
//
// The argument is named by Key (an attachment given with
// sluice.WithAttachment) or, when Key is empty, by Index (a position in
// sluice.WithArgs). Values are identified by their string form: the string
// itself, the decimal form of an integer ("42" for int(42), int64(42) and
// uint8(42) alike), or, for other types, a %v-like rendering of their
// structure (String and Error methods are not called: pass s.String()
// yourself for such types). An entry without the argument (too few positional
// arguments, no such attachment, a nil value) is not counted by the rule and
// passes it.
//
// With Metric QPS and Behavior Reject (the default) every value owns a token
// bucket that holds at most Threshold+Burst tokens, starts full, and is
// refilled continuously at Threshold tokens per Duration (exactly: a value
// earns one token every Duration/Threshold, kept to the nanosecond with the
// remainder carried, so exactly Threshold tokens per Duration). An entry takes
// Batch tokens or is refused. A quiet value can therefore spend Threshold+Burst
// at once, then Threshold per Duration.
//
// With Behavior Throttle each value's requests are spaced evenly,
// Duration/Threshold apart, and a request waits at most MaxQueueing for its
// turn.
//
// With Metric Concurrency each value may have at most Threshold requests in
// flight (by batch).
//
// Capacity bounds how many distinct values are tracked; see Capacity.
//
// With Cluster set, each value's limit is a budget shared by every instance
// of the service through the engine's cluster store (sluice.WithCluster):
// Threshold per Duration per value in total, whichever instance serves the
// requests. See Cluster and docs/cluster.md.
type Param struct {
	// ID is an optional label for the rule, shown in block errors and logs.
	// It plays no part in matching rules across reloads.
	ID string `json:"id,omitempty" yaml:"id,omitempty"`
	// Resource is the name of the resource the rule protects. Required.
	Resource string `json:"resource" yaml:"resource"`
	// Index is the position of the argument in sluice.WithArgs, from 0 (the
	// default: the first argument). It must be in [0, ruledef.MaxParamIndex] and is
	// unused (must be 0) when Key is set.
	Index int `json:"index,omitempty" yaml:"index,omitempty"`
	// Key, when set, names the attachment (sluice.WithAttachment) whose value
	// the rule counts, instead of a positional argument.
	Key string `json:"key,omitempty" yaml:"key,omitempty"`
	// Metric is what the rule counts per value: QPS (default; requests per
	// Duration) or Concurrency (requests in flight).
	Metric FlowMetric `json:"metric,omitempty" yaml:"metric,omitempty"`
	// Threshold is the limit of each value not listed in Exceptions: requests
	// per Duration for QPS, requests in flight for Concurrency. It must be in
	// [1, MaxThreshold].
	Threshold int64 `json:"threshold" yaml:"threshold"`
	// Burst is, for QPS with Behavior Reject, how many requests beyond
	// Threshold a value that has been quiet may make at once: its bucket holds
	// Threshold+Burst tokens. Zero means none. It must be in [0,
	// MaxThreshold] and zero for other metrics and behaviors.
	Burst int64 `json:"burst,omitempty" yaml:"burst,omitempty"`
	// Duration is, for QPS, the period Threshold is counted over: one second
	// (the default when zero), a minute, an hour, a day, or any whole number
	// of milliseconds in [1ms, ruledef.MaxParamDuration]. It must be zero for
	// Concurrency.
	Duration time.Duration `json:"duration,omitempty" yaml:"duration,omitempty"`
	// Behavior is Reject (default: a request over the limit is refused at
	// once) or Throttle (requests of a value are paced evenly; needs QPS).
	Behavior ControlBehavior `json:"behavior,omitempty" yaml:"behavior,omitempty"`
	// MaxQueueing is, with Throttle, the longest a request may wait for its
	// value's turn; a request whose wait would be longer is refused at once.
	// Zero means requests never wait. It must be in [0, 1h], and zero unless
	// Behavior is Throttle.
	MaxQueueing time.Duration `json:"maxQueueing,omitempty" yaml:"maxQueueing,omitempty"`
	// Exceptions gives listed values their own threshold, in place of
	// Threshold (Burst still applies), keyed by the value's string form:
	// {"vip-1": 100, "42": 5}. A threshold of 0 refuses every request of
	// that value. Nil means no exceptions. At most ruledef.MaxParamExceptions
	// entries, each threshold in [0, MaxThreshold].
	Exceptions map[string]int64 `json:"exceptions,omitempty" yaml:"exceptions,omitempty"`
	// Capacity is the most distinct values whose state the rule keeps; zero
	// means ruledef.ParamCapacity. When it is full, the value least worth
	// keeping (seen once and not recently, in preference to frequently seen
	// ones) is forgotten; a forgotten value starts again with a full bucket
	// when it comes back. Values with requests in flight are never forgotten
	// (see docs/param.md). It must be in [0, ruledef.MaxParamCapacity]. Size it to
	// the number of distinct values active within one Duration.
	Capacity int `json:"capacity,omitempty" yaml:"capacity,omitempty"`
	// Cluster, when set, makes each value's Threshold (with its Burst and
	// Exceptions) a budget shared by every instance through the engine's
	// cluster store: one budget per value, kept in the store under a
	// digest of the value. It needs the QPS metric; Reject shares a token
	// bucket, Throttle a schedule. Unlike a flow rule, a param rule asks
	// the store on every entry (concurrent entries share one round trip)
	// unless Cluster.Leases is set. While the store fails, the local
	// fallback limits each value to its share, LocalThreshold or
	// Threshold divided by the live instances (at least 1), per Duration.
	// Nil means a local rule. See docs/cluster.md.
	Cluster *Cluster `json:"cluster,omitempty" yaml:"cluster,omitempty"`
}

// window returns Duration, or its default when it is zero.
func (r *Param) window() time.Duration { return cmp.Or(r.Duration, ruledef.ParamDuration) }

// validate reports the first problem with the rule as an *Error, or nil.
func (r *Param) validate() error {
	const kind = "param"
	if r.Resource == "" {
		return fieldErr(kind, r.Resource, "Resource", "must not be empty")
	}
	for _, err := range []error{
		checkEnum(kind, r.Resource, "Metric", r.Metric, true, QPS, Concurrency),
		checkEnum(kind, r.Resource, "Behavior", r.Behavior, true, Reject, Throttle),
	} {
		if err != nil {
			return err
		}
	}
	switch {
	case r.Index < 0 || r.Index > ruledef.MaxParamIndex:
		return fieldErr(kind, r.Resource, "Index", "must be in [0, %d], got %d", ruledef.MaxParamIndex, r.Index)
	case r.Key != "" && r.Index != 0:
		return fieldErr(kind, r.Resource, "Index", "must be 0 when Key names an attachment, got %d", r.Index)
	case r.Threshold < 1 || r.Threshold > MaxThreshold:
		return fieldErr(kind, r.Resource, "Threshold", "must be in [1, %g], got %d", MaxThreshold, r.Threshold)
	case r.Burst < 0 || r.Burst > MaxThreshold:
		return fieldErr(kind, r.Resource, "Burst", "must be in [0, %g], got %d", MaxThreshold, r.Burst)
	case r.Burst != 0 && (or(r.Metric, QPS) != QPS || or(r.Behavior, Reject) != Reject):
		return fieldErr(kind, r.Resource, "Burst", "is only used with the qps metric and the reject behavior; leave it zero")
	case r.Metric == Concurrency && r.Behavior == Throttle:
		return fieldErr(kind, r.Resource, "Behavior", "throttle needs the qps metric (requests cannot be paced by concurrency)")
	case r.Metric == Concurrency && r.Duration != 0:
		return fieldErr(kind, r.Resource, "Duration", "has no meaning for the concurrency metric; leave it zero")
	case r.Duration != 0 && (r.Duration < time.Millisecond || r.Duration > ruledef.MaxParamDuration || r.Duration%time.Millisecond != 0):
		return fieldErr(kind, r.Resource, "Duration", "must be a whole number of milliseconds in [1ms, %v], got %v", ruledef.MaxParamDuration, r.Duration)
	case r.MaxQueueing < 0 || r.MaxQueueing > time.Hour:
		return fieldErr(kind, r.Resource, "MaxQueueing", "must be in [0, 1h], got %v", r.MaxQueueing)
	case r.MaxQueueing != 0 && r.Behavior != Throttle:
		return fieldErr(kind, r.Resource, "MaxQueueing", "is only used with the throttle behavior; leave it zero or set Behavior throttle")
	case r.Capacity < 0 || r.Capacity > ruledef.MaxParamCapacity:
		return fieldErr(kind, r.Resource, "Capacity", "must be in [0, %d] (0 for %d), got %d", ruledef.MaxParamCapacity, ruledef.ParamCapacity, r.Capacity)
	case len(r.Exceptions) > ruledef.MaxParamExceptions:
		return fieldErr(kind, r.Resource, "Exceptions", "must have at most %d entries, got %d", ruledef.MaxParamExceptions, len(r.Exceptions))
	}
	bad := ""
	found := false
	for v, t := range r.Exceptions {
		if (t < 0 || t > MaxThreshold) && (!found || v < bad) {
			bad, found = v, true // report the first in sorted order, not map order
		}
	}
	if found {
		return fieldErr(kind, r.Resource, "Exceptions", "threshold of %q must be in [0, %g], got %d", bad, MaxThreshold, r.Exceptions[bad])
	}
	if r.Cluster != nil {
		return r.validateCluster()
	}
	return nil
}
