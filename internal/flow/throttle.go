package flow

import (
	"cmp"
	"context"
	"math"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/ruledef"
)

// throttle enforces a QPS rule that paces requests: one every
// interval/threshold, waiting at most MaxQueueing for its turn.
//
// The schedule is a GCRA's: free is the instant at which the requests
// scheduled so far have used up their slots. A batch of n starts at
// max(free, now), at once when the schedule is idle, and moves free to its
// start plus n slots, so the next caller waits for all n whether or not the
// schedule was idle. It is kept in floating-point nanoseconds, so slot k of
// a rate R is at exactly k/R s whatever R (no rounding drift above
// 1,000/s, or at 7,000/s).
type throttle struct {
	free     *atomic.Uint64 // float64 bits: ns at which the schedule is free
	cost     float64        // ns per request at the threshold
	limit    float64
	maxQueue int64 // ns
	base
}

func newThrottle(b base) *throttle {
	free := new(atomic.Uint64)
	free.Store(math.Float64bits(math.Inf(-1)))
	return &throttle{
		free:     free,
		cost:     float64(cmp.Or(b.rule.StatInterval, ruledef.StatInterval)) / b.rule.Threshold,
		limit:    b.rule.Threshold,
		maxQueue: int64(b.rule.MaxQueueing),
		base:     b,
	}
}

func (c *throttle) check(ctx context.Context, ec *entry.Context, clk core.Clock) *core.BlockError {
	if be := c.tooLargeToPace(ec, c.limit); be != nil {
		return be
	}
	cost := c.cost * float64(ec.Batch)
	now := float64(ec.Start)
	// A turn after the context's deadline is refused at once, and takes
	// no slot (rate.Limiter.WaitN).
	maxWait, short := waitBound(ctx, c.maxQueue)
	var wait, start float64
	for {
		bits := c.free.Load()
		start = math.Max(math.Float64frombits(bits), now)
		// Whole nanoseconds: slot k of a rate R is due at k/R s, not a
		// rounding error after it.
		wait = math.Round(start) - now
		if wait > float64(maxWait) {
			if short && wait <= float64(c.maxQueue) {
				return c.pastDeadline(ec, wait, maxWait)
			}
			return c.queueRefusal(ec, wait, c.maxQueue)
		}
		if c.free.CompareAndSwap(bits, math.Float64bits(start+cost)) {
			break
		}
	}
	if d := time.Duration(wait); d > 0 {
		if err := c.sleep(ctx, ec, clk, d); err != nil {
			c.unschedule(start, start+cost)
			return c.cancelled(ec, wait, c.maxQueue, err)
		}
		// An entry that waited already allocated (its timer): its undo
		// ticket keeps its slots.
		ec.AddUndo(&waitedSlots{c: c, start: start, end: start + cost})
		return nil
	}
	ec.AddUndo(c)
	return nil
}

// Release gives back the slots of an entry admitted without waiting that a
// later check refused, if no later entry is scheduled behind them. Its
// slots started within half a nanosecond of its arrival (it did not wait);
// another entry's slots could end there only if they were shorter than half
// a nanosecond, so at rates of a request per nanosecond or faster nothing
// is given back.
func (c *throttle) Release(x entry.ExitInfo) {
	if !x.Blocked || c.cost < 1 {
		return
	}
	cost := c.cost * float64(x.Batch)
	for {
		bits := c.free.Load()
		start := math.Float64frombits(bits) - cost
		if math.Round(start) != float64(x.Start) {
			return // later entries are scheduled behind it
		}
		if c.free.CompareAndSwap(bits, math.Float64bits(start)) {
			return
		}
	}
}

func (c *throttle) inherit(old checker) { c.free = old.(*throttle).free }

// unschedule gives back the slots [start, end) of an entry that did not go
// through after all (its wait was cancelled, or a later check refused it)
// when no later entry is scheduled behind them: the schedule is free from
// start again, and the next caller takes them. When later entries are
// scheduled, it gives back nothing: they keep their turns, and moving the
// schedule back would put the next caller in a slot one of them holds.
func (c *throttle) unschedule(start, end float64) {
	c.free.CompareAndSwap(math.Float64bits(end), math.Float64bits(start))
}

// waitedSlots is the undo ticket of a throttle entry that waited for its
// slots [start, end).
type waitedSlots struct {
	c          *throttle
	start, end float64
}

func (w *waitedSlots) Release(x entry.ExitInfo) {
	if x.Blocked {
		w.c.unschedule(w.start, w.end)
	}
}
