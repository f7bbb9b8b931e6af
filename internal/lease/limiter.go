package lease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/core"
)

// FallbackPolicy is what a budget does while its Store fails or does not
// answer in time.
type FallbackPolicy uint8

const (
	// FallbackLocal, the zero value, enforces a local share of the budget
	// with a limiter of the same algorithm in this process: Spec.LocalLimit
	// permits per Interval, or Limit divided by the live instance count.
	FallbackLocal FallbackPolicy = iota
	// FallbackPass admits every request.
	FallbackPass
	// FallbackBlock refuses every request.
	FallbackBlock
)

// String returns "local", "pass" or "block".
func (f FallbackPolicy) String() string {
	switch f {
	case FallbackLocal:
		return "local"
	case FallbackPass:
		return "pass"
	case FallbackBlock:
		return "block"
	}
	return "unknown"
}

// Spec describes one shared budget as this instance enforces it.
type Spec struct {
	// Budget is the shared budget; its terms go to the Store with every
	// request. Key must not be empty, Limit must be positive and finite,
	// Interval positive, Burst and MaxQueue non-negative.
	Budget cluster.Budget
	// Strict sends one request to the Store per call, with no lease:
	// every decision is the Store's, exactly (for low rates, such as 20
	// per hour per user). Concurrent calls share one Take. The zero value
	// leases.
	Strict bool
	// Fallback is the policy while the Store fails; the zero value is
	// FallbackLocal.
	Fallback FallbackPolicy
	// LocalLimit is, for FallbackLocal, the permits per Interval this
	// instance admits on its own; zero means Limit divided by the live
	// instance count at the time of the decision.
	LocalLimit float64
	// LocalBurst is, for FallbackLocal on a TokenBucket budget, the local
	// bucket's capacity; zero means Burst (or Limit) scaled by the local
	// share, LocalLimit/Limit. It is at least 1.
	LocalBurst float64
	// Lifetime is how long leased permits stay usable: a count lease's
	// permits from the moment its grant arrives, a Pacing permit from its
	// due time. Unused permits then go back to the Store. Zero means
	// Interval/10.
	Lifetime time.Duration
}

// Result is the decision on one Acquire. It is four words or fewer, so
// that it travels in registers.
type Result struct {
	// Wait is, for an admitted request of a Pacing budget, how long the
	// caller must wait, from the now it passed, before it proceeds; zero
	// otherwise. Acquire does not sleep it.
	Wait time.Duration
	// RetryAfter is, for a refused request, when a retry could be admitted
	// as far as this instance can tell; zero when it cannot tell.
	RetryAfter time.Duration
	// Admitted reports whether the request may proceed.
	Admitted bool
	// By is what decided.
	By Decider
}

// Fallback reports whether the fallback policy decided.
func (r Result) Fallback() bool { return r.By == ByFallback }

// Decider is what decided a request.
type Decider uint8

const (
	// ByStore is the Store's grants: a lease's permits, a strict request's
	// answer, or the Store having none to grant.
	ByStore Decider = iota
	// ByFallback is the budget's fallback policy: the Store was failing,
	// did not answer within the Manager's Timeout, or the Limiter is
	// closed.
	ByFallback
	// ByContext is a refusal because the caller's context ended while the
	// request waited for the Store; ctx.Err() tells why.
	ByContext
)

// String returns "store", "fallback" or "context".
func (d Decider) String() string {
	switch d {
	case ByStore:
		return "store"
	case ByFallback:
		return "fallback"
	case ByContext:
		return "context"
	}
	return "unknown"
}

type kind uint8

const (
	kindCount  kind = iota // TokenBucket, SlidingWindow: a count of permits
	kindPace               // Pacing: a schedule of permits
	kindStrict             // no lease
)

