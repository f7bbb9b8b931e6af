package flow

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/internal/clock"
	"github.com/sluice-go/sluice/internal/entry"
)

// tokens is the token state of a warm-up rule: Sentinel's WarmUpController
// (after Guava's SmoothWarmingUp) counted in statistic intervals rather than
// seconds. Admissions consume stored tokens at once; at each interval
// boundary a resource used at less than threshold/coldFactor in the previous
// interval refills threshold tokens per elapsed interval (cooling towards
// maxToken), and a busier one below the warning level refills up to the
// warning level only. While more than warningToken tokens are stored the
// resource is cold and admits less than the threshold.
type tokens struct {
	mu sync.Mutex

	threshold    float64
	coldFactor   float64
	warningToken float64
	maxToken     float64
	slope        float64
	interval     int64

	stored     float64
	lastFilled int64 // interval index of the last refill
	cur        int64 // interval index being counted
	curCount   float64
	prevCount  float64
	free       float64 // warm-up throttle: ns at which the schedule is free (see throttle)
	primed     bool
}

func newTokens(b *base) *tokens {
	r := &b.rule
	t := r.Threshold
	cf := r.Cold()
	periods := float64(r.WarmUpPeriod) / float64(r.Interval())
	w := &tokens{threshold: t, coldFactor: cf, interval: int64(r.Interval()), free: math.Inf(-1)}
	w.warningToken = periods * t / (cf - 1)
	w.maxToken = w.warningToken + 2*periods*t/(1+cf)
	w.slope = (cf - 1) / t / (w.maxToken - w.warningToken)
	return w
}

// sync rolls the interval counters forward to now and refills tokens at an
// interval boundary. Must hold mu.
func (w *tokens) sync(now int64) {
	idx := now / w.interval
	if !w.primed {
		w.primed = true
		w.cur = idx
		w.lastFilled = idx - 1
		w.stored = w.maxToken
		return
	}
	if idx != w.cur {
		if idx == w.cur+1 {
			w.prevCount = w.curCount
		} else {
			w.prevCount = 0
		}
		w.curCount = 0
		w.cur = idx
	}
	if idx <= w.lastFilled {
		return
	}
	old := w.stored
	v := old
	refill := float64(idx-w.lastFilled) * w.threshold
	if w.prevCount < math.Floor(w.threshold/w.coldFactor) {
		// Lightly used (or idle): cool down towards maxToken.
		v = old + refill
	} else if old < w.warningToken {
		// Busy and warm: top up, but never past the warning level, so a
		// resource at full load stays warm.
		v = math.Min(old+refill, w.warningToken)
	}
	w.stored = math.Min(v, w.maxToken)
	w.lastFilled = idx
}

// take records n admitted requests: they count towards this interval and
// consume stored tokens at once (Sentinel deducts them only at the next
// interval's refill, which makes its warm-up lag one interval behind
// Guava's; consuming at admission reaches the threshold exactly at the end
// of the warm-up period). Must hold mu.
func (w *tokens) take(n float64) {
	w.curCount += n
	w.stored = math.Max(w.stored-n, 0)
}

// give undoes take for a request that did not go through after all. Must
// hold mu.
func (w *tokens) give(n float64) {
	w.curCount -= n
	w.stored = math.Min(w.stored+n, w.maxToken)
}

// limit returns the number of requests allowed per interval in the current
// token state. Must hold mu.
func (w *tokens) limit() float64 {
	if w.stored >= w.warningToken {
		above := w.stored - w.warningToken
		return 1 / (above*w.slope + 1/w.threshold)
	}
	return w.threshold
}

// limitAt returns the allowance per interval at now.
func (w *tokens) limitAt(now int64) float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sync(now)
	return w.limit()
}

// warmUp enforces a QPS warm-up rule that refuses at once: at most the
// current allowance (see tokens) in the window of the last ten buckets.
type warmUp struct {
	counted
	tokens *tokens
	base
}

func newWarmUp(b base) *warmUp {
	return &warmUp{counted: counted{width: bucketWidth(&b.rule)}, tokens: newTokens(&b), base: b}
}

