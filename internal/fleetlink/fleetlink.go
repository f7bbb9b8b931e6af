// Package fleetlink gives package fleet the few reads and one write of an
// engine that no public method offers, without making them public API:
// package sluice sets these functions when it is initialized, and fleet
// (which imports sluice, so runs after) calls them. Each takes the engine
// as an *sluice.Engine passed as any (sluice imports this package, so this
// package cannot name sluice's types).
//
// They exist because the public reads would cost or say too much: ranking
// every resource by its last second through Engine.Snapshot costs several
// µs a resource, where the engine's own counters cost a few ns; and the
// heartbeat's rule version is the engine's cluster state, which a public
// setter would let any caller overwrite.
package fleetlink

import "github.com/sluice-go/sluice/cluster"

var (
	// Resources fills f.Resources with the figures of engine second sec
	// (read at now, just after its end) of the engine's busiest maxRes
	// resources, by passed plus refused requests, and f.Shedding; it
	// returns false, filling nothing, on a closed engine.
	Resources func(eng any, f *cluster.Frame, now, sec int64, maxRes int) bool
	// SetRuleVersion makes the engine's heartbeats (with WithCluster)
	// carry rule version v (cluster.Member.RuleVersion).
	SetRuleVersion func(eng any, v int64)
	// Closed reports whether the engine is closed.
	Closed func(eng any) bool
	// CountCallers makes the engine count its refused callers per
	// resource, for the Callers of the frames Resources fills.
	CountCallers func(eng any)
)
