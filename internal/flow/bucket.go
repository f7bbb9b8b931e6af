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

// bucket is the state of a token-bucket rule: golang.org/x/time/rate's
// Limiter in the form of a GCRA (not Guava's SmoothBursty, which starts
// empty and makes the next request pay for the current one). Tokens refill
// at one per cost nanoseconds, continuously, up to burst; the bucket is full
// from the instant
//
//	full = at + owed×cost
//
// on, and holds burst - (full-now)/cost tokens at now before it (fewer than
// zero when requests reserved tokens still to come). A request of n at now
// moves full to max(full, now) + n×cost, and its wait is the time until the
// bucket holds no debt again:
//
//	wait = full' - burst×cost - now = (at - now) + (owed' - burst)×cost
//
// in whole nanoseconds rounded down, as rate.Limiter rounds it (a request
// whose tokens are due less than a nanosecond later passes now; the
// schedule itself is not rounded, so this never accumulates).
//
// The state is kept as an integer instant at and a token count owed, not
// as a floating-point instant: each decision rounds once, in the product
// (owed - burst)×cost, which it compares with the integer now - at, so no
// error accumulates over admissions, and a request at now + RetryAfter
// passes while one a nanosecond earlier does not. at moves to now whenever
// the bucket is full at now. The product is computed as
// (tokens × interval) / threshold, not with a rounded cost: for a whole
// number of tokens the product is exact and the quotient correctly
// rounded, so a wait that is a whole number of nanoseconds (3 tokens at 3
// per second: 1 s) is that number, not a nanosecond less.
//
// A bucket is shared by the rules that inherit it across reloads. It keeps
// the rate and burst it was last used with; a rule with other parameters
// first carries its tokens over (capped at the new burst, and never more
// than the old burst) at its own now.
//
// A request that gives its tokens back (its wait cancelled, or a later check
// refused it) gives back only those no later request depends on, as
// rate.Reservation.CancelAt does: its n tokens less those reserved after
// it, which the bucket reads from last, the instant at which the latest
// request's tokens are due. Tokens given back while later requests wait
// would otherwise let the next caller take a turn already promised to one
// of them: two admissions in one slot with a Burst of 1.
type bucket struct {
	mu    sync.Mutex
	at    int64   // ns
	owed  float64 // tokens taken since at, net of those given back
	rate  refill  // cost: ns per token
	burst float64 // tokens
	last  int64   // ns: when the latest request's tokens are due (rate's lastEvent)
}

// rebaseAfter bounds now - at: beyond it the bucket moves at to now,
// rounding owed once, so that now - at stays exact as a float64 (2^53 ns is
// about 104 days of saturation; 2^50 is 13 days).
const rebaseAfter = 1 << 50

// newBucket returns a full bucket.
func newBucket(rate refill, burst float64) *bucket {
	return &bucket{at: math.MinInt64 / 2, rate: rate, burst: burst}
}

// refill is a token bucket's rate: thr tokens per ival ns.
type refill struct {
	ival, thr float64
}

// ns returns how long tokens take to refill, in ns: tokens×ival/thr.
func (r refill) ns(tokens float64) float64 { return tokens * r.ival / r.thr }

// tokens returns the tokens that refill in ns nanoseconds.
func (r refill) tokens(ns float64) float64 { return ns * r.thr / r.ival }

// sync prepares the bucket for a decision at now with rate and burst: it
// carries the tokens over to new parameters and restarts the state at now
// when the bucket is full or when at is too far back. It returns now - at.
// Must hold mu.
func (b *bucket) sync(now int64, rate refill, burst float64) float64 {
	since := now - b.at
	if b.rate.ns(b.owed) <= float64(since) {
		// Full at now (a fresh bucket's at is far enough back for any
		// parameters): it holds its burst, and a larger new burst does
		// not fill it further (rate.Limiter.SetBurstAt).
		b.owed = math.Max(burst-b.burst, 0)
		b.at, b.rate, b.burst = now, rate, burst
		return 0
	}
	if b.rate != rate || b.burst != burst || since > rebaseAfter {
		// Start again at now with the tokens stored at now (fewer than
		// zero while the bucket owes some), at most the new burst.
		st := b.stored(float64(since))
		b.at, b.rate, b.burst = now, rate, burst
		b.owed = burst - math.Min(st, burst)
		return 0
	}
	return float64(since)
}

// stored returns the tokens the bucket holds at now (negative while it
// owes reserved ones), where since is now - at from sync. Must hold mu.
func (b *bucket) stored(since float64) float64 {
	return b.burst - (b.owed - b.rate.tokens(since))
}

