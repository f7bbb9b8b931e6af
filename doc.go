// Package sluice is a flow-control framework for Go services in the
// tradition of Alibaba Sentinel.
//
// Each protected piece of code is a resource; each call into it is an entry:
//
//	e, err := sluice.Entry("GET /orders")
//	if err != nil { // errors.Is(err, sluice.ErrBlocked)
//		http.Error(w, "busy", http.StatusTooManyRequests)
//		return
//	}
//	defer e.Exit()
//
// An entry runs through a slot chain: rule checks (system, flow, isolation,
// param, degrade; the first to refuse wins), then statistics. Rules are
// loaded with LoadFlowRules and friends, validated whole, and can be replaced
// under live traffic.
//
// The package-level functions act on a default engine. New builds an
// independent engine with its own clock, rules and statistics, for tests and
// multi-tenant programs.
//
// The default traffic type is Inbound: an entry counts as work this process
// serves and is subject to system adaptive protection. Wrap calls this
// process makes to other services with WithTraffic(Outbound), so that they
// are not counted twice and never refused by system rules.
package sluice
