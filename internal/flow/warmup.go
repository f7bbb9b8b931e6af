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
	"github.com/sluice-go/sluice/rules"
)

// tokens is the token state of a warm-up rule: Sentinel's WarmUpController
// (after Guava's SmoothWarmingUp) counted in statistic intervals rather than
// seconds. Admissions consume stored tokens at once; at each interval
// boundary a lightly used resource (see light) refills threshold tokens per
// elapsed interval (cooling towards maxToken), and a busier one below the
// warning level refills up to the warning level only. While more than
// warningToken tokens are stored the resource is cold and admits less than
// the threshold.
type tokens struct {
	mu sync.Mutex

	threshold    float64
	coldFactor   float64
	warningToken float64
	maxToken     float64
	interval     int64
	// busy is, when the cold rate threshold/coldFactor is at least one
	// request per interval, the count in the previous interval at or above
	// which the resource is busy: floor(threshold/coldFactor), as in
	// Sentinel. Below one request per interval it is 0, and idleSpan is
	// the number of intervals without any admission after which the
	// resource is lightly used: ceil(coldFactor/threshold), the intervals
	// of one cold slot.
	busy     float64
	idleSpan float64

	stored     float64
	lastFilled int64 // interval index of the last refill
	cur        int64 // interval index being counted
	curCount   float64
	prevCount  float64
	lastUsed   int64 // interval index of the latest admission
	prevUsed   int64 // lastUsed before it moved to cur
	primed     bool

	// next is, for a rule that refuses at once, the instant (ns) from which
	// a batch above the allowance (a lone request while the allowance is
	// below one request per interval) may pass; nextAt and nextN are the
	// start and the batch of the admission that set it, and prevNext its
	// value before (see paceCheck).
	next, prevNext float64
	nextAt, nextN  int64
}

func newTokens(b *base) *tokens {
	r := &b.rule
	t := r.Threshold
	w := warmUpOf(r)
	cf := w.ColdFactor
	periods := float64(w.Period) / float64(cmp.Or(r.StatInterval, ruledef.StatInterval))
	tk := &tokens{threshold: t, coldFactor: cf, interval: int64(cmp.Or(r.StatInterval, ruledef.StatInterval)), next: math.Inf(-1)}
	tk.warningToken = periods * t / (cf - 1)
	tk.maxToken = tk.warningToken + 2*periods*t/(1+cf)
	if cold := t / cf; cold >= 1 {
		tk.busy = math.Floor(cold)
	} else {
		tk.idleSpan = math.Ceil(cf / t)
	}
	return tk
}

// light reports whether the resource was used below its cold rate before
// interval idx, which then cools it down: fewer than busy admissions in the
// previous interval or, when the cold rate is below one request per
// interval, none in the idleSpan intervals before idx (traffic at the cold
// rate then leaves some intervals empty, and must not count as idle).
// Must hold mu.
func (tk *tokens) light(idx int64) bool {
	if tk.busy > 0 {
		return tk.prevCount < tk.busy
	}
	return float64(idx-1-tk.lastUsed) >= tk.idleSpan
}

// sync rolls the interval counters forward to now and refills tokens at an
// interval boundary. Must hold mu.
func (tk *tokens) sync(now int64) {
	idx := now / tk.interval
	if !tk.primed {
		// A cold start: full, and the first refill at the next boundary
		// (a refill now would give back the tokens of the first
		// admissions).
		tk.primed = true
		tk.cur = idx
		tk.lastFilled = idx
		tk.lastUsed = math.MinInt64 / 2
		tk.prevUsed = tk.lastUsed
		tk.stored = tk.maxToken
		return
	}
	if idx != tk.cur {
		if idx == tk.cur+1 {
			tk.prevCount = tk.curCount
		} else {
			tk.prevCount = 0
		}
		tk.curCount = 0
		tk.cur = idx
	}
	if idx <= tk.lastFilled {
		return
	}
	old := tk.stored
	v := old
	refill := float64(idx-tk.lastFilled) * tk.threshold
	if tk.light(idx) {
		// Lightly used (or idle): cool down towards maxToken.
		v = old + refill
	} else if old < tk.warningToken {
		// Busy and warm: top up, but never past the warning level, so a
		// resource at full load stays warm.
		v = math.Min(old+refill, tk.warningToken)
	}
	tk.stored = math.Min(v, tk.maxToken)
	tk.lastFilled = idx
}