// reserve takes n tokens at now if the wait for them is at most maxWait
// nanoseconds (0: only stored tokens). The wait is in whole nanoseconds (a
// float64: it may be longer than a time.Duration holds),
// rounded down as rate.Limiter rounds it: a request whose tokens are due
// less than a nanosecond after now does not wait. It returns the wait and
// whether it took the tokens; when it did not, wait is the wait it would
// have had, and stored the tokens the bucket holds at now.
func (b *bucket) reserve(now int64, n float64, rate refill, burst float64, maxWait int64) (wait, stored float64, ok bool) {
	b.mu.Lock()
	since := b.sync(now, rate, burst)
	// The wait in ns is (owed+n-burst)×cost - since: compare the rounded
	// product with the exact integers since and since+maxWait+1.
	due := b.rate.ns(b.owed + n - b.burst)
	if due < since+float64(maxWait)+1 {
		b.owed += n
		if due < since+1 {
			b.last = now
			b.mu.Unlock()
			return 0, 0, true
		}
		wait = math.Floor(due - since)
		b.last = now + int64(wait) // a wait within maxWait fits an int64
		b.mu.Unlock()
		return wait, 0, true
	}
	st := b.stored(since)
	b.mu.Unlock()
	return math.Floor(due - since), st, false
}

// cancel gives back, at now, what no later request depends on of the n
// tokens a request took at rate, due at act (now + its wait): n
// less the tokens reserved after it, nothing once act has passed (the
// request could have gone), and never so many that the bucket holds more
// than burst. It is rate.Reservation.CancelAt in the bucket's terms: the
// bucket advances to now at its current rate, and when the request was the
// latest one, last goes back to when the one before it was due, if that is
// not past.
func (b *bucket) cancel(now, act int64, n float64, rate refill) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if act < now {
		return
	}
	b.giveBack(now, act, n, rate)
}

// release gives back the n tokens of an entry admitted with its tokens due
// at act, which a later check refused: as cancel, but whenever it comes,
// since the entry never went through. The bucket does not advance (the
// refusal has no clock reading of its own); the tokens go back at at.
func (b *bucket) release(act int64, n float64, rate refill) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.giveBack(b.at, act, n, rate)
}

// giveBack is cancel's work at now (at least b.at when the bucket must not
// move). Must hold mu.
//
// Turns are whole nanoseconds, each rounded down from its own
// floating-point product, so two requests whose tokens are due at the same
// instant may be given turns a nanosecond apart: turns within a nanosecond
// of each other count as one instant, and a request due within a
// nanosecond of last counts as the latest, when a token takes more than
// two nanoseconds (so that two requests a token apart are never taken for
// one; at faster rates only an exact match counts).
func (b *bucket) giveBack(now, act int64, n float64, rate refill) {
	later := b.last - act
	latest := later == 0 || later <= 1 && later >= -1 && rate.ns(1) > 2
	give := n
	if !latest {
		give -= rate.tokens(float64(later))
	}
	if give <= 0 {
		return
	}
	if now > b.at {
		// Advance to now: the tokens stored at now, at most burst.
		st := math.Min(b.stored(float64(now-b.at)), b.burst)
		b.at, b.owed = now, b.burst-st
	}
	b.owed = math.Max(b.owed-give, 0)
	if latest {
		if prev := act - int64(rate.ns(n)); prev >= now {
			b.last = prev
		}
	}
}

// reasonBucketShort is the reason of a token-bucket rule's refusal of a
// batch the bucket does not hold yet.
const reasonBucketShort = "too few tokens"

// reasonBurst is the reason of a token-bucket rule's refusal of a batch
// that the bucket can never hold.
const reasonBurst = "batch larger than burst"

// bucketRule is what both token-bucket checkers keep.
type bucketRule struct {
	bucket *bucket
	rate   refill  // Threshold per interval
	burst  float64 // tokens
	base
}

func newBucketRule(b base) bucketRule {
	rate := refill{ival: float64(cmp.Or(b.rule.StatInterval, ruledef.StatInterval)), thr: b.rule.Threshold}
	burst := cmp.Or(burst(&b.rule), b.rule.Threshold)
	return bucketRule{bucket: newBucket(rate, burst), rate: rate, burst: burst, base: b}
}

// tooLargeForBurst refuses, with no RetryAfter, a batch larger than the
// bucket can ever hold.
func (c *bucketRule) tooLargeForBurst(ec *entry.Context) *core.BlockError {
	if n := float64(ec.Batch); n > c.burst {
		return c.refuse(ec, n, c.burst, 0, reasonBurst)
	}
	return nil
}

// tokenBucket enforces a QPS token-bucket rule that refuses at once: a
// batch of n takes n stored tokens or is refused, with RetryAfter the time
// until the bucket holds n.
type tokenBucket struct {
	bucketRule
}

func newTokenBucket(b base) *tokenBucket { return &tokenBucket{newBucketRule(b)} }

func (c *tokenBucket) check(_ context.Context, ec *entry.Context, _ core.Clock) *core.BlockError {
	if be := c.tooLargeForBurst(ec); be != nil {
		return be
	}
	n := float64(ec.Batch)
	wait, stored, ok := c.bucket.reserve(ec.Start, n, c.rate, c.burst, 0)
	if ec.WantBudget {
		c.bucketBudget(ec, ok, 0)
	}
	if !ok {
		return c.refuse(ec, stored, n, saturated(wait), reasonBucketShort)
	}
	ec.AddUndo(c)
	return nil
}

