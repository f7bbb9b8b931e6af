package flow

import (
	"context"
	"math"
	"time"

	"sync/atomic"

	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/internal/entry"
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
		cost:     float64(b.rule.Interval()) / b.rule.Threshold,
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
	var wait float64
	for {
		bits := c.free.Load()
		start := math.Max(math.Float64frombits(bits), now)
		// Whole nanoseconds: slot k of a rate R is due at k/R s, not a
		// rounding error after it.
		wait = math.Round(start) - now
		if wait > float64(c.maxQueue) {
			return c.queueRefusal(ec, wait, c.maxQueue)
		}
		if c.free.CompareAndSwap(bits, math.Float64bits(start+cost)) {
			break
		}
	}
	if d := time.Duration(wait); d > 0 {
		if err := ec.Sleep(ctx, clk, d); err != nil {
			c.unschedule(cost) // give the slots back: the next caller takes them
			return c.cancelled(ec, wait, c.maxQueue, err)
		}
	}
	ec.AddUndo(c)
	return nil
}

func (c *throttle) Release(x entry.ExitInfo) {
	if x.Blocked {
		c.unschedule(c.cost * float64(x.Batch))
	}
}

func (c *throttle) inherit(old checker) { c.free = old.(*throttle).free }

// unschedule moves the schedule back by cost nanoseconds: the slots of a
// request that did not go through after all.
func (c *throttle) unschedule(cost float64) {
	for {
		old := c.free.Load()
		if c.free.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)-cost)) {
			return
		}
	}
}
