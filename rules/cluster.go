package rules

import (
	"cmp"
	"math"
)

// Cluster makes a rule's Threshold a budget shared by every instance of the
// service through the engine's cluster store (sluice.WithCluster). It needs
// the QPS metric. The zero value (leases, local fallback) suits most rules.
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
	// Apps, if set, lists the only callers (sluice.WithCaller) that may use the budget; see docs/cluster-limits.md.
	Apps []string `json:"apps,omitempty" yaml:"apps,omitempty"`
}

// validate checks the section of a rule counting metric.
func (cl *Cluster) validate(c *check, metric FlowMetric) {
	enum(c, "Cluster.Mode", cl.Mode, true, ClusterTotal, ClusterPerInstance)
	enum(c, "Cluster.Fallback", cl.Fallback, true, FallbackLocal, FallbackPass, FallbackBlock)
	lt := cl.LocalThreshold
	c.fail(math.IsNaN(lt) || math.IsInf(lt, 0) || lt < 0 || lt > MaxThreshold,
		"Cluster.LocalThreshold", "must be in [0, %g], got %v", MaxThreshold, lt)
	c.fail(lt != 0 && cmp.Or(cl.Fallback, FallbackLocal) != FallbackLocal, "Cluster.LocalThreshold",
		"is only used with the local fallback; leave it zero or set Fallback local")
	c.fail(cl.Strict && cl.Leases, "Cluster.Leases", "contradicts Strict (every entry asks the store); set one of them")
	cl.validateConcurrency(c, metric == Concurrency)
	c.callers("Cluster.Apps", cl.Apps)
}

// validateConcurrency checks a fleet-wide in-flight limit's section (docs/cluster-limits.md).
func (cl *Cluster) validateConcurrency(c *check, conc bool) {
	c.fail(conc && cl.Mode == ClusterPerInstance, "Cluster.Mode",
		"per-instance is a local concurrency limit: drop the cluster section, or use mode total for a fleet-wide one")
	c.fail(conc && cl.Strict, "Cluster.Strict",
		"has no meaning for the concurrency metric (every entry takes its slot in the store); leave it false")
	c.fail(conc && cl.Leases, "Cluster.Leases",
		"has no meaning for the concurrency metric (slots are taken per entry); leave it false")
	c.fail(conc && cl.LocalThreshold != math.Trunc(cl.LocalThreshold), "Cluster.LocalThreshold",
		"must be a whole number of in-flight requests for the concurrency metric, got %v", cl.LocalThreshold)
}
