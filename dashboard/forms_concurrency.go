package dashboard

// fleetConcurrencyField shapes a cluster field of the concurrency form
// (a fleet-wide in-flight limit, docs/cluster-limits.md) and reports
// whether the form shows it: mode (total only), strict and leases have no
// meaning there (rules.Flow.validate refuses them), and localThreshold is
// a whole number of requests in flight.
func fleetConcurrencyField(ff *ruleField) bool {
	switch ff.Name {
	case "cluster.mode", "cluster.strict", "cluster.leases":
		return false
	case "cluster.localThreshold":
		ff.Label, ff.Type, ff.Min = "localThreshold (most in flight here while the store fails)", "integer", "0"
	}
	return true
}
