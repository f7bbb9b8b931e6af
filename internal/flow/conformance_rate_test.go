package flow

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand"
	"sort"
	"testing"
	"time"

	"golang.org/x/time/rate"
	"sync/atomic"

	"github.com/sluice-go/sluice/internal/conformance"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/rules"
)

// This file runs token-bucket rules beside golang.org/x/time/rate's Limiter
// as a live oracle: seeded random timelines on a manual clock, every
// decision, every wait and every RetryAfter compared to the nanosecond.
//
// The rule and the Limiter see the same arrivals at the same instants
// (AllowN for reject, ReserveN within MaxQueueing for throttle), the same
// reloads of Threshold and Burst, and the same cancellations of waits at
// chosen instants (Reservation.CancelAt). Where they differ by design, the
// test encodes the documented difference (docs/design/conformance.md):
//
//   - A reloaded rule takes over the bucket at its first decision, not at
//     the reload: the Limiter's SetLimitAt and SetBurstAt are applied at
//     the first arrival the new rule decides on (one within its Burst).
//   - rate.Limiter counts tokens in floating-point seconds and truncates
//     its delay; sluice computes (tokens × StatInterval)/Threshold, exact
//     for whole tokens. Where the exact wait is within the arithmetic's
//     error of a whole nanosecond (a rounding edge), the two may differ by
//     that nanosecond: such steps are compared within one, and counted.
//     Where that nanosecond would also decide admission (a wait of 0 or 1
//     ns for reject, MaxQueueing or one more for throttle), the arrival is
//     left out of both, so that they keep the same state. Without reloads
//     and cancellations, each of sluice's waits is also checked against
//     exact rational arithmetic on its own state (exactWait).
//   - Both count the tokens reserved after a cancelled request between
//     instants truncated to the nanosecond; a nanosecond of difference
//     there leaves the buckets a sliver of a token apart (sluice counts
//     turns within a nanosecond as one instant). After each cancellation
//     the two token counts are compared: they may differ by at most two
//     nanoseconds' worth more than before; later waits may then differ by
//     that sliver at the rate in force, until the bucket is full again.

// tokensAt returns the tokens the rule's bucket holds at now, at most its
// burst; for a pacing rule, the tokens of the Limiter of burst 1 that its
// schedule is: 1 - (F - now)/cost.
func tokensAt(c *Controller, now int64) float64 {
	if p, ok := c.c.(*throttle); ok {
		p.sched.mu.Lock()
		free := p.sched.free.after(now)
		if !p.sched.set {
			free = math.Inf(-1)
		}
		p.sched.mu.Unlock()
		return math.Min(1, 1-free/p.cost)
	}
	return bucketOf(c).tokensAt(now)
}

func bucketOf(c *Controller) *bucket {
	switch k := c.c.(type) {
	case *tokenBucket:
		return k.bucket
	case *tokenBucketThrottle:
		return k.bucket
	}
	return nil
}

// diffConfig is one configuration of the differential test.
type diffConfig struct {
	name     string
	behavior behavior
	pacing   bool // Direct + Throttle (one request at a time) against a Limiter of burst 1
	reloads  bool // reload Threshold and Burst at random steps
	cancels  bool // cancel some waits at chosen instants
}

// diffStats are the figures of one configuration.
type diffStats struct {
	sequences, steps, admitted, refused, waited, cancelled, reloads int
	// rounding: steps at a rounding edge, compared within a nanosecond;
	// skipped: steps at a decision edge, left out of both.
	rounding, skipped int
	// offByOne: rounding-edge steps whose waits differed by a nanosecond,
	// sluiceLater of them with sluice's the longer; drift: later steps
	// within the slack such a nanosecond leaves after cancellations.
	offByOne, sluiceLater, drift int
	// exactChecked: steps whose wait was also checked against exact
	// arithmetic from the bucket's state (configurations without reloads
	// and cancellations).
	exactChecked int
	// withheldRuns: cancellations after which rate.Limiter withheld whole
	// tokens that sluice gave back; withheldSteps: the steps run but not
	// compared until the bucket was full again.
	withheldRuns, withheldSteps int
	mismatches, badSequences    int
}

