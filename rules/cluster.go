package rules

import "math"

// Cluster makes a flow rule's Threshold a budget shared by every instance of
// the service through the engine's cluster store (sluice.WithCluster):
// Threshold per StatInterval in total, whichever instance serves the
// requests. A flow rule whose Cluster is nil is local to its engine. On a
// param rule (rules.Param.Cluster) it shares each value's limit the same
// way, Threshold per Duration per value; see Param.
//
// A cluster rule needs the QPS metric, the direct strategy and the rule's
// own resource; with the reject behavior the store counts a sliding window
// of StatInterval, with the throttle behavior it paces the fleet's requests
// StatInterval/Threshold apart, each waiting at most MaxQueueing. The zero
// value (leases, local fallback share Threshold divided by the live
// instances) suits most rules. See docs/cluster.md.
type Cluster struct {
	// Mode is how Threshold counts: total (default), the fleet's total per
	// StatInterval; or per-instance, a share per instance, the budget
	// being Threshold times the live instances (Sentinel's AVG_LOCAL).
	Mode ClusterMode `json:"mode,omitempty" yaml:"mode,omitempty"`
	// Fallback is what the rule does while the store fails or does not
	// answer within the engine's cluster timeout: local (default), pass or
	// block.
	Fallback ClusterFallback `json:"fallback,omitempty" yaml:"fallback,omitempty"`
	// LocalThreshold is, with the local fallback, the requests per
	// StatInterval this instance admits on its own while the store fails.
	// Zero means the instance's share of the budget: Threshold divided by
	// the number of live instances at the time of the decision (total
	// mode), or Threshold (per-instance mode). It must be non-negative, and zero with another
	// fallback. On a param rule it is each value's local limit per
	// Duration (values listed in Exceptions use their threshold divided by
	// the live instances), and a whole number.
	LocalThreshold float64 `json:"localThreshold,omitempty" yaml:"localThreshold,omitempty"`
	// Strict sends every decision to the store (one request per entry,
	// concurrent entries sharing one round trip) instead of leasing
	// permits: exact at any rate, at the cost of a round trip per entry.
	// For low rates, such as 20 per hour. The zero value leases for a flow
	// rule; a param rule is strict unless Leases is set.
	Strict bool `json:"strict,omitempty" yaml:"strict,omitempty"`
	// Leases, for a param rule, leases permits per value (as flow rules
	// do) instead of asking the store on every entry, which param rules do
	// by default: worth it only for values each used at high rates, since
	// what a lease holds is unusable by the other instances until it
	// expires (see docs/cluster.md). A flow rule leases anyway. It must not
	// be set with Strict.
	Leases bool `json:"leases,omitempty" yaml:"leases,omitempty"`
}

// validate reports the first problem with the section's own fields, for a
// rule of kind on resource, as an *Error naming the field.
func (c *Cluster) validate(kind, resource string) error {
	switch {
	case checkEnum(kind, resource, "Cluster.Mode", c.Mode, true, ClusterTotal, ClusterPerInstance) != nil:
		return checkEnum(kind, resource, "Cluster.Mode", c.Mode, true, ClusterTotal, ClusterPerInstance)
	case checkEnum(kind, resource, "Cluster.Fallback", c.Fallback, true, FallbackLocal, FallbackPass, FallbackBlock) != nil:
		return checkEnum(kind, resource, "Cluster.Fallback", c.Fallback, true, FallbackLocal, FallbackPass, FallbackBlock)
	case math.IsNaN(c.LocalThreshold) || math.IsInf(c.LocalThreshold, 0) || c.LocalThreshold < 0 || c.LocalThreshold > MaxThreshold:
		return fieldErr(kind, resource, "Cluster.LocalThreshold", "must be in [0, %g], got %v", MaxThreshold, c.LocalThreshold)
	case c.LocalThreshold != 0 && or(c.Fallback, FallbackLocal) != FallbackLocal:
		return fieldErr(kind, resource, "Cluster.LocalThreshold", "is only used with the local fallback; leave it zero or set Fallback local")
	case c.Strict && c.Leases:
		return fieldErr(kind, resource, "Cluster.Leases", "contradicts Strict (every entry asks the store); set one of them")
	}
	return nil
}

// validateCluster reports the first problem with r's cluster section, which
// must be set, as an *Error naming the field.
func (r *Flow) validateCluster() error {
	const kind = "flow"
	if err := r.Cluster.validate(kind, r.Resource); err != nil {
		return err
	}
	switch {
	case or(r.Metric, QPS) != QPS:
		return fieldErr(kind, r.Resource, "Cluster", "needs the qps metric (in-flight requests are counted per instance)")
	case r.Strategy == WarmUp:
		return fieldErr(kind, r.Resource, "Cluster", "needs the direct or token-bucket strategy (warm-up is not shared across instances)")
	case r.Strategy == TokenBucket && or(r.Behavior, Reject) != Reject:
		return fieldErr(kind, r.Resource, "Cluster", "a shared token bucket needs the reject behavior")
	case r.Exact:
		return fieldErr(kind, r.Resource, "Cluster", "cannot be exact: the shared window is the store's; use Cluster.Strict for exact decisions")
	case r.RefResource != "":
		return fieldErr(kind, r.Resource, "Cluster", "applies to the rule's own resource only")
	}
	return nil
}

// Equal reports whether r and o are the same rule: equal fields, and equal
// cluster and adaptive sections (both nil, or the same values).
func (r Flow) Equal(o Flow) bool {
	rc, oc := r.Cluster, o.Cluster
	ra, oa := r.Adaptive, o.Adaptive
	r.Cluster, o.Cluster, r.Adaptive, o.Adaptive = nil, nil, nil, nil
	if r != o || (rc == nil) != (oc == nil) || (ra == nil) != (oa == nil) {
		return false
	}
	return (rc == nil || *rc == *oc) && (ra == nil || *ra == *oa)
}

// Clone returns a copy of r that shares no memory with it (its own cluster
// section).
func (r Flow) Clone() Flow {
	if r.Cluster != nil {
		c := *r.Cluster
		r.Cluster = &c
	}
	if r.Adaptive != nil {
		a := *r.Adaptive
		r.Adaptive = &a
	}
	return r
}

// validateCluster reports the first problem with r's cluster section, which
// must be set, as an *Error naming the field.
func (r *Param) validateCluster() error {
	const kind = "param"
	c := r.Cluster
	if err := c.validate(kind, r.Resource); err != nil {
		return err
	}
	switch {
	case or(r.Metric, QPS) != QPS:
		return fieldErr(kind, r.Resource, "Cluster", "needs the qps metric (in-flight requests are counted per instance)")
	case or(c.Fallback, FallbackLocal) == FallbackLocal && c.LocalThreshold != math.Trunc(c.LocalThreshold):
		return fieldErr(kind, r.Resource, "Cluster.LocalThreshold", "must be a whole number for a param rule (each value's local bucket counts whole requests), got %v", c.LocalThreshold)
	}
	return nil
}
