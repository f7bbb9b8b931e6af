// Package sluice is a flow-control framework for Go services in the
// tradition of Alibaba Sentinel.
//
// Each protected piece of code is a resource; each call into it is an entry:
//
//	p, err := sluice.Entry("GET /orders")
//	if err != nil { // errors.Is(err, sluice.ErrBlocked)
//		http.Error(w, "busy", http.StatusTooManyRequests)
//		return
//	}
//	defer p.Exit()
//
// or, in one call that also counts a panic of the protected code as an
// error for circuit breakers (see Do):
//
//	err := sluice.Do("GET /orders", func() error { return serve(w, r) })
//
// A Pass is a small value: copies of it stand for the same entry, which the
// first Exit on any of them releases; a second Exit does nothing, and so
// does every method of the zero Pass that a refused Entry returns.
//
// An entry runs through a slot chain: rule checks (system, authority,
// flow, param, degrade, then custom slots; the first to refuse wins), then
// statistics. A refusal is a *BlockError naming the rule, what it
// observed and its threshold; errors.Is(err, ErrBlocked) tells refusals
// from other
// errors (ErrBadResource, ErrBadTraffic, ErrBadBatch, ErrTooManyAttachments,
// ErrBadArgIndex, ErrBadCaller for entries that make no sense, ErrClosed
// after Close).
//
// An entry may name its caller, the application making the call
// (WithCaller): authority rules (rules.Authority) allow or refuse callers,
// and flow rules with a Caller limit one caller, or each caller apart. An
// identity is only as trustworthy as its source (see docs/middleware.md).
//
// An entry that asks with WithBudget learns, passed or refused, the limit,
// the remaining budget and the time to reset of the tightest rate rule that
// decided it (a Budget), at no allocation; the HTTP and gRPC adapters
// can send it to clients as the IETF RateLimit header fields.
//
// Rules are loaded as a rules.Set (Engine.LoadRules, or Engine.UpdateRules
// to change some kinds and keep the others). A load is validated whole and
// is all-or-nothing; it can replace rules under live traffic, and rules that
// count the same way keep their counters across it.
//
// The package-level functions (Entry, EntryContext, Do, DoContext and
// LoadRules) act on a default engine (Default, SetDefault); everything else
// is a method of *Engine. New builds an
// independent engine with its own clock, rules and statistics, for tests and
// multi-tenant programs. An engine tracks at most Limits.Resources resources
// without rules (the rest count under the resource "__sluice_overflow__") and forgets
// those left idle for two minutes; it starts no goroutine except the
// system metrics sampler, which Close stops.
//
// The default traffic type is Inbound: an entry counts as work this
// process serves and is subject to system adaptive protection. Wrap calls
// this process makes to other services with WithTraffic(Outbound), so
// that they
// are not counted twice and never refused by system rules.
package sluice