// Limiter enforces one shared budget for one instance. It is safe for
// concurrent use. Build it with Manager.NewLimiter; Close it when its rule
// changes or goes away.
type Limiter struct {
	// Read by every admission.
	cur      atomic.Pointer[lease] // never nil: emptyLease when none
	clock    core.Clock
	kind     kind
	life     int64 // Lifetime, ns
	aligned  int64 // SlidingWindow count leases: Interval, ns (see windowOf); 0 otherwise
	maxQueue int64 // Pacing: MaxQueue, ns

	m        *Manager
	spec     Spec
	horizon  int64   // ns of demand a lease is sized for
	step     int64   // Pacing: ns between permits
	limit    float64 // the permits per Interval that cap lease sizes
	fairRate float64 // Limit per ns

	mu       sync.Mutex
	next     *lease // a refill that arrived while cur still had permits
	flight   *call  // the refill under way
	closed   bool
	dryUntil int64 // clock ns: the Store had none; refuse until then
	// Demand, for lease sizes.
	consumed       int64   // permits used from retired leases (skipped Pacing permits included)
	sampleAt       int64   // clock ns of the last sizing
	sampleConsumed int64   // consumed at sampleAt
	sampled        bool    // rate holds a measurement
	rate           float64 // permits per ns
	low            int64   // low-water mark for the lease under way
	// What the Store gave this instance lately, for the local share when
	// it stops answering (see dropLeases).
	recent  slotWin // permits granted in the last Interval
	lastDry int64   // clock ns the Store last had fewer than asked

	local atomic.Pointer[localLimiter]
	stats limiterStats
}

type limiterStats struct {
	refills, prefetches, waits, timeouts, fallbacks, expired atomic.Int64
}

// lease is permits granted by one Take. A count lease's permits are claimed
// by decrementing avail; a Pacing lease's in order, by advancing used. The
// other fields never change once the lease is published.
type lease struct {
	avail   atomic.Int64 // count: permits left
	used    atomic.Int64 // Pacing: index of the next permit
	expires int64        // count: clock ns at which the permits left become unusable
	from    int64        // count: clock ns before which they are unusable (the aligned interval's start)
	until   int64        // count: clock ns of the aligned interval's end (noEnd if not aligned)
	low     int64        // a claim that leaves at most low permits starts the next refill
	granted int64
	start   int64 // clock ns when the grant arrived
	base    int64 // Pacing: clock ns when permit 0 is due; permit i is due at base+i*stepNS
	stepNS  int64 // Pacing: ns between permits
}

// emptyLease stands for no lease: it has no permits and is always expired.
// It is never written.
var emptyLease = &lease{expires: math.MinInt64, from: math.MinInt64, until: noEnd}

// horizonMax is the most demand a lease is sized for.
const horizonMax = int64(100 * time.Millisecond)

// minSample is the shortest span a demand measurement divides by.
const minSample = int64(time.Millisecond)

// NewLimiter returns the Limiter of spec, registered with m until its Close
// or m's. It holds no lease until its first Acquire.
func (m *Manager) NewLimiter(spec Spec) (*Limiter, error) {
	if err := validate(&spec); err != nil {
		return nil, err
	}
	b := &spec.Budget
	l := &Limiter{m: m, spec: spec, clock: m.clock, lastDry: math.MinInt64}
	l.recent.width = max(ceilDiv(int64(b.Interval), localSlots-1), 1)
	l.cur.Store(emptyLease)
	l.life = int64(spec.Lifetime)
	if l.life == 0 {
		l.life = max(int64(b.Interval)/10, 1)
	}
	l.horizon = max(min(horizonMax, l.life/2), 1)
	l.fairRate = b.Limit / float64(b.Interval)
	l.limit = b.Limit
	if !spec.Strict && b.Algorithm == cluster.SlidingWindow {
		l.aligned = int64(b.Interval)
	}
	switch {
	case spec.Strict:
		l.kind = kindStrict
	case b.Algorithm == cluster.Pacing:
		l.kind = kindPace
		l.step = max(toInt(math.Ceil(float64(b.Interval)/b.Limit)), 1)
		l.maxQueue = int64(b.MaxQueue)
		// A Pacing lease holds a stretch of the shared schedule: cap it by
		// the permits the Store would queue at once as well.
		l.limit = min(l.limit, float64(l.maxQueue/l.step+1))
	case b.Burst > 0:
		l.limit = min(l.limit, b.Burst)
	}
	if err := m.register(l); err != nil {
		return nil, err
	}
	return l, nil
}

