package sluice

import (
	"github.com/sluice-go/sluice/internal/system"
	"github.com/sluice-go/sluice/stat"
)

// countsInbound reports whether an inbound entry is counted on the engine's
// inbound node: while a system rule is in force (shadow ones included), the
// only thing that judges those figures. Readers (SystemMetrics, and through
// it the exporters and the fleet's telemetry) do not change it: without a
// system rule no call writes the engine-wide node, whose lines every core
// would pass back and forth, however often the engine is read.
func (eng *Engine) countsInbound() bool {
	return eng.system.Active()
}

// useSystem puts set (nil for no rules) in force, noting first that the
// inbound node may hold counts from now on (see inboundSnapshot).
func useSystem(eng *Engine, set *system.RuleSet) {
	if set != nil && !eng.inboundUsed.Load() {
		eng.inboundUsed.Store(true)
	}
	eng.system.Use(set)
}

// inboundSnapshot is the inbound node's snapshot at now: the zero snapshot,
// which a node nothing wrote gives, while no system rule was ever in force,
// without the scan of its windows (most of what SystemMetrics costs an
// exporter's scrape).
func (eng *Engine) inboundSnapshot(now int64) stat.Snapshot {
	if !eng.inboundUsed.Load() {
		return stat.Snapshot{}
	}
	return eng.inbound.Snapshot(now)
}
