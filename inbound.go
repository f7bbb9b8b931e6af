package sluice

// countsInbound reports whether an inbound entry is counted on the engine's
// inbound node: while a system rule is in force (shadow ones included), the
// only thing that judges those figures. Readers (SystemMetrics, and through
// it the exporters and the fleet's telemetry) do not change it: without a
// system rule no call writes the engine-wide node, whose lines every core
// would pass back and forth, however often the engine is read.
func (eng *Engine) countsInbound() bool {
	return eng.system.Active()
}