// harnessNow is the manual clock of the differential test, shared by the
// two clocks a throttle check may get.
type harnessNow struct{ ns atomic.Int64 }

// firingClock reads the harness's time and fires every timer at once,
// recording its duration: an admitted wait is compared without waiting.
type firingClock struct {
	now   *harnessNow
	waits []time.Duration
}

func (c *firingClock) Nanotime() int64 { return c.now.ns.Load() }

func (c *firingClock) NewTimer(d time.Duration) core.Timer {
	c.waits = append(c.waits, d)
	ch := make(chan time.Time, 1)
	ch <- time.Time{}
	return firedTimer(ch)
}

// holdingClock reads the harness's time and never fires: a wait that will
// be cancelled. It tells the duration on started.
type holdingClock struct {
	now     *harnessNow
	started chan time.Duration
}

func (c *holdingClock) Nanotime() int64 { return c.now.ns.Load() }

func (c *holdingClock) NewTimer(d time.Duration) core.Timer {
	c.started <- d
	return firedTimer(nil)
}

// tokensAt returns the tokens the bucket holds at now (fewer than zero
// while it owes some), at most burst.
func (b *bucket) tokensAt(now int64) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return math.Min(b.stored(float64(now-b.at)), b.burst)
}

// exactWait returns, in exact rational arithmetic, the wait the bucket owes
// a batch of n at now from its state before the decision (what sync and
// reserve compute in floating point): the nanoseconds until the batch's
// tokens are due, rounded down, 0 when they are due less than a nanosecond
// later.
func (b *bucket) exactWait(now int64, n float64) int64 {
	b.mu.Lock()
	at, owed, r, burst := b.at, b.owed, b.rate, b.burst
	b.mu.Unlock()
	ival, thr := new(big.Rat).SetFloat64(r.ival), new(big.Rat).SetFloat64(r.thr)
	since := new(big.Rat).SetInt64(now - at)
	k := new(big.Rat).SetFloat64(owed)
	if full := new(big.Rat).Quo(new(big.Rat).Mul(k, ival), thr); full.Cmp(since) <= 0 {
		k.SetInt64(0)
		since.SetInt64(0)
	}
	k.Add(k, new(big.Rat).SetFloat64(n-burst))
	due := new(big.Rat).Sub(new(big.Rat).Quo(new(big.Rat).Mul(k, ival), thr), since)
	if due.Cmp(big.NewRat(1, 1)) < 0 {
		return 0
	}
	q := new(big.Int).Quo(due.Num(), due.Denom()) // due > 0: truncation is floor
	return q.Int64()
}

// waiter is a wait that the timeline cancels at instant at.
type waiter struct {
	cost   float64 // ns per token of the rule that reserved it
	at     int64
	seq    int
	res    *rate.Reservation
	cancel context.CancelFunc
	done   chan *core.BlockError
}

// rateWait is rate.Limiter's delay for a reservation of n when it holds
// tok tokens at rate limit, computed as reserveN computes it: the tokens
// short, in whole nanoseconds truncated. It also returns the unrounded
// nanoseconds.
func rateWait(tok float64, limit rate.Limit, n int) (time.Duration, float64) {
	short := float64(n) - tok
	if short <= 0 {
		return 0, 0
	}
	d := (short / float64(limit)) * float64(time.Second)
	if d > float64(math.MaxInt64) {
		return time.Duration(math.MaxInt64), d
	}
	return time.Duration(d), d
}

// nearWhole reports whether ns is within tol of the whole nanosecond k.
func nearWhole(ns float64, k int64, tol float64) bool { return math.Abs(ns-float64(k)) < tol }