// complexity: one check per Spec field, a case per algorithm
func validate(s *Spec) error {
	b := &s.Budget
	bad := func(format string, args ...any) error {
		return fmt.Errorf("sluice: shared budget %q: "+format, append([]any{b.Key}, args...)...)
	}
	switch {
	case b.Key == "":
		return errors.New("sluice: shared budget: empty key")
	case b.Algorithm != cluster.TokenBucket && b.Algorithm != cluster.SlidingWindow && b.Algorithm != cluster.Pacing:
		return bad("unknown algorithm %d", b.Algorithm)
	case !(b.Limit > 0) || math.IsInf(b.Limit, 0):
		return bad("limit %v not positive and finite", b.Limit)
	case b.Interval <= 0:
		return bad("interval %v not positive", b.Interval)
	case !(b.Burst >= 0) || math.IsInf(b.Burst, 0):
		return bad("burst %v negative or not finite", b.Burst)
	case b.MaxQueue < 0:
		return bad("negative max queue %v", b.MaxQueue)
	case !(s.LocalLimit >= 0) || math.IsInf(s.LocalLimit, 0):
		return bad("local limit %v negative or not finite", s.LocalLimit)
	case !(s.LocalBurst >= 0) || math.IsInf(s.LocalBurst, 0):
		return bad("local burst %v negative or not finite", s.LocalBurst)
	case s.Lifetime < 0:
		return bad("negative lifetime %v", s.Lifetime)
	case s.Fallback > FallbackBlock:
		return bad("unknown fallback %d", s.Fallback)
	}
	return nil
}

// Spec returns the spec the Limiter enforces.
func (l *Limiter) Spec() Spec { return l.spec }

// Acquire decides a request for n permits (n below 1 counts as 1) at now,
// a reading of the Manager's clock that the caller has already taken for
// the entry (the engine's checks decide at ec.Start), so that an admission
// from a lease reads no clock.
//
// From a lease with permits left it is a compare-and-swap and a few loads,
// and allocates nothing. Otherwise it waits, with the other callers that
// found the lease empty, for one refill from the Store, until the refill
// arrives, ctx ends (refused, By ByContext) or the Manager's Timeout
// passes (decided by the fallback policy), whichever is first. A strict
// Limiter's request goes to the Store in the next Take, with the same
// bounds. While the Manager is in Fallback mode, or once the Limiter is
// closed, the fallback policy decides at once.
//
// For a Pacing budget an admitted request must wait Result.Wait before it
// proceeds; the caller sleeps it from when Acquire returns. The wait is
// computed from now (or a later reading), so a late now errs long, never
// short.
func (l *Limiter) Acquire(ctx context.Context, now, n int64) Result {
	if n < 1 {
		n = 1
	}
	switch l.kind {
	case kindCount:
		ls := l.cur.Load()
		switch claimCount(ls, now, n) {
		case claimLow:
			l.prefetch(ls)
			fallthrough
		case claimOK:
			return Result{Admitted: true}
		}
	case kindPace:
		ls := l.cur.Load()
		w, st := l.claimPace(ls, now, n)
		switch st {
		case claimLow:
			l.prefetch(ls)
			fallthrough
		case claimOK:
			return Result{Admitted: true, Wait: time.Duration(w)}
		}
	default:
		return l.acquireStrict(ctx, now, n)
	}
	return l.acquireSlow(ctx, n)
}

type claimStatus uint8

const (
	claimOK     claimStatus = iota
	claimLow                // claimed, and the lease fell to its low-water mark
	claimEmpty              // too few permits (or expired)
	claimTooFar             // Pacing: the next permit is due beyond MaxQueue
)

