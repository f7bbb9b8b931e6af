package rules

import "math"

// Cluster makes a rule's Threshold a budget shared by every instance of the
// service through the engine's cluster store (sluice.WithCluster): a flow
// rule's Threshold per StatInterval, a param rule's per Duration per value,
// whichever instance serves the requests. It needs the QPS metric; a flow
// rule also the direct or token-bucket strategy and its own resource. The
// zero value (leases, local fallback) suits most rules. See docs/design/cluster.md.
type Cluster struct {
	// Mode is how Threshold counts: total (default), the fleet's total; or
	// per-instance, the budget being Threshold times the live instances
	// (Sentinel's AVG_LOCAL).
	Mode ClusterMode `json:"mode,omitempty" yaml:"mode,omitempty"`
	// Fallback is what the rule does while the store fails or does not
	// answer in time: local (default), pass or block.
	Fallback ClusterFallback `json:"fallback,omitempty" yaml:"fallback,omitempty"`
	// LocalThreshold is, with the local fallback, what this instance admits
	// on its own while the store fails; zero means its share, Threshold
	// divided by the live instances (total mode) or Threshold (per-instance
	// mode). On a param rule it is each value's limit, a whole number.
	LocalThreshold float64 `json:"localThreshold,omitempty" yaml:"localThreshold,omitempty"`
	// Strict sends every decision to the store (concurrent entries sharing
	// a round trip) instead of leasing permits: exact at any rate, for low
	// rates such as 20 per hour. A param rule is strict unless Leases is
	// set.
	Strict bool `json:"strict,omitempty" yaml:"strict,omitempty"`
	// Leases makes a param rule lease permits per value, as flow rules do:
	// worth it only for values each used at high rates, since a lease is
	// unusable by the other instances until it expires. Not with Strict.
	Leases bool `json:"leases,omitempty" yaml:"leases,omitempty"`
}

// validate reports the first problem with the section of a rule of kind on
// resource counting metric, as an *Error naming the field.
func (c *Cluster) validate(kind, resource string, metric FlowMetric) error {
	if err := checkEnum(kind, resource, "Cluster.Mode", c.Mode, true, ClusterTotal, ClusterPerInstance); err != nil {
		return err
	}
	if err := checkEnum(kind, resource, "Cluster.Fallback", c.Fallback, true, FallbackLocal, FallbackPass, FallbackBlock); err != nil {
		return err
	}
	switch {
	case math.IsNaN(c.LocalThreshold) || math.IsInf(c.LocalThreshold, 0) || c.LocalThreshold < 0 || c.LocalThreshold > MaxThreshold:
		return fieldErr(kind, resource, "Cluster.LocalThreshold", "must be in [0, %g], got %v", MaxThreshold, c.LocalThreshold)
	case c.LocalThreshold != 0 && or(c.Fallback, FallbackLocal) != FallbackLocal:
		return fieldErr(kind, resource, "Cluster.LocalThreshold", "is only used with the local fallback; leave it zero or set Fallback local")
	case c.Strict && c.Leases:
		return fieldErr(kind, resource, "Cluster.Leases", "contradicts Strict (every entry asks the store); set one of them")
	case or(metric, QPS) != QPS:
		return fieldErr(kind, resource, "Cluster", "needs the qps metric (in-flight requests are counted per instance)")
	}
	return nil
}
