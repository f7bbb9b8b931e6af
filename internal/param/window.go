package param

import (
	"math"
	"time"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
)

// A per-caller QPS rule with the reject behavior (modeWindow) counts each
// caller as Sentinel counts an origin in its origin node: a sliding window
// of Duration made of two buckets of Duration/2, aligned on the clock
// (LeapArray with sampleCount 2). An entry of n passes when the counts of
// the current bucket and the previous one, plus n, are at most the
// threshold, so every two consecutive buckets hold at most the threshold;
// a token bucket of the same threshold passed up to twice it within one
// Duration (a full bucket at once, then what it earned meanwhile).
//
// The state fits the value's cache slot as a bucket's does: last is the
// start of the newest bucket counted, tokens its count, part the count of
// the bucket before it. A Duration is a whole number of milliseconds of at
// least 10 (rules.Flow.StatInterval), so a bucket is a whole number of
// nanoseconds.

// windowStart is the value of keyState.last for a value never counted: so
// long ago that its buckets hold nothing.
const windowStart = math.MinInt64 / 2

// bucketOf returns the start of the bucket of length half holding now.
func bucketOf(now, half int64) int64 {
	m := now % half
	if m < 0 {
		m += half
	}
	return now - m
}

// roll brings e's buckets to the one starting at b: the newest becomes the
// previous when b follows it, both empty when a whole window has passed.
// A newest bucket after b (an entry that started later took the lock
// first) is kept, and the entry counted there: later than it began, never
// less strict. Must hold e's shard lock.
func roll(e *keyState, b, half int64) {
	switch {
	case e.last >= b:
	case e.last == b-half:
		e.part, e.tokens, e.last = uint64(e.tokens), 0, b
	default:
		e.part, e.tokens, e.last = 0, 0, b
	}
}

// checkWindow decides n requests of the value of r (threshold t) by its
// window, at ec.Start.
func (c *Controller) checkWindow(ec *entry.Context, s *shard, r *ref, t int64) *core.BlockError {
	now, n := ec.Start, ec.Batch
	half := int64(c.window / 2)
	s.mu.Lock()
	e := s.get(r, 0, windowStart)
	roll(e, bucketOf(now, half), half)
	prev, cur, base := int64(e.part), e.tokens, e.last
	if prev+cur+n <= t {
		e.tokens += n
		if c.wantBudget(ec) {
			c.windowBudget(ec, true, prev, cur+n, base, now, t)
		}
		s.mu.Unlock()
		// The count comes back only if a later check refuses the entry.
		ec.AddUndo(e)
		return nil
	}
	if c.wantBudget(ec) {
		c.windowBudget(ec, false, prev, cur, base, now, t)
	}
	s.mu.Unlock()
	// The previous bucket leaves the window when the newest ends; the
	// newest a bucket later. The batch is at most t (CheckKey), so the
	// second always frees enough.
	retry := base + 2*half - now
	if cur+n <= t {
		retry = base + half - now
	}
	return c.refused(ec, float64(prev+cur), float64(t), retry, "")
}

// unwindow gives back the n requests of an entry that began at start and
// that a later check refused, if the bucket they were counted in is still
// the newest; once the buckets have rolled the window keeps them until
// they leave it (never less strict). Must hold e's shard lock.
func unwindow(e *keyState, start, n, window int64) {
	if bucketOf(start, window/2) == e.last {
		e.tokens = max(e.tokens-n, 0)
	}
}

// windowBudget is the budget of a value's window holding prev in the
// previous bucket and cur in the newest, which starts at base: Limit is
// the threshold t, Remaining what the window still admits, Reset the time
// until it holds nothing (the newest non-empty bucket has left it),
// Window its length. Must hold the value's shard lock.
func (c *Controller) windowBudget(ec *entry.Context, passed bool, prev, cur, base, now, t int64) {
	half := int64(c.window / 2)
	bg := core.Budget{Limit: float64(t), Remaining: max(t-prev-cur, 0), Window: time.Duration(c.window)}
	switch {
	case cur > 0:
		bg.Reset = time.Duration(base + 2*half - now)
	case prev > 0:
		bg.Reset = time.Duration(base + half - now)
	}
	c.note(ec, passed, bg)
}