// edgeTolerance is how far from a whole nanosecond a wait of a batch of n
// from a bucket of burst tokens at cost ns each must be for both
// rate.Limiter's floating-point arithmetic and sluice's to round it the
// same way: a thousandth of a nanosecond, or some sixteen units in the last
// place of the largest intermediate, (burst+n)·cost, when that is larger
// (a bucket of 200,000 tokens at one per six seconds cannot place a wait
// to the nanosecond in a float64).
func edgeTolerance(burst int, n int64, cost float64) float64 {
	return math.Max(1e-3, 0x1p-48*(float64(burst)+float64(n))*cost)
}

// runDiffSequence runs one random timeline of steps arrivals.
func runDiffSequence(t *testing.T, cfg diffConfig, seed int64, steps int, st *diffStats) {
	rng := rand.New(rand.NewSource(seed))
	before := st.mismatches
	bc := randomBucketCase(rng)
	if cfg.pacing {
		bc.burst = 1
	}
	maxQueue := time.Duration(0)
	if cfg.behavior == behThrottle {
		maxQueue = time.Duration(rng.Int63n(int64(4*bc.cost())) + 1)
		if rng.Intn(8) == 0 {
			maxQueue = 0
		}
		maxQueue = min(maxQueue, time.Hour)
	}
	nf := nodes(nil)
	build := func(old map[string][]*Controller, bc bucketCase, mq time.Duration) map[string][]*Controller {
		r := bc.rule(cfg.behavior, mq)
		if cfg.pacing {
			r.Bucket = nil
		}
		cs, err := Build([]rules.Flow{r}, old, nf, nil)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		return cs
	}
	cs := build(nil, bc, maxQueue)
	lim := bc.limiter()
	var pend *bucketCase // a reload the Limiter has not applied yet
	clock := &harnessNow{}
	now := rng.Int63n(int64(time.Hour))
	var waiters []*waiter
	seq := 0
	// slack is how many tokens the two buckets may differ by: a
	// nanosecond of difference at a rounding edge, once a cancellation
	// counts the tokens reserved after it between instants truncated to
	// the nanosecond, becomes a sliver of a token (up to two nanoseconds'
	// worth per cancellation), which later waits carry at the rate then
	// in force. A full bucket ends it.
	slack := 0.0
	withheld := false
	fail := func(format string, args ...any) {
		st.mismatches++
		if st.mismatches <= 5 {
			t.Errorf("%s seed %d (%+v, max queueing %v): %s", cfg.name, seed, bc, maxQueue, fmt.Sprintf(format, args...))
		}
	}
	cancelDue := func(upTo int64) {
		sort.SliceStable(waiters, func(i, j int) bool {
			if waiters[i].at != waiters[j].at {
				return waiters[i].at < waiters[j].at
			}
			return waiters[i].seq < waiters[j].seq
		})
		for len(waiters) > 0 && waiters[0].at <= upTo {
			w := waiters[0]
			waiters = waiters[1:]
			clock.ns.Store(w.at)
			w.res.CancelAt(rateTime(w.at))
			w.cancel()
			be := <-w.done
			if be == nil || !errors.Is(be.Cause, context.Canceled) {
				fail("wait cancelled at %d ended with %v", w.at, be)
			}
			st.cancelled++
			// The buckets may now differ by a sliver: what x/time/rate
			// withholds when two turns are a nanosecond apart after
			// truncation (sluice counts them as one instant), and what
			// an earlier sliver carries. More than two nanoseconds'
			// worth of tokens beyond the slack is a mismatch.
			//
			// Or by whole tokens that x/time/rate withholds: cancelling
			// the latest reservation moves its lastEvent back by the
			// reservation's tokens in truncated nanoseconds, which can
			// land a nanosecond after the previous reservation's instant;
			// cancelling that one then no longer counts as cancelling the
			// latest, and its tokens (and those of any earlier one
			// cancelled next) stay withheld. sluice counts the two
			// instants as one and gives them back. Until the bucket is
			// full again the two then differ by those tokens, and the
			// steps are run but not compared (withheld).
			rt, ru := lim.TokensAt(rateTime(w.at)), tokensAt(cs["r"][0], w.at)
			d := math.Abs(rt - ru)
			eps := 0x1p-44 * float64(bc.burst+1)
			switch {
			case withheld:
			case d > slack+2/w.cost+eps && ru > rt && math.Abs(d-math.Round(d)) <= slack+2/w.cost+eps:
				withheld = true
				st.withheldRuns++
			case d > slack+2/w.cost+eps:
				fail("after the cancellation at %d the buckets differ by %v tokens (slack %v)", w.at, d, slack)
			case d > eps:
				slack = d
			}
		}
	}
	for i := 0; i < steps; i++ {
		st.steps++
		now += randomGap(rng, bc.cost())
		cancelDue(now)
		clock.ns.Store(now)
		if cfg.reloads && rng.Intn(40) == 0 {
			// A new Threshold, a new Burst or both; the same interval, so
			// the rule inherits the bucket.
			nb := bc
			switch rng.Intn(3) {
			case 0:
				nb.threshold = randomBucketCase(rng).threshold
			case 1:
				nb.burst = 1 + rng.Intn(2*bc.burst+2)
			default:
				nb.threshold = randomBucketCase(rng).threshold
				nb.burst = 1 + rng.Intn(2*bc.burst+2)
			}
			if cfg.behavior == behThrottle && rng.Intn(4) == 0 {
				maxQueue = min(time.Duration(rng.Int63n(int64(4*nb.cost()))+1), time.Hour)
			}
			cs = build(cs, nb, maxQueue)
			bc = nb
			pend = &nb
			st.reloads++
		}
		n := randomBatch(rng, bc.burst)
		if cfg.pacing {
			n = 1
		}
		at := rateTime(now)
		desc := func() string { return fmt.Sprintf("step %d at %d, batch %d", i, now, n) }
		c := cs["r"][0]
		if n > int64(bc.burst) {
			// Never fits: refused by both, with no RetryAfter; the rule
			// does not take over the bucket for it.
			be, _ := check(t, c, now, n)
			if be == nil || be.Reason != reasonBurst || be.RetryAfter != 0 {
				fail("%s: batch above Burst %d: %v", desc(), bc.burst, be)
			}
			st.refused++
			continue
		}
		// The Limiter's delay, with the pending reload applied as
		// SetLimitAt and SetBurstAt at this instant would apply it: the
		// tokens stored now under the old rule, at most the new Burst, at
		// the new rate.
		tok, limit := lim.TokensAt(at), lim.Limit()
		if tok >= float64(lim.Burst()) {
			slack = 0
			if withheld && tokensAt(c, now) >= float64(bc.burst) {
				withheld = false
			}
		}
		if pend != nil {
			tok, limit = math.Min(tok, float64(pend.burst)), pend.limiter().Limit()
		}
		wait, raw := rateWait(tok, limit, int(n))
		// At a rounding edge floating-point noise decides which whole
		// nanosecond rate.Limiter truncates the wait to, or sluice rounds
		// the same exact value to: the waits are compared within a
		// nanosecond. Where that nanosecond also decides admission (the
		// wait is 0 or 1 ns for reject, MaxQueueing or a nanosecond more
		// for throttle), the arrival is left out of both.
		slackNs := slack * bc.cost()
		tol := edgeTolerance(bc.burst, n, bc.cost()) + slackNs
		edge := wait < time.Duration(math.MaxInt64) && (nearWhole(raw, int64(wait)+1, tol) || wait > 0 && nearWhole(raw, int64(wait), tol))
		bound := int64(1)
		if cfg.behavior == behThrottle {
			bound = int64(maxQueue) + 1
		}
		if edge && nearWhole(raw, bound, tol) {
			st.skipped++
			continue
		}
		if cfg.pacing {
			// A pacing rule rounds its slot to the nearest nanosecond
			// (slot k of a rate R is at k/R, not up to a nanosecond
			// before it), rate.Limiter rounds its delay down: every wait
			// is compared within a nanosecond, and an arrival whose wait
			// is between MaxQueueing + 1/2 and MaxQueueing + 1, which
			// the rule refuses and rate admits, is left out.
			if raw >= float64(maxQueue)+0.5-tol && raw < float64(maxQueue)+1+tol {
				st.skipped++
				continue
			}
			edge = true
		}
		if edge {
			st.rounding++
		}
		if withheld {
			// Run the step through both, compare nothing.
			st.withheldSteps++
			if cfg.behavior == behReject {
				lim.AllowN(at, int(n))
				check(t, c, now, n)
				continue
			}
			if wait <= maxQueue {
				lim.ReserveN(at, int(n))
			}
			c.Check(context.Background(), newEntry(now, n), &firingClock{now: clock})
			continue
		}
		same := func(got, want time.Duration) bool {
			if got == want {
				return true
			}
			off := max(got-want, want-got)
			if !edge || float64(off) > math.Ceil(tol)+1 {
				return false
			}
			if off <= 1 && slack == 0 {
				st.offByOne++
				if got > want {
					st.sluiceLater++
				}
			} else {
				st.drift++
			}
			return true
		}
		if pend != nil {
			lim.SetLimitAt(at, pend.limiter().Limit())
			lim.SetBurstAt(at, pend.burst)
			pend = nil
			if got := math.Min(lim.TokensAt(at), float64(lim.Burst())); got != tok {
				t.Fatalf("%s: the oracle holds %v tokens after the reload, not the predicted %v", desc(), got, tok)
			}
		}
		// Without reloads and cancellations the bucket's state is whole
		// tokens, and each wait is checked against exact arithmetic too.
		plain := !cfg.reloads && !cfg.cancels && !cfg.pacing
		var exact int64
		if plain {
			exact = bucketOf(c).exactWait(now, float64(n))
		}
		exactly := func(got int64) {
			if !plain {
				return
			}
			st.exactChecked++
			if got != exact {
				fail("%s: wait %v, exactly %v", desc(), time.Duration(got), time.Duration(exact))
			}
		}
		if cfg.behavior == behReject {
			wantOK := lim.AllowN(at, int(n))
			be, _ := check(t, c, now, n)
			if be == nil {
				exactly(0)
			} else {
				exactly(int64(be.RetryAfter))
			}
			switch {
			case wantOK != (be == nil):
				fail("%s: rate.Limiter admits: %v, rule: %v", desc(), wantOK, be)
			case wantOK:
				st.admitted++
			default:
				st.refused++
				if !same(be.RetryAfter, wait) {
					fail("%s: RetryAfter %v, rate.Limiter's delay %v", desc(), be.RetryAfter, wait)
				}
			}
			continue
		}
		wantOK := wait <= maxQueue
		var res *rate.Reservation
		if wantOK {
			res = lim.ReserveN(at, int(n))
			if got := res.DelayFrom(at); !res.OK() || got != wait {
				t.Fatalf("%s: the oracle's own delay %v (ok %v) is not the predicted %v", desc(), got, res.OK(), wait)
			}
		}
		if wantOK && wait > 1 && cfg.cancels && rng.Intn(4) == 0 {
			// This one's wait is cancelled: at once, or at a random
			// instant before its turn.
			w := &waiter{at: now, seq: seq, res: res, cost: bc.cost(), done: make(chan *core.BlockError, 1)}
			seq++
			if rng.Intn(3) > 0 {
				w.at = now + rng.Int63n(int64(wait))
			}
			ctx, cancel := context.WithCancel(context.Background())
			w.cancel = cancel
			hc := &holdingClock{now: clock, started: make(chan time.Duration, 1)}
			ec := newEntry(now, n)
			go func() { w.done <- c.Check(ctx, ec, hc) }()
			select {
			case d := <-hc.started:
				if !same(d, wait) {
					fail("%s: wait %v, rate.Limiter's %v", desc(), d, wait)
				}
				waiters = append(waiters, w)
			case be := <-w.done:
				fail("%s: expected a wait of %v, got %v", desc(), wait, be)
			}
			st.waited++
			continue
		}
		fc := &firingClock{now: clock}
		be := c.Check(context.Background(), newEntry(now, n), fc)
		switch {
		case be != nil:
			exactly(int64(be.RetryAfter + maxQueue))
		case len(fc.waits) > 0:
			exactly(int64(fc.waits[0]))
		default:
			exactly(0)
		}
		switch {
		case wantOK != (be == nil):
			fail("%s: rate.Limiter reserves within %v: %v (delay %v), rule: %v", desc(), maxQueue, wantOK, wait, be)
		case wantOK && wait > 0:
			st.waited++
			if len(fc.waits) == 0 && same(0, wait) {
				break // sluice found it due now, within the nanosecond
			}
			if len(fc.waits) != 1 || !same(fc.waits[0], wait) {
				fail("%s: waits %v, rate.Limiter's delay %v", desc(), fc.waits, wait)
			}
		case wantOK:
			st.admitted++
			if len(fc.waits) != 0 && !(len(fc.waits) == 1 && same(fc.waits[0], 0)) {
				fail("%s: waits %v, rate.Limiter's delay 0", desc(), fc.waits)
			}
		default:
			st.refused++
			if want := wait - maxQueue; !same(be.RetryAfter, want) {
				fail("%s: RetryAfter %v, rate.Limiter's delay %v less max queueing %v", desc(), be.RetryAfter, wait, maxQueue)
			}
		}
	}
	cancelDue(math.MaxInt64)
	if st.mismatches > before {
		st.badSequences++
	}
}