// Release gives back the tokens of an entry a later check refused, less
// those a later request depends on. They were due at its start.
func (c *tokenBucket) Release(x entry.ExitInfo) {
	if x.Blocked {
		c.bucket.release(x.Start, float64(x.Batch), c.rate)
	}
}

func (c *tokenBucket) inherit(old checker) { c.bucket = old.(*tokenBucket).bucket }

// tokenBucketThrottle enforces a QPS token-bucket rule whose requests may
// wait for tokens still to come (rate.Limiter.ReserveN): a batch of n takes
// n tokens, the bucket going into debt, and waits until the debt is paid,
// or is refused at once if that wait would exceed MaxQueueing.
type tokenBucketThrottle struct {
	bucketRule
	maxQueue int64 // ns
}

func newTokenBucketThrottle(b base) *tokenBucketThrottle {
	return &tokenBucketThrottle{bucketRule: newBucketRule(b), maxQueue: int64(maxQueueing(&b.rule))}
}

func (c *tokenBucketThrottle) check(ctx context.Context, ec *entry.Context, clk core.Clock) *core.BlockError {
	if be := c.tooLargeForBurst(ec); be != nil {
		return be
	}
	n := float64(ec.Batch)
	// A wait the context's deadline cannot cover is refused at once, and
	// reserves nothing (rate.Limiter.WaitN).
	maxWait, short := waitBound(ctx, c.maxQueue)
	wait, _, ok := c.bucket.reserve(ec.Start, n, c.rate, c.burst, maxWait)
	if ec.WantBudget {
		c.bucketBudget(ec, ok, c.maxQueue)
	}
	if !ok {
		if short && wait <= float64(c.maxQueue) {
			return c.pastDeadline(ec, wait, maxWait)
		}
		return c.queueRefusal(ec, wait, c.maxQueue)
	}
	if wait == 0 {
		ec.AddUndo(c)
		return nil
	}
	act := ec.Start + int64(wait)
	if err := c.sleep(ctx, ec, clk, time.Duration(wait)); err != nil {
		// What no later request depends on goes back: the next caller
		// may take it.
		c.bucket.cancel(clk.Nanotime(), act, n, c.rate)
		return c.cancelled(ec, wait, c.maxQueue, err)
	}
	// An entry that waited already allocated (its timer): its undo ticket
	// keeps when its tokens were due.
	ec.AddUndo(&waitedTokens{b: c.bucket, act: act, rate: c.rate})
	return nil
}

// Release gives back the tokens of an entry admitted without waiting that a
// later check refused, less those a later request depends on.
func (c *tokenBucketThrottle) Release(x entry.ExitInfo) {
	if x.Blocked {
		c.bucket.release(x.Start, float64(x.Batch), c.rate)
	}
}

// waitedTokens is the undo ticket of a token-bucket entry that waited for
// its tokens, due at act.
type waitedTokens struct {
	b    *bucket
	act  int64
	rate refill
}

func (w *waitedTokens) Release(x entry.ExitInfo) {
	if x.Blocked {
		w.b.release(w.act, float64(x.Batch), w.rate)
	}
}

func (c *tokenBucketThrottle) inherit(old checker) {
	c.bucket = old.(*tokenBucketThrottle).bucket
}

// level returns how many requests of one token the bucket would admit one
// after another at now, each waiting at most maxWait ns, and the
// nanoseconds until it is full: full - now, with full = at + owed×cost
// (exact for a whole number of tokens owed, as a wait is). It takes
// nothing. The k-th request passes when reserve would admit it: when
// (owed + k - burst)×cost, rounded as reserve rounds it, is under
// since + maxWait + 1 ns.
func (b *bucket) level(now, maxWait int64) (admits int64, untilFull float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	since, owed := float64(max(now-b.at, 0)), b.owed
	if b.rate.ns(owed) <= since { // full at now: what sync would make it
		since, owed = 0, 0
	} else {
		untilFull = b.rate.ns(owed) - since
	}
	bound := since + float64(maxWait) + 1
	passes := func(k int64) bool { return b.rate.ns(owed+float64(k)-b.burst) < bound }
	// The estimate from the tokens, then its rounding settled by reserve's
	// own test.
	k := floorCount(math.Ceil(b.burst-owed+b.rate.tokens(bound)) - 1)
	for k > 0 && !passes(k) {
		k--
	}
	for k < 1<<62 && passes(k+1) {
		k++
	}
	return k, untilFull
}

// bucketBudget notes (ok: the entry took its tokens) or records the
// budget of the rule's bucket at ec.Start, for requests that may wait up
// to maxQueue ns for their tokens.
func (c *bucketRule) bucketBudget(ec *entry.Context, ok bool, maxQueue int64) {
	admits, untilFull := c.bucket.level(ec.Start, maxQueue)
	bg := bucketBudget(c.rate, c.burst, admits, untilFull, maxQueue)
	if ok {
		c.noteBudget(ec, bg)
	} else {
		c.refusedBudget(ec, bg)
	}
}
