package sluice

import (
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/window"
)

// exitSampled is the body of Exit for an exit whose RT no rule consumes
// (see exitNeedsClock). It counts the exit, exactly, at an estimate of its
// instant (the latest reading of an Entry, never earlier than the entry's
// own start; the clock itself on a clock other than the system clock), and
// reads the clock for its RT only when the exit falls in the sample that
// readers' RT figures come from (window.SampleFirst): on a node nobody
// reads, never (an untimed exit); on a read one, for the first
// window.SampleFirst requests of each 100 ms, one in window.SampleEvery
// beyond up to window.SampleWide, and one in window.SampleSparse after.
// The inbound node (written only while a system rule is in force, see
// countsInbound) is read once SystemMetrics was called (and always on a
// clock other than the system clock, as before sampling).
func (eng *Engine) exitSampled(r *passRecord, in *window.Node) {
	c := &r.ctx
	var end int64
	if eng.estimateExit {
		end = max(c.Start, eng.recent.Load())
	} else {
		end = eng.clock.Nanotime()
	}
	failed := r.err != nil
	if c.HoldsTickets() {
		c.ReleaseTickets(entry.ExitInfo{Start: c.Start, End: end, Batch: c.Batch, Err: r.err})
	}
	now := int64(-1) // the clock's reading for a timed sample, once read
	if node := &r.res.node; node.Read() {
		if w := node.AddCompleteSampled(end, c.Batch, failed); w > 0 {
			now = eng.exitNow(end)
			node.AddSampledRT(end, now-c.Start, w)
		}
	} else {
		node.AddCompleteUntimed(end, c.Batch, failed)
	}
	if in == nil {
		return
	}
	if !eng.inboundRead.Load() && eng.estimateExit {
		in.AddCompleteUntimed(end, c.Batch, failed)
		return
	}
	if w := in.AddCompleteSampled(end, c.Batch, failed); w > 0 {
		if now < 0 {
			now = eng.exitNow(end)
		}
		in.AddSampledRT(end, now-c.Start, w)
	}
}

// exitNow is the clock's reading for a sampled exit counted at end: end
// itself when it was read from the clock (a clock other than the system
// clock).
func (eng *Engine) exitNow(end int64) int64 {
	if !eng.estimateExit {
		return end
	}
	return eng.clock.Nanotime()
}
