package rules

import "math"

// validateConcurrency checks the section of a concurrency rule, whose
// Threshold is the fleet's in-flight maximum: slots taken in the store at
// entry and given back at exit. Mode must be total (a per-instance
// concurrency limit is a local rule), Strict and Leases have no meaning
// (every entry asks the store), and LocalThreshold, the in-flight maximum
// of one instance while the store fails, is a whole number.
func (cl *Cluster) validateConcurrency(c *check) {
	c.fail(c.kind == "param", "Cluster", "a fleet-wide concurrency limit is for flow rules; a param concurrency rule counts per instance")
	c.fail(cl.Mode == ClusterPerInstance, "Cluster.Mode", "per-instance is a local concurrency limit: drop the cluster section, or use mode total for a fleet-wide one")
	c.fail(cl.Strict, "Cluster.Strict", "has no meaning for the concurrency metric (every entry takes its slot in the store); leave it false")
	c.fail(cl.Leases, "Cluster.Leases", "has no meaning for the concurrency metric (slots are taken per entry); leave it false")
	c.fail(cl.LocalThreshold != math.Trunc(cl.LocalThreshold), "Cluster.LocalThreshold", "must be a whole number of in-flight requests for the concurrency metric, got %v", cl.LocalThreshold)
}