// take records n admitted requests: they count towards this interval and
// consume stored tokens at once (Sentinel deducts them only at the next
// interval's refill, which makes its warm-up lag one interval behind
// Guava's; consuming at admission reaches the threshold exactly at the end
// of the warm-up period). Must hold mu, after sync.
func (tk *tokens) take(n float64) {
	tk.curCount += n
	if tk.lastUsed != tk.cur {
		tk.prevUsed, tk.lastUsed = tk.lastUsed, tk.cur
	}
	tk.stored = math.Max(tk.stored-n, 0)
}

// give undoes take for n requests admitted at start that did not go
// through after all: they no longer count in their interval (when it is
// still the current or the previous one), nor as the use of the current
// interval when they were all of it. Must hold mu.
func (tk *tokens) give(start int64, n float64) {
	switch start / tk.interval {
	case tk.cur:
		tk.curCount -= n
		if tk.curCount <= 0 && tk.lastUsed == tk.cur {
			tk.lastUsed = tk.prevUsed
		}
	case tk.cur - 1:
		tk.prevCount -= n
	}
	tk.stored = math.Min(tk.stored+n, tk.maxToken)
}

// limit returns the number of requests allowed per interval in the current
// token state: Threshold at or below the warning level, and above it
// Guava's linear rise of the slot length, from ColdFactor/Threshold at
// maxToken to 1/Threshold at warningToken. (Computed from the fraction of
// the way up, which neither overflows nor loses its meaning for the tiniest
// thresholds.) Must hold mu.
func (tk *tokens) limit() float64 {
	span := tk.maxToken - tk.warningToken
	if tk.stored <= tk.warningToken || !(span > 0) {
		return tk.threshold
	}
	frac := math.Min((tk.stored-tk.warningToken)/span, 1)
	return tk.threshold / (1 + frac*(tk.coldFactor-1))
}

// limitAt returns the allowance per interval at now.
func (tk *tokens) limitAt(now int64) float64 {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	tk.sync(now)
	return tk.limit()
}

// sameCurve reports whether rules a and b, two QPS warm-up rules, shape
// the same warm-up curve: their tokens mean the same, whatever their IDs and
// queueing bounds.
func sameCurve(a, b *rules.Flow) bool {
	return a.Threshold == b.Threshold && warmUpOf(a) == warmUpOf(b) && cmp.Or(a.StatInterval, ruledef.StatInterval) == cmp.Or(b.StatInterval, ruledef.StatInterval)
}

// warmUp enforces a QPS warm-up rule that refuses at once: at most the
// current allowance (see tokens) in the window of the last ten buckets.
// A batch above the allowance (a lone request, while the allowance is
// below one request per interval) passes alone, paid for in time, as Guava
// does (see paceCheck).
type warmUp struct {
	counted
	tokens *tokens
	base
}

func newWarmUp(b base) *warmUp {
	return &warmUp{counted: counted{width: bucketWidth(&b.rule)}, tokens: newTokens(&b), base: b}
}

func (c *warmUp) check(_ context.Context, ec *entry.Context, _ core.Clock) *core.BlockError {
	if be := c.tooLargeToPace(ec, c.rule.Threshold); be != nil {
		return be
	}
	now, n := ec.Start, ec.Batch
	tk := c.tokens
	tk.mu.Lock()
	tk.sync(now)
	lim := tk.limit()
	if float64(n) > lim {
		be := c.paceCheck(ec, lim)
		tk.mu.Unlock()
		if ec.WantBudget {
			c.warmBudget(ec, be == nil, lim, c.win.Sum(ec.Start/c.width))
		}
		if be == nil {
			ec.AddUndo(c)
		}
		return be
	}
	ok, seen := admit(ec, c.win, c.width, lim)
	if ok {
		tk.take(float64(n))
	}
	tk.mu.Unlock()
	if ec.WantBudget {
		if ok {
			seen += uint64(n)
		}
		c.warmBudget(ec, ok, lim, seen)
	}
	if !ok {
		// When the window will have room at this allowance, which may
		// change meanwhile: warm-up moves it as tokens are taken and
		// refilled.
		return c.refuse(ec, float64(seen), lim, c.retryAfter(ec, lim), "warming up")
	}
	ec.AddUndo(c)
	return nil
}