// claimCount takes n permits from the count lease ls if it has them and has
// not expired at now.
func claimCount(ls *lease, now, n int64) claimStatus {
	if now >= ls.expires || now < ls.from {
		return claimEmpty
	}
	for v := ls.avail.Load(); v >= n; v = ls.avail.Load() {
		if ls.avail.CompareAndSwap(v, v-n) {
			if v > ls.low && v-n <= ls.low {
				return claimLow
			}
			return claimOK
		}
	}
	return claimEmpty
}

// claimPace takes the next n permits of the Pacing lease ls and returns how
// long until the first is due (zero if it is due). Permits due more than
// the lifetime before now are skipped, never used. If the first is due
// beyond MaxQueue it returns claimTooFar and the time beyond MaxQueue.
func (l *Limiter) claimPace(ls *lease, now, n int64) (int64, claimStatus) {
	for {
		i := ls.used.Load()
		if i+n > ls.granted {
			return 0, claimEmpty
		}
		due := ls.base + i*ls.stepNS
		if stale := now - l.life; due < stale {
			j := min(ceilDiv(stale-ls.base, ls.stepNS), ls.granted)
			ls.used.CompareAndSwap(i, j)
			continue
		}
		w := due - now
		if w > l.maxQueue {
			return w - l.maxQueue, claimTooFar
		}
		if ls.used.CompareAndSwap(i, i+n) {
			st := claimOK
			if left := ls.granted - i; left > ls.low && left-n <= ls.low {
				st = claimLow
			}
			return max(w, 0), st
		}
	}
}

// claim claims n permits from ls, of whichever kind.
func (l *Limiter) claim(ls *lease, now, n int64) (int64, claimStatus) {
	if l.kind == kindPace {
		return l.claimPace(ls, now, n)
	}
	return 0, claimCount(ls, now, n)
}

// prefetch starts the next refill of a lease that fell to its low-water
// mark, if ls is still the current lease. The caller does not wait for it.
func (l *Limiter) prefetch(ls *lease) {
	l.mu.Lock()
	if l.cur.Load() == ls {
		l.prefetchLocked(l.clock.Nanotime())
	}
	l.mu.Unlock()
}

func (l *Limiter) prefetchLocked(now int64) {
	if l.closed || l.flight != nil || l.next != nil || now < l.dryUntil || l.m.Mode() == Fallback {
		return
	}
	if l.startRefillLocked(now, 1) {
		l.stats.prefetches.Add(1)
	}
}

// acquireSlow decides a request the current lease could not serve.
func (l *Limiter) acquireSlow(ctx context.Context, n int64) Result {
	var timer core.Timer
	var expired <-chan time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		// A fresh reading: a Pacing wait computed here counts from about
		// when Acquire returns, and sizing measures demand up to now.
		now := l.clock.Nanotime()
		if l.m.Mode() == Fallback {
			return l.fallback(n, now)
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return l.fallback(n, now)
		}
		if r, ok := l.settleLocked(now, n); ok {
			l.mu.Unlock()
			return r
		}
		if now < l.dryUntil {
			r := Result{RetryAfter: time.Duration(l.dryUntil - now)}
			l.mu.Unlock()
			return r
		}
		if l.flight == nil && !l.startRefillLocked(now, n) {
			l.mu.Unlock()
			return l.fallback(n, now)
		}
		f := l.flight
		l.mu.Unlock()
		l.stats.waits.Add(1)
		if timer == nil {
			timer = l.clock.NewTimer(l.m.timeout)
			expired = timer.C()
		}
		select {
		case <-f.done:
			if f.err != nil {
				return l.fallback(n, l.clock.Nanotime())
			}
		case <-ctx.Done():
			return Result{By: ByContext}
		case <-expired:
			timer = nil
			l.stats.timeouts.Add(1)
			return l.fallback(n, l.clock.Nanotime())
		}
	}
}

