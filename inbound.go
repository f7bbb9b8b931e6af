package sluice

import "time"

// inboundHold is how long after a SystemMetrics call inbound entries are
// counted on the inbound node without a system rule (countsInbound).
const inboundHold = int64(time.Minute)

// countsInbound reports whether an inbound entry at now is counted on the
// engine's inbound node: while a system rule is in force (it judges those
// figures), or within inboundHold after a reader asked for them
// (SystemMetrics). Otherwise no call writes the engine-wide node, whose
// lines every core would pass back and forth.
func (eng *Engine) countsInbound(now int64) bool {
	return eng.system.Active() || now < eng.inboundUntil.Load()
}

// readInbound notes a reader of the inbound figures at now: inbound entries
// are counted until inboundHold later (it only moves the hold on).
func (eng *Engine) readInbound(now int64) {
	until := now + inboundHold
	for {
		old := eng.inboundUntil.Load()
		if until <= old || eng.inboundUntil.CompareAndSwap(old, until) {
			return
		}
	}
}