// paceCheck decides on a batch of n above the allowance lim, which the
// window of one interval cannot hold: a lone request while lim is below one
// request per interval, or a batch of more than lim. It passes when the
// window holds nothing else (it counts there too) and the previous such
// admission has been paid for: it then takes n tokens, and the next one may
// come n·interval/lim later. This is Guava's pacing at the allowance without
// a queue, where a request larger than the rate passes and the next caller
// pays for it; without it a resource whose traffic is all such batches
// would never pass one, and so never warm. Must hold tokens.mu.
func (c *warmUp) paceCheck(ec *entry.Context, lim float64) *core.BlockError {
	tk := c.tokens
	now, n := float64(ec.Start), float64(ec.Batch)
	if wait := math.Ceil(tk.next - now); wait > 0 {
		return c.refuse(ec, 0, lim, saturated(wait), "warming up")
	}
	if ok, seen := admit(ec, c.win, c.width, n); !ok {
		return c.refuse(ec, float64(seen), lim, c.retryAfter(ec, n), "warming up")
	}
	tk.prevNext, tk.nextAt, tk.nextN = tk.next, ec.Start, ec.Batch
	tk.next = now + float64(tk.interval)/lim*n
	tk.take(n)
	return nil
}

func (c *warmUp) Release(x entry.ExitInfo) {
	if x.Blocked {
		giveBack(c.win, c.width, x)
		tk := c.tokens
		tk.mu.Lock()
		tk.give(x.Start, float64(x.Batch))
		if x.Batch == tk.nextN && tk.nextAt == x.Start && tk.next > float64(x.Start) {
			// The latest paced admission: its successor may pass when it
			// could have without it. (An older one's time stays taken.)
			tk.next, tk.nextAt = tk.prevNext, math.MinInt64
		}
		tk.mu.Unlock()
	}
}

func (c *warmUp) inherit(old checker) {
	o := old.(*warmUp)
	c.win = o.win
	if sameCurve(&c.rule, &o.rule) {
		c.tokens = o.tokens
	}
}

// schedule is the queue of a warm-up throttle rule: the instant at which
// the requests scheduled so far have used up their slots, as in throttle
// (whole nanoseconds and a fraction, so it stays exact at any clock
// reading). It outlives reloads of the rule, whatever changes.
type schedule struct {
	mu   sync.Mutex // held before the tokens' mu
	set  bool       // false until the first entry: free is -inf
	free instant
	// lastStart and lastEnd are the slots of the latest entry scheduled
	// without a wait (entries that wait keep theirs in an undo ticket).
	lastStart, lastEnd instant
}

// warmUpThrottle enforces a QPS warm-up rule that paces requests at the
// current allowance (see tokens), waiting at most MaxQueueing.
type warmUpThrottle struct {
	tokens   *tokens
	sched    *schedule
	maxQueue int64 // ns
	base
}

func newWarmUpThrottle(b base) *warmUpThrottle {
	return &warmUpThrottle{tokens: newTokens(&b), sched: &schedule{}, maxQueue: int64(maxQueueing(&b.rule)), base: b}
}

