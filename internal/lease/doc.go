// Package lease is the engine side of budgets shared by every instance of a
// service through a cluster.Store: leases of permits for speed, strict
// per-call requests for exactness, a breaker that turns Store failures into
// local decisions, and a heartbeat that counts the live instances.
package lease