// settleLocked retires a spent lease, moves a parked one in, and claims n
// permits. It reports false when the lease cannot serve the request and a
// refill is needed. l.mu must be held.
func (l *Limiter) settleLocked(now, n int64) (Result, bool) {
	for {
		cur := l.cur.Load()
		if cur != emptyLease && l.spent(cur, now) {
			l.cur.Store(emptyLease)
			l.retireLocked(cur, now)
			cur = emptyLease
		}
		if cur != emptyLease {
			w, st := l.claim(cur, now, n)
			switch st {
			case claimLow:
				l.prefetchLocked(now)
				fallthrough
			case claimOK:
				return Result{Admitted: true, Wait: time.Duration(w)}, true
			case claimTooFar:
				return Result{RetryAfter: time.Duration(w)}, true
			}
		}
		nx := l.next
		if nx == nil {
			return Result{}, false
		}
		l.next = nil
		if l.spent(nx, now) {
			l.retireLocked(nx, now)
			continue
		}
		l.cur.Store(nx)
		if cur != emptyLease {
			l.retireLocked(cur, now)
		}
	}
}

// spent reports whether nothing of ls can be used at now or later: expired,
// or (Pacing) every permit claimed.
func (l *Limiter) spent(ls *lease, now int64) bool {
	if now >= ls.expires {
		return true
	}
	return l.kind == kindPace && ls.used.Load() >= ls.granted
}

// usable reports whether ls has a permit left at now.
func (l *Limiter) usable(ls *lease, now int64) bool {
	if l.spent(ls, now) {
		return false
	}
	if l.kind == kindPace {
		return true
	}
	return ls.avail.Load() > 0
}

// startRefillLocked queues a refill sized for the demand, at least n
// permits, and makes it the flight. It reports false if the Manager is
// closed. l.mu must be held.
func (l *Limiter) startRefillLocked(now, n int64) bool {
	k, low := l.sizeLocked(now)
	c := &call{
		req:  cluster.Request{Budget: l.spec.Budget, N: max(k, n), Partial: true},
		lim:  l,
		done: make(chan struct{}),
	}
	if !l.m.submit(c) {
		return false
	}
	l.flight = c
	l.low = low
	l.stats.refills.Add(1)
	return true
}

// sizeLocked returns the size of the next lease and its low-water mark.
//
// The demand rate is measured between refills on the Limiter's clock: the
// permits used since the last refill started, over the time since (at least
// minSample). A measurement over at least the horizon, or a higher one,
// replaces the estimate; a lower one over a shorter span halves the gap.
// The first estimate is the fair share, Limit per Interval over the live
// instances. A lease is horizon of that demand,
// within [1, cap] with cap = floor(limit / (2 × live)). The low-water mark
// is a quarter of the lease, or the demand over two round trips if more,
// and at most half the lease.
func (l *Limiter) sizeLocked(now int64) (k, low int64) {
	live := float64(l.m.Live())
	total := l.consumed
	if cur := l.cur.Load(); cur != emptyLease {
		total += l.usedOf(cur)
	}
	if !l.sampled {
		l.rate = l.fairRate / live
		l.sampled = true
	} else {
		dt := now - l.sampleAt
		s := float64(total-l.sampleConsumed) / float64(max(dt, minSample))
		if s >= l.rate || dt >= l.horizon {
			l.rate = s
		} else {
			l.rate = (l.rate + s) / 2
		}
	}
	l.sampleAt, l.sampleConsumed = now, total
	capN := max(toInt(l.limit/(2*live)), 1)
	k = clampInt(toInt(math.Ceil(l.rate*float64(l.horizonAt(now)))), 1, capN)
	low = k / 4
	if rtt := l.m.rtt.Load(); rtt > 0 {
		low = max(low, toInt(math.Ceil(l.rate*float64(2*rtt))))
	}
	return k, min(low, k/2)
}

// horizonAt returns the demand a lease asked for at now is sized for: the
// horizon, or for an aligned lease what is left of the aligned interval if
// less (what is left of a lease at the interval's end is wasted).
func (l *Limiter) horizonAt(now int64) int64 {
	if l.aligned == 0 {
		return l.horizon
	}
	_, until, _ := l.windowOf(now, now)
	return max(min(l.horizon, until-now), 1)
}

