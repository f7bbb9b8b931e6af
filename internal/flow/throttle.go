package flow

import (
	"cmp"
	"context"
	"math"
	"sync"
	"time"

	"github.com/sluice-go/sluice/internal/core"
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
// schedule was idle. free is kept as whole nanoseconds plus a fraction of
// one (see instant), and a slot as whole nanoseconds plus the fraction left
// over, so slot k of a rate R is due at k/R s rounded to the nearest
// nanosecond whatever R (no rounding drift above 1,000/s, or at 7,000/s)
// and whatever the clock reads: a float64 of nanoseconds alone is a
// nanosecond coarse after 52 days of uptime, and the error of each slot
// added to it accumulated (8.9 µs after 200,000 slots at 30 days).
type throttle struct {
	sched    *pace
	cost     float64 // ns per request at the threshold
	whole    int64   // whole ns of cost
	part     float64 // the rest of cost, in [0, 1)
	limit    float64
	maxQueue int64 // ns
	base
}

// pace is a throttle rule's schedule; it outlives reloads of the rule.
type pace struct {
	mu   sync.Mutex
	set  bool    // false until the first entry: free is -inf
	free instant // when set
}

// instant is a time in nanoseconds as ns + frac, frac in [0, 1), with no
// loss of precision however large ns is. When the time is too far to be an
// int64 (a slot of centuries), ns stops and frac holds the rest.
type instant struct {
	ns   int64
	frac float64
}

// norm moves the whole nanoseconds of frac into ns, when they fit.
func (t instant) norm() instant {
	w := math.Floor(t.frac)
	if w == 0 || math.IsInf(w, 0) || math.IsNaN(w) {
		return t
	}
	if w > -(1<<62) && w < 1<<62 {
		if d := int64(w); d > 0 && t.ns <= math.MaxInt64-d || d < 0 && t.ns >= math.MinInt64-d {
			t.ns += d
			t.frac -= w
		}
	}
	return t
}

// plus returns t + d nanoseconds.
func (t instant) plus(d float64) instant {
	if w := math.Floor(d); w > -(1<<62) && w < 1<<62 {
		if i := int64(w); i >= 0 && t.ns <= math.MaxInt64-i || i < 0 && t.ns >= math.MinInt64-i {
			t.ns, d = t.ns+i, d-w // d - w is exact
		}
	}
	t.frac += d
	return t.norm()
}

// after returns t - now in nanoseconds (exactly, when it fits in a
// float64's 53 bits).
func (t instant) after(now int64) float64 { return float64(t.ns-now) + t.frac }

// round returns t rounded to the nearest nanosecond, less now.
func (t instant) round(now int64) float64 { return float64(t.ns-now) + math.Round(t.frac) }

func newThrottle(b base) *throttle {
	r := b.rule.Threshold
	per := float64(cmp.Or(b.rule.StatInterval, ruledef.StatInterval))
	c := &throttle{sched: &pace{}, cost: per / r, limit: r, maxQueue: int64(maxQueueing(&b.rule)), base: b}
	if w := math.Floor(c.cost); w < 1<<52 {
		// The rest computed from per and r, not from cost's rounding:
		// (per - w*r)/r, with per - w*r exact (a fused multiply-add).
		rem := math.FMA(-w, r, per)
		if rem < 0 { // per/r rounded up to a whole number
			w, rem = w-1, rem+r
		}
		c.whole, c.part = int64(w), min(rem/r, math.Nextafter(1, 0))
	} else {
		c.whole, c.part = 0, c.cost // a slot of months or more: precision is moot
	}
	return c
}

// slots returns the instant t plus n slots.
func (c *throttle) slots(t instant, n int64) instant {
	if d := n * c.whole; c.whole > 0 && max(n, -n) <= math.MaxInt64/c.whole &&
		(d >= 0 && t.ns <= math.MaxInt64-d || d < 0 && t.ns >= math.MinInt64-d) {
		t.ns += d
		t.frac += float64(n) * c.part
	} else {
		t.frac += float64(n) * c.cost
	}
	return t.norm()
}

func (c *throttle) check(ctx context.Context, ec *entry.Context, clk core.Clock) *core.BlockError {
	if be := c.tooLargeToPace(ec, c.limit); be != nil {
		return be
	}
	now := ec.Start
	// A turn after the context's deadline is refused at once, and takes
	// no slot (rate.Limiter.WaitN).
	maxWait, short := waitBound(ctx, c.maxQueue)
	s := c.sched
	s.mu.Lock()
	start := instant{ns: now}
	if s.set && s.free.after(now) > 0 {
		start = s.free
	}
	// Whole nanoseconds: slot k of a rate R is due at k/R s, not a
	// rounding error after it.
	wait := start.round(now)
	if wait > float64(maxWait) {
		s.mu.Unlock()
		if ec.WantBudget {
			c.refusedBudget(ec, queueBudget(c.cost, c.maxQueue, wait))
		}
		if short && wait <= float64(c.maxQueue) {
			return c.pastDeadline(ec, wait, maxWait)
		}
		return c.queueRefusal(ec, wait, c.maxQueue)
	}
	end := c.slots(start, ec.Batch)
	s.set, s.free = true, end
	s.mu.Unlock()
	if ec.WantBudget {
		// Busy until end: the next request's turn, rounded as its wait.
		c.noteBudget(ec, queueBudget(c.cost, c.maxQueue, end.round(now)))
	}
	if d := time.Duration(wait); d > 0 {
		if err := c.sleep(ctx, ec, clk, d); err != nil {
			c.unschedule(start, end)
			return c.cancelled(ec, wait, c.maxQueue, err)
		}
		// An entry that waited already allocated (its timer): its undo
		// ticket keeps its slots.
		ec.AddUndo(&waitedSlots{c: c, start: start, end: end})
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
	s := c.sched
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.set {
		return
	}
	start := c.slots(s.free, -x.Batch)
	if start.round(x.Start) == 0 {
		s.free = start
	} // else later entries are scheduled behind it
}

func (c *throttle) inherit(old checker) { c.sched = old.(*throttle).sched }

// unschedule gives back the slots [start, end) of an entry that did not go
// through after all (its wait was cancelled, or a later check refused it)
// when no later entry is scheduled behind them: the schedule is free from
// start again, and the next caller takes them. When later entries are
// scheduled, it gives back nothing: they keep their turns, and moving the
// schedule back would put the next caller in a slot one of them holds.
func (c *throttle) unschedule(start, end instant) {
	s := c.sched
	s.mu.Lock()
	if s.set && s.free == end {
		s.free = start
	}
	s.mu.Unlock()
}

// waitedSlots is the undo ticket of a throttle entry that waited for its
// slots [start, end).
type waitedSlots struct {
	c          *throttle
	start, end instant
}

func (w *waitedSlots) Release(x entry.ExitInfo) {
	if x.Blocked {
		w.c.unschedule(w.start, w.end)
	}
}