// TestConformanceTokenBucketAgainstRate is the differential test of
// token-bucket rules against rate.Limiter (see the top of this file).
func TestConformanceTokenBucketAgainstRate(t *testing.T) {
	const perSequence = 250
	configs := []diffConfig{
		{name: "reject", behavior: behReject},
		{name: "reject+reloads", behavior: behReject, reloads: true},
		{name: "throttle", behavior: behThrottle},
		{name: "throttle+reloads", behavior: behThrottle, reloads: true},
		{name: "throttle+cancel", behavior: behThrottle, cancels: true},
		{name: "throttle+cancel+reloads", behavior: behThrottle, reloads: true, cancels: true},
		{name: "pacing", behavior: behThrottle, pacing: true},
		{name: "pacing+cancel", behavior: behThrottle, pacing: true, cancels: true},
	}
	for ci, cfg := range configs {
		t.Run(cfg.name, func(t *testing.T) {
			var st diffStats
			total := conformance.Steps(10_000)
			for s := 0; st.steps < total; s++ {
				st.sequences++
				runDiffSequence(t, cfg, int64(1000*ci+s), min(perSequence, total-st.steps), &st)
			}
			t.Logf("%s: %d sequences, %d steps: %d admitted at once, %d waited (%d of them cancelled), %d refused, %d reloads; %d at a rounding edge (within 1 ns), %d at a decision edge (left out); %d off by 1 ns (%d with sluice's the longer), %d within the drift that leaves after a cancellation; %d checked against exact arithmetic; %d times rate withheld whole tokens (%d steps not compared); %d mismatches in %d sequences",
				cfg.name, st.sequences, st.steps, st.admitted, st.waited, st.cancelled, st.refused, st.reloads, st.rounding, st.skipped, st.offByOne, st.sluiceLater, st.drift, st.exactChecked, st.withheldRuns, st.withheldSteps, st.mismatches, st.badSequences)
			if st.mismatches > 0 {
				t.Errorf("%d of %d steps differ from rate.Limiter", st.mismatches, st.steps)
			}
		})
	}
}