// usedOf returns the permits of ls claimed so far.
func (l *Limiter) usedOf(ls *lease) int64 {
	if l.kind == kindPace {
		return ls.used.Load()
	}
	return ls.granted - ls.avail.Load()
}

// refilled takes the answer to a refill, on the Manager's store goroutine.
func (l *Limiter) refilled(c *call, now int64) {
	l.mu.Lock()
	if l.flight == c {
		l.flight = nil
	}
	g := c.grant
	if c.err == nil {
		l.recent.add(now, g.N)
		if g.N < c.req.N {
			l.lastDry = now
		}
	}
	from, until, inside := l.windowOf(c.sent, now)
	switch {
	case c.err != nil:
	case !inside:
		// Sent in one aligned interval and arrived in the next: the
		// Store may have decided in either, so the grant may not be used
		// in the new one, and arrived too late for the old one. It is not
		// given back either: a Give takes back the window's newest
		// permits, which may be the new interval's grants to others. Its
		// answer (a short Store too) may be the old interval's: callers
		// waiting for it ask again, within their own deadline.
		l.m.stats.dropped.Add(max(g.N, 0))
	case g.N <= 0:
		l.dryUntil = now + l.backoff(g.RetryAfter)
	default:
		if g.N < c.req.N {
			// The Store ran short: use what came, but ask again only
			// after a while.
			l.dryUntil = now + l.backoff(g.RetryAfter)
		}
		ls := l.newLease(g, now, from, until)
		cur := l.cur.Load()
		switch {
		case l.closed || l.m.Mode() == Fallback:
			l.retireLocked(ls, now)
		case l.usable(cur, now):
			if l.next != nil {
				l.retireLocked(l.next, now)
			}
			l.next = ls
		default:
			l.cur.Store(ls)
			if cur != emptyLease {
				l.retireLocked(cur, now)
			}
		}
	}
	l.mu.Unlock()
	close(c.done)
}

// backoff is how long the Limiter refuses without asking after the Store
// ran short: the Store's RetryAfter within [horizon/10, horizon].
func (l *Limiter) backoff(retryAfter time.Duration) int64 {
	return clampInt(int64(retryAfter), max(l.horizon/10, 1), l.horizon)
}

// windowOf returns, for a refill sent at sent that arrived at now (clock
// ns), the aligned interval in which its lease may be used, [from, until)
// in clock ns, and whether sent and now lie in one aligned interval, the
// only case in which the Store's decision is known to lie in it. Only
// sliding-window count leases are aligned; others get an unbounded
// interval. The aligned intervals are [k·Interval, (k+1)·Interval) of Unix
// time, read from the Manager's clock (see wallOffset).
func (l *Limiter) windowOf(sent, now int64) (from, until int64, inside bool) {
	if l.aligned == 0 {
		return math.MinInt64, noEnd, true
	}
	off := l.m.wallOff()
	k := floorDiv(now+off, l.aligned)
	if floorDiv(sent+off, l.aligned) != k {
		return 0, 0, false
	}
	from = k*l.aligned - off
	return from, from + l.aligned, true
}

// floorDiv returns floor(a/b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// newLease builds the lease of grant g, arrived at now, usable in [from,
// until) (see windowOf).
func (l *Limiter) newLease(g cluster.Grant, now, from, until int64) *lease {
	ls := &lease{granted: g.N, start: now, low: min(l.low, g.N/2), from: from, until: until}
	if l.kind == kindPace {
		// The Store's wait counts from its decision, which came before
		// now: permits are due no earlier than the Store scheduled them.
		ls.base = now + int64(g.Wait)
		ls.stepNS = l.step
		ls.expires = ls.base + (g.N-1)*l.step + l.life
	} else {
		ls.avail.Store(g.N)
		ls.expires = min(now+l.life, until)
	}
	return ls
}

