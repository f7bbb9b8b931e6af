package flow

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/sluice-go/sluice/core"
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
	tk := &tokens{threshold: t, coldFactor: cf, interval: int64(r.Interval()), free: math.Inf(-1)}
	tk.warningToken = periods * t / (cf - 1)
	tk.maxToken = tk.warningToken + 2*periods*t/(1+cf)
	tk.slope = (cf - 1) / t / (tk.maxToken - tk.warningToken)
	return tk
}

// sync rolls the interval counters forward to now and refills tokens at an
// interval boundary. Must hold mu.
func (tk *tokens) sync(now int64) {
	idx := now / tk.interval
	if !tk.primed {
		tk.primed = true
		tk.cur = idx
		tk.lastFilled = idx - 1
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
	if tk.prevCount < math.Floor(tk.threshold/tk.coldFactor) {
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
// of the warm-up period). Must hold mu.
func (tk *tokens) take(n float64) {
	tk.curCount += n
	tk.stored = math.Max(tk.stored-n, 0)
}

// give undoes take for a request that did not go through after all. Must
// hold mu.
func (tk *tokens) give(n float64) {
	tk.curCount -= n
	tk.stored = math.Min(tk.stored+n, tk.maxToken)
}

// limit returns the number of requests allowed per interval in the current
// token state. Must hold mu.
func (tk *tokens) limit() float64 {
	if tk.stored >= tk.warningToken {
		above := tk.stored - tk.warningToken
		return 1 / (above*tk.slope + 1/tk.threshold)
	}
	return tk.threshold
}

// limitAt returns the allowance per interval at now.
func (tk *tokens) limitAt(now int64) float64 {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	tk.sync(now)
	return tk.limit()
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
	tk := c.tokens
	tk.mu.Lock()
	tk.sync(now)
	lim := tk.limit()
	if float64(n) > lim {
		tk.mu.Unlock()
		return c.refuse(ec, float64(n), lim, 0, reasonAboveAllowance)
	}
	ok, seen := admit(ec, c.win, c.width, lim)
	if ok {
		tk.take(float64(n))
	}
	tk.mu.Unlock()
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
	tk := c.tokens
	tk.mu.Lock()
	tk.sync(ec.Start)
	lim := tk.limit()
	if n > 1 && n > lim {
		tk.mu.Unlock()
		return c.refuse(ec, n, lim, 0, reasonAboveAllowance)
	}
	// The schedule of throttle, with the slot length of the current
	// allowance.
	cost := float64(tk.interval) / lim * n
	start := math.Max(tk.free, now)
	wait := math.Round(start) - now
	if wait > float64(c.maxQueue) {
		tk.mu.Unlock()
		return c.queueRefusal(ec, wait, c.maxQueue)
	}
	tk.free = start + cost
	tk.take(n)
	tk.mu.Unlock()
	if d := time.Duration(wait); d > 0 {
		if err := ec.Sleep(ctx, clk, d); err != nil {
			tk.mu.Lock()
			tk.free -= cost
			tk.give(n)
			tk.mu.Unlock()
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
		tk := c.tokens
		tk.mu.Lock()
		tk.free -= float64(tk.interval) / tk.limit() * float64(x.Batch)
		tk.give(float64(x.Batch))
		tk.mu.Unlock()
	}
}

func (c *warmUpThrottle) inherit(old checker) {
	o := old.(*warmUpThrottle)
	if c.rule == o.rule {
		c.tokens = o.tokens
	}
}
