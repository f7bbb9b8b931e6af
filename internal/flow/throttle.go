package flow

import (
	"context"
	"math"
	"time"

	"go.uber.org/atomic"

	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/internal/clock"
	"github.com/sluice-go/sluice/internal/entry"
)

// throttle enforces a QPS rule that paces requests: one every
// interval/threshold, waiting at most MaxQueueing for its turn.
type throttle struct {
	latest   *atomic.Uint64 // float64 bits of the last scheduled pass (ns)
	cost     float64        // ns per request at the threshold
	maxQueue int64          // ns
	base
}

func newThrottle(b base) *throttle {
	return &throttle{
		latest:   atomic.NewUint64(math.Float64bits(math.Inf(-1))),
		cost:     float64(b.rule.Interval()) / b.rule.Threshold,
		maxQueue: int64(b.rule.MaxQueueing),
		base:     b,
	}
}

func (c *throttle) check(ctx context.Context, ec *entry.Context, clk core.Clock) *core.BlockError {
	return c.pace(ctx, ec, clk, c.cost*float64(ec.Batch))
}

func (c *throttle) Release(x entry.ExitInfo) {
	if x.Blocked {
		c.unschedule(c.cost * float64(x.Batch))
	}
}

func (c *throttle) inherit(old checker) { c.latest = old.(*throttle).latest }

// pace schedules the entry cost nanoseconds after the previously scheduled
// one (or now, when the schedule is behind), and waits for its turn. A wait
// longer than MaxQueueing is refused at once. The schedule is kept in
// floating-point nanoseconds, so slot k of a rate R is at exactly k/R s
// whatever R (no rounding drift above 1,000/s, or at 7,000/s).
func (c *throttle) pace(ctx context.Context, ec *entry.Context, clk core.Clock, cost float64) *core.BlockError {
	now := ec.Start
	var next float64
	var wait int64
	for {
		lastBits := c.latest.Load()
		next = math.Max(math.Float64frombits(lastBits)+cost, float64(now))
		wait = int64(math.Round(next)) - now
		if wait > c.maxQueue {
			return c.refuse(ec, float64(wait)/1e6, float64(c.maxQueue)/1e6, wait-c.maxQueue, "wait exceeds max queueing")
		}
		if c.latest.CompareAndSwap(lastBits, math.Float64bits(next)) {
			break
		}
	}
	if wait > 0 {
		if err := clock.Sleep(ctxOrBackground(ctx), clk, time.Duration(wait)); err != nil {
			c.unschedule(cost) // give the slot back: the next caller takes it
			be := c.refuse(ec, float64(wait)/1e6, float64(c.maxQueue)/1e6, 0, "wait cancelled")
			be.Cause = err
			return be
		}
	}
	ec.AddUndo(c)
	return nil
}

// unschedule moves the pacing schedule one request of the given cost back.
func (c *throttle) unschedule(cost float64) {
	for {
		old := c.latest.Load()
		if c.latest.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)-cost)) {
			return
		}
	}
}