// retireLocked takes every unclaimed permit of ls, which must no longer be
// l.cur, and gives back those the Store can take back: all of a token
// bucket's, a Pacing lease's not yet due, a sliding window's (aligned)
// only by a Give that the Store decides before the interval's end (see
// Manager.give): a Give takes back the window's newest permits, which
// after the end could be the next interval's grants to others. l.mu must
// be held.
func (l *Limiter) retireLocked(ls *lease, now int64) {
	if ls == emptyLease {
		return
	}
	var left int64
	b := &l.spec.Budget
	if l.kind == kindPace {
		i := ls.used.Swap(ls.granted)
		i = min(i, ls.granted)
		l.consumed += i
		// Permits [i, granted) are unclaimed; those due at or after now
		// can be unscheduled.
		first := i
		if now > ls.base {
			first = max(first, ceilDiv(now-ls.base, ls.stepNS))
		}
		left = max(ls.granted-first, 0)
		l.m.stats.dropped.Add(ls.granted - i - left)
	} else {
		left = ls.avail.Swap(0)
		l.consumed += ls.granted - left
		if l.aligned != 0 && now >= ls.until {
			l.m.stats.dropped.Add(left)
			left = 0
		}
	}
	if left > 0 {
		if now >= ls.expires {
			l.stats.expired.Add(left)
		}
		l.m.giveBack(*b, left, ls.until)
	}
}

// dropLeases forgets the leases after the Store failed at now: their
// permits cannot go back, and while the Store fails decisions are local.
// The local share is charged with what this instance used of the Store's
// grants in the last Interval, or all of it if the Store ran short in that
// time (the fleet used the whole budget then): the share is what is left,
// and the second in which the Store stops answering does not admit the
// Store's budget and the local shares both.
func (l *Limiter) dropLeases(now int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	used := l.recent.sum(now)
	defer func() {
		if l.spec.Fallback != FallbackLocal {
			return
		}
		if l.lastDry != math.MinInt64 && now-l.lastDry < int64(l.spec.Budget.Interval) {
			used = max(used, toInt(math.Ceil(l.spec.Budget.Limit)))
		}
		if used > 0 {
			l.localLimiter().charge(now, used, l.m.shareLive())
		}
	}()
	for _, ls := range [2]*lease{l.cur.Swap(emptyLease), l.next} {
		if ls == emptyLease || ls == nil {
			continue
		}
		var left int64
		if l.kind == kindPace {
			i := min(ls.used.Swap(ls.granted), ls.granted)
			l.consumed += i
			left = ls.granted - i
		} else {
			left = ls.avail.Swap(0)
			l.consumed += ls.granted - left
		}
		l.m.stats.dropped.Add(left)
		used -= left
	}
	l.next = nil
}

// payback charges the shared budget, on the Store's recovery at now, for
// the permits the local share admitted in the last Interval, times the
// count the shares divide by (the other instances decided by their shares
// too, and may not have recovered yet), at most the budget: one Take,
// partial, queued ahead of any refill, whose grant is spent. So the
// second of the recovery does not admit the local shares and the whole
// budget again, nor does a Store that restarted empty.
func (l *Limiter) payback(now int64) {
	if l.spec.Fallback != FallbackLocal || l.isClosed() {
		return
	}
	lc := l.local.Load()
	if lc == nil {
		return
	}
	a := lc.admittedRecently(now)
	if a <= 0 {
		return
	}
	n := min(a*int64(l.m.shareLive()), max(toInt(l.limit), 1))
	c := &call{req: cluster.Request{Budget: l.spec.Budget, N: n, Partial: true}, paid: true, done: make(chan struct{})}
	l.m.submit(c)
}

// localLimiter returns the local share's limiter, made at first use.
func (l *Limiter) localLimiter() *localLimiter {
	lc := l.local.Load()
	if lc == nil {
		lc = newLocalLimiter(&l.spec)
		if !l.local.CompareAndSwap(nil, lc) {
			lc = l.local.Load()
		}
	}
	return lc
}