// reasonAboveAllowance is the reason of a warm-up rule's refusal of a batch
// within the threshold but above what the resource admits while it is not
// yet warm. Waiting alone does not help (only traffic warms a resource), so
// it comes without a RetryAfter.
const reasonAboveAllowance = "batch larger than warm-up allowance"

func (c *warmUp) check(_ context.Context, ec *entry.Context, _ core.Clock) *core.BlockError {
	if be := c.tooLarge(ec, c.rule.Threshold); be != nil {
		return be
	}
	now, n := ec.Start, ec.Batch
	w := c.tokens
	w.mu.Lock()
	w.sync(now)
	lim := w.limit()
	if float64(n) > lim {
		w.mu.Unlock()
		return c.refuse(ec, float64(n), lim, 0, reasonAboveAllowance)
	}
	ok, seen := c.win.TryAdd(now/c.width, uint64(n), lim)
	if ok {
		w.take(float64(n))
	}
	w.mu.Unlock()
	if !ok {
		// When the window will have room at this allowance, which may
		// change meanwhile: warm-up moves it as tokens are taken and
		// refilled.
		return c.refuse(ec, float64(seen), lim, c.retryAfter(ec, lim), "warming up")
	}
	ec.AddUndo(c)
	return nil
}

func (c *warmUp) Release(x entry.ExitInfo) {
	if x.Blocked {
		giveBack(c.win, c.width, x)
		c.tokens.mu.Lock()
		c.tokens.give(float64(x.Batch))
		c.tokens.mu.Unlock()
	}
}

func (c *warmUp) inherit(old checker) {
	o := old.(*warmUp)
	c.win = o.win
	if c.rule == o.rule {
		c.tokens = o.tokens
	}
}

// warmUpThrottle enforces a QPS warm-up rule that paces requests at the
// current allowance (see tokens), waiting at most MaxQueueing.
type warmUpThrottle struct {
	tokens   *tokens
	maxQueue int64 // ns
	base
}

func newWarmUpThrottle(b base) *warmUpThrottle {
	return &warmUpThrottle{tokens: newTokens(&b), maxQueue: int64(b.rule.MaxQueueing), base: b}
}

func (c *warmUpThrottle) check(ctx context.Context, ec *entry.Context, clk core.Clock) *core.BlockError {
	if be := c.tooLargeToPace(ec, c.rule.Threshold); be != nil {
		return be
	}
	now, n := float64(ec.Start), float64(ec.Batch)
	w := c.tokens
	w.mu.Lock()
	w.sync(ec.Start)
	lim := w.limit()
	if n > 1 && n > lim {
		w.mu.Unlock()
		return c.refuse(ec, n, lim, 0, reasonAboveAllowance)
	}
	// The schedule of throttle, with the slot length of the current
	// allowance.
	cost := float64(w.interval) / lim * n
	start := math.Max(w.free, now)
	wait := math.Round(start) - now
	if wait > float64(c.maxQueue) {
		w.mu.Unlock()
		return c.queueRefusal(ec, wait, c.maxQueue)
	}
	w.free = start + cost
	w.take(n)
	w.mu.Unlock()
	if d := time.Duration(wait); d > 0 {
		if err := clock.Sleep(ctxOrBackground(ctx), clk, d); err != nil {
			w.mu.Lock()
			w.free -= cost
			w.give(n)
			w.mu.Unlock()
			return c.cancelled(ec, wait, c.maxQueue, err)
		}
	}
	ec.AddUndo(c)
	return nil
}

// Release gives back the slots and tokens of an entry a later check
// refused; the slots at the current allowance, which may have moved since
// the entry was scheduled.
func (c *warmUpThrottle) Release(x entry.ExitInfo) {
	if x.Blocked {
		w := c.tokens
		w.mu.Lock()
		w.free -= float64(w.interval) / w.limit() * float64(x.Batch)
		w.give(float64(x.Batch))
		w.mu.Unlock()
	}
}

func (c *warmUpThrottle) inherit(old checker) {
	o := old.(*warmUpThrottle)
	if c.rule == o.rule {
		c.tokens = o.tokens
	}
}