func (c *warmUpThrottle) check(ctx context.Context, ec *entry.Context, clk core.Clock) *core.BlockError {
	if be := c.tooLargeToPace(ec, c.rule.Threshold); be != nil {
		return be
	}
	now, n := ec.Start, float64(ec.Batch)
	tk, s := c.tokens, c.sched
	s.mu.Lock()
	tk.mu.Lock()
	tk.sync(ec.Start)
	lim := tk.limit()
	// The schedule of throttle, with the slot length of the current
	// allowance. A batch above the allowance is no exception: it takes its
	// slots, and the next caller waits for them (Guava's acquire(n)).
	cost := float64(tk.interval) / lim * n
	start := instant{ns: now}
	if s.set && s.free.after(now) > 0 {
		start = s.free
	}
	wait := start.round(now)
	if wait > float64(c.maxQueue) {
		tk.mu.Unlock()
		s.mu.Unlock()
		if ec.WantBudget {
			c.refusedBudget(ec, queueBudget(float64(tk.interval)/lim, c.maxQueue, wait))
		}
		return c.queueRefusal(ec, wait, c.maxQueue)
	}
	end := start.plus(cost)
	s.set, s.free = true, end
	if wait <= 0 {
		s.lastStart, s.lastEnd = start, end
	}
	tk.take(n)
	tk.mu.Unlock()
	s.mu.Unlock()
	if ec.WantBudget {
		// The allowance at the decision, before this entry's tokens.
		c.noteBudget(ec, queueBudget(float64(tk.interval)/lim, c.maxQueue, end.round(now)))
	}
	if d := time.Duration(wait); d > 0 {
		if err := c.sleep(ctx, ec, clk, d); err != nil {
			c.giveBack(ec.Start, n, start, end, true)
			return c.cancelled(ec, wait, c.maxQueue, err)
		}
		// An entry that waited already allocated (its timer): its undo
		// ticket keeps its slots.
		ec.AddUndo(&waitedWarmUpSlots{c: c, start: start, end: end})
		return nil
	}
	ec.AddUndo(c)
	return nil
}

// giveBack undoes the admission of n requests that arrived at arrival and
// were scheduled in [start, end): their tokens go back, and their slots
// when no later entry is scheduled behind them (the schedule still ends at
// end). When later entries are scheduled it keeps the slots, as throttle
// does: moving the schedule back would put the next caller in a slot one of
// them holds.
func (c *warmUpThrottle) giveBack(arrival int64, n float64, start, end instant, slots bool) {
	tk, s := c.tokens, c.sched
	s.mu.Lock()
	tk.mu.Lock()
	tk.give(arrival, n)
	if slots && s.set && s.free == end {
		s.free = start
	}
	tk.mu.Unlock()
	s.mu.Unlock()
}

// Release gives back the tokens of an entry admitted without waiting that
// a later check refused, and its slots if it is still the latest entry
// scheduled (lastStart, lastEnd record the latest one that did not wait).
func (c *warmUpThrottle) Release(x entry.ExitInfo) {
	if !x.Blocked {
		return
	}
	s := c.sched
	s.mu.Lock()
	start, end := s.lastStart, s.lastEnd
	s.mu.Unlock()
	// Not the latest entry scheduled without a wait: keep the slots.
	c.giveBack(x.Start, float64(x.Batch), start, end, start.round(x.Start) == 0)
}

// waitedWarmUpSlots is the undo ticket of a warm-up throttle entry that
// waited for its slots [start, end).
type waitedWarmUpSlots struct {
	c          *warmUpThrottle
	start, end instant
}

func (w *waitedWarmUpSlots) Release(x entry.ExitInfo) {
	if x.Blocked {
		w.c.giveBack(x.Start, float64(x.Batch), w.start, w.end, true)
	}
}

// inherit keeps the queue schedule whatever changed, as throttle does, and
// the tokens when the curve is the same.
func (c *warmUpThrottle) inherit(old checker) {
	o := old.(*warmUpThrottle)
	c.sched = o.sched
	if sameCurve(&c.rule, &o.rule) {
		c.tokens = o.tokens
	}
}

// warmBudget notes (ok: the entry passed) or records the budget of a
// warm-up rule that refuses at once: a window's, at the allowance lim
// (which moves as the rule warms up), total counted in the window.
func (c *warmUp) warmBudget(ec *entry.Context, ok bool, lim float64, total uint64) {
	bg := windowBudget(ec, c.win, c.width, lim, total)
	if ok {
		c.noteBudget(ec, bg)
	} else {
		c.refusedBudget(ec, bg)
	}
}