// Close releases the Limiter: the unused permits of its leases go back to
// the Store, and a refill under way gives its permits back when it arrives.
// Later Acquires are decided by the fallback policy. Close is idempotent.
func (l *Limiter) Close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	now := l.clock.Nanotime()
	l.retireLocked(l.cur.Swap(emptyLease), now)
	if l.next != nil {
		l.retireLocked(l.next, now)
		l.next = nil
	}
	l.mu.Unlock()
	l.m.unregister(l)
}

// Closed reports whether Close was called.
func (l *Limiter) Closed() bool { return l.isClosed() }

// fallback decides n permits by the fallback policy. While the Manager is
// Remote (a late call that did not switch it), the local share is what
// this instance has not used of it lately (the Store's recent grants count
// against it, and nothing is left if the Store ran short lately), and late
// calls admit at most a fiftieth of it per Interval (see allowLate).
//
// In Fallback mode the probe, when one is due, is queued after the local
// decision: the probe's payback (see payback) then counts this call's
// admission, which it could miss when queued first (the store goroutine may
// probe and pay back before the decision is recorded).
func (l *Limiter) fallback(n, now int64) Result {
	remote := l.m.Mode() != Fallback
	l.stats.fallbacks.Add(1)
	r := l.decideFallback(n, now, remote)
	if !remote {
		l.m.maybeProbe(now)
	}
	return r
}

// decideFallback decides n permits at now by the fallback policy, as a late
// call while the Manager is Remote when remote is set.
func (l *Limiter) decideFallback(n, now int64, remote bool) Result {
	switch l.spec.Fallback {
	case FallbackPass:
		return Result{Admitted: true, By: ByFallback}
	case FallbackBlock:
		return Result{By: ByFallback}
	}
	lc := l.localLimiter()
	var r Result
	if remote {
		l.mu.Lock()
		used := l.recent.sum(now)
		dry := l.lastDry != math.MinInt64 && now-l.lastDry < int64(l.spec.Budget.Interval)
		l.mu.Unlock()
		if !dry {
			r = lc.allowLate(now, n, used, l.m.shareLive())
		}
	} else {
		r = lc.allow(now, n, l.m.shareLive())
	}
	r.By = ByFallback
	return r
}

// Held returns the permits the Limiter holds unclaimed in its leases (the
// current one and a parked one): what this instance can admit without
// asking the Store, which tells nothing of what the rest of the fleet
// holds or the Store has left.
func (l *Limiter) Held() int64 { return l.held() }

// held returns the permits the Limiter holds unclaimed in its leases (the
// current one and a parked one).
func (l *Limiter) held() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var h int64
	for _, ls := range [2]*lease{l.cur.Load(), l.next} {
		if ls == nil || ls == emptyLease {
			continue
		}
		if l.kind == kindPace {
			h += ls.granted - min(ls.used.Load(), ls.granted)
		} else {
			h += ls.avail.Load()
		}
	}
	return h
}

// LimiterStats counts a Limiter's slow-path events since NewLimiter.
type LimiterStats struct {
	// Refills is the number of lease refills sent, Prefetches how many of
	// them started ahead, at the low-water mark.
	Refills, Prefetches int64
	// Waits is the number of times a caller waited for a refill, Timeouts
	// how many of those waits ended at the Manager's Timeout.
	Waits, Timeouts int64
	// Fallbacks is the number of decisions by the fallback policy.
	Fallbacks int64
	// Expired is the permits given back because their lease expired.
	Expired int64
}

// Stats returns the Limiter's counters.
func (l *Limiter) Stats() LimiterStats {
	s := &l.stats
	return LimiterStats{
		Refills: s.refills.Load(), Prefetches: s.prefetches.Load(),
		Waits: s.waits.Load(), Timeouts: s.timeouts.Load(),
		Fallbacks: s.fallbacks.Load(), Expired: s.expired.Load(),
	}
}
