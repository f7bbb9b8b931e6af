package flow

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/internal/entry"
)

// bucket is the state of a token-bucket rule: golang.org/x/time/rate's
// Limiter (Guava's SmoothBursty) in the form of a GCRA. Tokens refill at
// one per cost nanoseconds, continuously, up to burst; the bucket is full
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
// the bucket is full at now.
//
// A bucket is shared by the rules that inherit it across reloads. It keeps
// the cost and burst it was last used with; a rule with other parameters
// first carries its tokens over (capped at the new burst) at its own now.
type bucket struct {
	mu    sync.Mutex
	at    int64   // ns
	owed  float64 // tokens taken since at, net of those given back
	cost  float64 // ns per token
	burst float64 // tokens
}

// rebaseAfter bounds now - at: beyond it the bucket moves at to now,
// rounding owed once, so that now - at stays exact as a float64 (2^53 ns is
// about 104 days of saturation; 2^50 is 13 days).
const rebaseAfter = 1 << 50

// newBucket returns a full bucket.
func newBucket(cost, burst float64) *bucket {
	return &bucket{at: math.MinInt64 / 2, cost: cost, burst: burst}
}

// sync prepares the bucket for a decision at now with cost and burst: it
// carries the tokens over to new parameters and restarts the state at now
// when the bucket is full or when at is too far back. It returns now - at.
// Must hold mu.
func (b *bucket) sync(now int64, cost, burst float64) float64 {
	since := now - b.at
	if b.owed*b.cost <= float64(since) {
		// Full at now (a fresh bucket's at is far enough back for any
		// parameters).
		b.at, b.owed, b.cost, b.burst = now, 0, cost, burst
		return 0
	}
	if b.cost != cost || b.burst != burst || since > rebaseAfter {
		// Start again at now with the tokens stored at now (fewer than
		// zero while the bucket owes some), at most the new burst.
		st := b.stored(float64(since))
		b.at, b.cost, b.burst = now, cost, burst
		b.owed = burst - math.Min(st, burst)
		return 0
	}
	return float64(since)
}

// stored returns the tokens the bucket holds at now (negative while it
// owes reserved ones), where since is now - at from sync. Must hold mu.
func (b *bucket) stored(since float64) float64 {
	return b.burst - (b.owed - since/b.cost)
}

// reserve takes n tokens at now if the wait for them is at most maxWait
// nanoseconds (0: only stored tokens). The wait is in whole nanoseconds (a
// float64: it may be longer than a time.Duration holds),
// rounded down as rate.Limiter rounds it: a request whose tokens are due
// less than a nanosecond after now does not wait. It returns the wait and
// whether it took the tokens; when it did not, wait is the wait it would
// have had, and stored the tokens the bucket holds at now.
func (b *bucket) reserve(now int64, n, cost, burst float64, maxWait int64) (wait, stored float64, ok bool) {
	b.mu.Lock()
	since := b.sync(now, cost, burst)
	// The wait in ns is (owed+n-burst)×cost - since: compare the rounded
	// product with the exact integers since and since+maxWait+1.
	due := (b.owed + n - b.burst) * b.cost
	if due < since+float64(maxWait)+1 {
		b.owed += n
		b.mu.Unlock()
		if due < since+1 {
			return 0, 0, true
		}
		return math.Floor(due - since), 0, true
	}
	st := b.stored(since)
	b.mu.Unlock()
	return math.Floor(due - since), st, false
}

// give returns n tokens, never more than the bucket has taken since it was
// last full (it never holds more than burst).
func (b *bucket) give(n float64) {
	b.mu.Lock()
	b.owed = math.Max(b.owed-n, 0)
	b.mu.Unlock()
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
	cost   float64 // ns per token: interval/threshold
	burst  float64 // tokens
	base
}

func newBucketRule(b base) bucketRule {
	cost := float64(b.rule.Interval()) / b.rule.Threshold
	burst := b.rule.BurstSize()
	return bucketRule{bucket: newBucket(cost, burst), cost: cost, burst: burst, base: b}
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
	wait, stored, ok := c.bucket.reserve(ec.Start, n, c.cost, c.burst, 0)
	if !ok {
		return c.refuse(ec, stored, n, saturated(wait), reasonBucketShort)
	}
	ec.AddUndo(c)
	return nil
}

// Release gives back the tokens of an entry a later check refused.
func (c *tokenBucket) Release(x entry.ExitInfo) {
	if x.Blocked {
		c.bucket.give(float64(x.Batch))
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
	return &tokenBucketThrottle{bucketRule: newBucketRule(b), maxQueue: int64(b.rule.MaxQueueing)}
}

func (c *tokenBucketThrottle) check(ctx context.Context, ec *entry.Context, clk core.Clock) *core.BlockError {
	if be := c.tooLargeForBurst(ec); be != nil {
		return be
	}
	n := float64(ec.Batch)
	wait, _, ok := c.bucket.reserve(ec.Start, n, c.cost, c.burst, c.maxQueue)
	if !ok {
		return c.queueRefusal(ec, wait, c.maxQueue)
	}
	if wait > 0 {
		if err := ec.Sleep(ctx, clk, time.Duration(wait)); err != nil {
			c.bucket.give(n) // the tokens go back: the next caller takes them
			return c.cancelled(ec, wait, c.maxQueue, err)
		}
	}
	ec.AddUndo(c)
	return nil
}

// Release gives back the tokens of an entry a later check refused.
func (c *tokenBucketThrottle) Release(x entry.ExitInfo) {
	if x.Blocked {
		c.bucket.give(float64(x.Batch))
	}
}

func (c *tokenBucketThrottle) inherit(old checker) {
	c.bucket = old.(*tokenBucketThrottle).bucket
}
