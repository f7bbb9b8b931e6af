package flow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/rules"
)

// The cases of golang.org/x/time/rate's rate_test.go (v0.12.0), in the
// project's own words, run against token-bucket rules on a manual clock.
// Each cites the case it comes from. A Limiter of r per second and burst b
// is a rule of Threshold r per second and Burst b; AllowN is a reject rule,
// or a throttle rule asked with a context whose deadline has passed (no
// wait allowed, as WaitN with that deadline); ReserveN is a throttle rule
// with MaxQueueing of an hour (the longest a rule allows) or the case's
// bound; CancelAt is the end of the entry's context while it waits;
// SetLimitAt and SetBurstAt are reloads of the rule, which the bucket takes
// over at the rule's next decision (here always at the instant the case
// sets them or later).

// rateStepKind is what one step of a translated case does.
type rateStepKind int

const (
	stepAllow   rateStepKind = iota // AllowN: admitted at once or not at all
	stepReserve                     // ReserveN: admitted with a wait, or not
	stepCancel                      // CancelAt of an earlier reservation
	stepReload                      // SetLimitAt / SetBurstAt
)

type rateStep struct {
	kind rateStepKind
	at   int     // in multiples of d after t0 (may go back)
	n    int64   // batch
	ok   bool    // admitted
	act  int     // for reserve: the instant the entry passes, in d
	toks float64 // for allow: tokens held before the step (NaN: unchecked)
	id   string  // a reserve later cancelled, or the one a cancel names
	perS float64 // for reload: new rate (0: unchanged)
	b    int     // for reload: new burst (0: unchanged)
}

type rateCase struct {
	name, source string
	perS         float64 // tokens per second
	burst        int
	reject       bool          // a reject rule (AllowN only)
	maxQueue     time.Duration // for reserve steps; 0: an hour
	steps        []rateStep
}

// d is rate_test.go's unit of time.
const rateD = int64(100 * time.Millisecond)

// rateT0 is the instant t0 of the cases on the manual clock.
const rateT0 = int64(time.Hour)

func tk(k int) int64 { return rateT0 + int64(k)*rateD }

// unchecked marks a step whose tokens the case does not state.
const unchecked = -1e300

func allowAt(k int, toks float64, n int64, ok bool) rateStep {
	return rateStep{kind: stepAllow, at: k, toks: toks, n: n, ok: ok}
}

func reserveAt(k int, n int64, act int, ok bool) rateStep {
	return rateStep{kind: stepReserve, at: k, n: n, act: act, ok: ok}
}

func held(s rateStep, id string) rateStep { s.id = id; return s }

func cancelAt(id string, k int) rateStep { return rateStep{kind: stepCancel, id: id, at: k} }

func reloadAt(k int, perS float64, b int) rateStep {
	return rateStep{kind: stepReload, at: k, perS: perS, b: b}
}

func rateCases() []rateCase {
	return []rateCase{
		{name: "burst 1", source: "rate_test.go TestLimiterBurst1", perS: 10, burst: 1, reject: true, steps: []rateStep{
			allowAt(0, 1, 1, true), allowAt(0, 0, 1, false), allowAt(0, 0, 1, false),
			allowAt(1, 1, 1, true), allowAt(1, 0, 1, false), allowAt(1, 0, 1, false),
			allowAt(2, 1, 2, false), // a batch above the burst never fits
			allowAt(2, 1, 1, true), allowAt(2, 0, 1, false),
		}},
		{name: "burst 3", source: "rate_test.go TestLimiterBurst3", perS: 10, burst: 3, reject: true, steps: []rateStep{
			allowAt(0, 3, 2, true), allowAt(0, 1, 2, false), allowAt(0, 1, 1, true), allowAt(0, 0, 1, false),
			allowAt(1, 1, 4, false), allowAt(2, 2, 1, true), allowAt(3, 2, 1, true), allowAt(4, 2, 1, true),
			allowAt(4, 1, 1, true), allowAt(4, 0, 1, false), allowAt(4, 0, 1, false),
			allowAt(9, 3, 3, true),
			// (rate's last step, AllowN of 0 tokens, has no counterpart:
			// a batch is at least 1.)
		}},
		{name: "rate 1/1.3 s", source: "rate_test.go TestLimiter_noTruncationErrors", perS: 0.7692307692307693, burst: 1, reject: true, steps: []rateStep{
			allowAt(0, 1, 1, true),
		}},
		{name: "simple reserve", source: "rate_test.go TestSimpleReserve", perS: 10, burst: 2, steps: []rateStep{
			reserveAt(0, 2, 0, true), reserveAt(0, 2, 2, true), reserveAt(3, 2, 4, true),
		}},
		{name: "mix", source: "rate_test.go TestMix", perS: 10, burst: 2, steps: []rateStep{
			reserveAt(0, 3, 0, false), // n > Burst
			reserveAt(0, 2, 0, true),
			allowAt(1, 1, 2, false), // not enough tokens
			reserveAt(1, 2, 2, true),
			allowAt(1, -1, 1, false), // tokens owed
			allowAt(3, 1, 1, true),
		}},
		{name: "cancel invalid", source: "rate_test.go TestCancelInvalid", perS: 10, burst: 2, steps: []rateStep{
			reserveAt(0, 2, 0, true),
			reserveAt(0, 3, 3, false), // refused: nothing to cancel
			reserveAt(0, 2, 2, true),  // no extra tokens
		}},
		{name: "cancel last", source: "rate_test.go TestCancelLast", perS: 10, burst: 2, steps: []rateStep{
			reserveAt(0, 2, 0, true),
			held(reserveAt(0, 2, 2, true), "r"), cancelAt("r", 1), // both tokens back
			reserveAt(1, 2, 2, true),
		}},
		{name: "cancel too late", source: "rate_test.go TestCancelTooLate", perS: 10, burst: 2, steps: []rateStep{
			reserveAt(0, 2, 0, true),
			held(reserveAt(0, 2, 2, true), "r"), cancelAt("r", 3), // its turn has passed: nothing back
			reserveAt(3, 2, 4, true),
		}},
		{name: "cancel 0 tokens", source: "rate_test.go TestCancel0Tokens", perS: 10, burst: 2, steps: []rateStep{
			reserveAt(0, 2, 0, true),
			held(reserveAt(0, 1, 1, true), "r"),
			reserveAt(0, 1, 2, true),
			cancelAt("r", 0), // the next one holds its token: none back
			reserveAt(0, 1, 3, true),
		}},
		{name: "cancel 1 token", source: "rate_test.go TestCancel1Token", perS: 10, burst: 2, steps: []rateStep{
			reserveAt(0, 2, 0, true),
			held(reserveAt(0, 2, 2, true), "r"),
			reserveAt(0, 1, 3, true),
			cancelAt("r", 2), // at its turn: one token back
			reserveAt(2, 2, 4, true),
		}},
		{name: "cancel multi", source: "rate_test.go TestCancelMulti", perS: 10, burst: 4, steps: []rateStep{
			reserveAt(0, 4, 0, true),
			held(reserveAt(0, 3, 3, true), "A"),
			reserveAt(0, 1, 4, true),
			held(reserveAt(0, 1, 5, true), "C"),
			cancelAt("C", 1), // 1 back
			cancelAt("A", 1), // 2 back, as if C had never been
			reserveAt(1, 3, 5, true),
		}},
		{name: "reserve max", source: "rate_test.go TestReserveMax", perS: 10, burst: 2, maxQueue: time.Duration(rateD), steps: []rateStep{
			reserveAt(0, 2, 0, true),
			reserveAt(0, 1, 1, true),  // within the bound
			reserveAt(0, 1, 2, false), // too far ahead
		}},
		{name: "reserve, set limit", source: "rate_test.go TestReserveSetLimit", perS: 5, burst: 2, steps: []rateStep{
			reserveAt(0, 2, 0, true),
			reserveAt(0, 2, 4, true),
			reloadAt(2, 10, 0),
			reserveAt(2, 1, 4, true), // one token owed at t2: 100 ms at 10/s after t3
		}},
		{name: "reserve, set burst", source: "rate_test.go TestReserveSetBurst", perS: 5, burst: 2, steps: []rateStep{
			reserveAt(0, 2, 0, true),
			reserveAt(0, 2, 4, true),
			reloadAt(3, 0, 4),
			// rate's case then reserves at t0, back before the reload
			// (where it counts no refill and passes at t9, "violates Limit
			// and Burst"); a rule's clock does not go back (see
			// TestRateCaseJumpBackwards). At t3 the bucket owes half a
			// token; 4 more are 4.5 tokens short: t3 + 900 ms.
			reserveAt(3, 4, 12, true),
		}},
		{name: "reserve, set limit, cancel", source: "rate_test.go TestReserveSetLimitCancel", perS: 5, burst: 2, steps: []rateStep{
			reserveAt(0, 2, 0, true),
			held(reserveAt(0, 2, 4, true), "r"),
			reloadAt(2, 10, 0),
			cancelAt("r", 2), // 2 tokens back
			reserveAt(2, 2, 3, true),
		}},
		{name: "wait simple", source: "rate_test.go TestWaitSimple", perS: 10, burst: 3, steps: []rateStep{
			// (rate's already-cancelled case is a difference: a rule lets
			// through an entry that need not wait whatever its context;
			// see TestRateCaseWaitOnCancelledContext.)
			reserveAt(0, 4, 0, false), // exceeds the burst
			reserveAt(0, 2, 0, true),  // act now
			reserveAt(0, 3, 2, true),  // act later
		}},
		{name: "wait cancel", source: "rate_test.go TestWaitCancel", perS: 10, burst: 3, steps: []rateStep{
			reserveAt(0, 2, 0, true), // one token left
			held(reserveAt(0, 3, 2, true), "w"), cancelAt("w", 1),
			reserveAt(1, 2, 1, true), // all three back: two tokens at t1
		}},
	}
}

// runRateCase runs one translated case.
func runRateCase(t *testing.T, rc rateCase) {
	behavior, mq := behThrottle, rc.maxQueue
	if mq == 0 {
		mq = time.Hour
	}
	if rc.reject {
		behavior, mq = behReject, 0
	}
	rule := func(perS float64, burst int) rules.Flow {
		return rules.Flow{Resource: "r", Threshold: perS, Bucket: &rules.Bucket{Burst: float64(burst)}, Throttle: behavior.section(mq)}
	}
	nf := nodes(nil)
	perS, burst := rc.perS, rc.burst
	cs, err := Build([]rules.Flow{rule(perS, burst)}, nil, nf, nil)
	require.NoError(t, err)
	clock := &harnessNow{}
	past, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel()
	waiting := map[string]*waiter{}
	for i, s := range rc.steps {
		now := tk(s.at)
		clock.ns.Store(now)
		c := cs["r"][0]
		desc := fmt.Sprintf("%s, step %d (%+v)", rc.source, i, s)
		switch s.kind {
		case stepAllow:
			if s.toks != unchecked {
				assert.InDelta(t, s.toks, bucketOf(c).tokensAt(now), 1e-9, "%s: tokens held", desc)
			}
			ctx := context.Background()
			if !rc.reject {
				ctx = past // no wait allowed: AllowN
			}
			be := c.Check(ctx, newEntry(now, s.n), &firingClock{now: clock})
			assert.Equal(t, s.ok, be == nil, "%s: %v", desc, be)
		case stepReserve:
			var wait time.Duration
			var be *core.BlockError
			if s.id != "" {
				ctx, cancel := context.WithCancel(context.Background())
				w := &waiter{cancel: cancel, done: make(chan *core.BlockError, 1)}
				hc := &holdingClock{now: clock, started: make(chan time.Duration, 1)}
				ec := newEntry(now, s.n)
				go func() { w.done <- c.Check(ctx, ec, hc) }()
				select {
				case wait = <-hc.started:
					waiting[s.id] = w
				case be = <-w.done:
					cancel()
				}
			} else {
				fc := &firingClock{now: clock}
				be = c.Check(context.Background(), newEntry(now, s.n), fc)
				if len(fc.waits) > 0 {
					wait = fc.waits[0]
				}
			}
			require.Equal(t, s.ok, be == nil, "%s: %v", desc, be)
			if s.ok {
				assert.Equal(t, tk(s.act), now+int64(wait), "%s: passes at t%d + %v", desc, s.at, time.Duration(now+int64(wait)-tk(s.act)))
			}
		case stepCancel:
			w := waiting[s.id]
			require.NotNil(t, w, desc)
			w.cancel()
			be := <-w.done
			require.NotNil(t, be, desc)
			require.ErrorIs(t, be.Cause, context.Canceled, desc)
			delete(waiting, s.id)
		case stepReload:
			if s.perS != 0 {
				perS = s.perS
			}
			if s.b != 0 {
				burst = s.b
			}
			cs, err = Build([]rules.Flow{rule(perS, burst)}, cs, nf, nil)
			require.NoError(t, err)
		}
	}
	for _, w := range waiting {
		w.cancel()
		<-w.done
	}
}

// TestRateCases runs the translated cases of x/time/rate's rate_test.go.
func TestRateCases(t *testing.T) {
	for _, rc := range rateCases() {
		t.Run(rc.name, func(t *testing.T) { runRateCase(t, rc) })
	}
}

// TestRateCaseEvery checks the rates of rate_test.go TestEvery that a rule
// can state (a StatInterval of whole milliseconds from 10 ms to an hour):
// one request per interval, Threshold 1 per StatInterval, is a bucket of
// one token refilled every interval: the second request waits exactly the
// interval, as rate.Every(interval) makes a Limiter wait. (rate's Inf for
// a zero or negative interval has no counterpart: a rule always limits.)
func TestRateCaseEvery(t *testing.T) {
	for _, interval := range []time.Duration{
		10 * time.Millisecond, 100 * time.Millisecond, time.Second, 2 * time.Second,
		2500 * time.Millisecond, 4 * time.Second, 10 * time.Second, time.Hour,
	} {
		t.Run(interval.String(), func(t *testing.T) {
			c, err := NewController(rules.Flow{Resource: "r", Threshold: 1, StatInterval: interval, Bucket: &rules.Bucket{Burst: 1}, Throttle: &rules.Throttle{MaxQueueing: time.Hour}}, nodes(nil))
			require.NoError(t, err)
			clk := &zeroClock{}
			require.Nil(t, c.Check(context.Background(), newEntry(0, 1), clk))
			require.Nil(t, c.Check(context.Background(), newEntry(0, 1), clk))
			assert.Equal(t, interval, clk.last())
			lim := rate.NewLimiter(rate.Every(interval), 1)
			lim.ReserveN(rateTime(0), 1)
			assert.Equal(t, interval, lim.ReserveN(rateTime(0), 1).DelayFrom(rateTime(0)), "rate.Limiter")
		})
	}
}

// TestRateCaseSimultaneousRequests is rate_test.go TestSimultaneousRequests:
// 15 goroutines ask a bucket of 5 at 1/s at one instant; exactly 5 pass.
func TestRateCaseSimultaneousRequests(t *testing.T) {
	for _, behavior := range []behavior{behReject, behThrottle} {
		t.Run(string(behavior), func(t *testing.T) {
			c, err := NewController(rules.Flow{Resource: "r", Threshold: 1, Bucket: &rules.Bucket{Burst: 5}, Throttle: behavior.section(0)}, nodes(nil))
			require.NoError(t, err)
			var ok atomic.Int32
			var wg sync.WaitGroup
			for i := 0; i < 15; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if c.Check(context.Background(), newEntry(rateT0, 1), neverClock{}) == nil {
						ok.Add(1)
					}
				}()
			}
			wg.Wait()
			assert.Equal(t, int32(5), ok.Load())
		})
	}
}

// TestRateCaseLongRunningQPS is rate_test.go TestLongRunningQPS as an exact
// count on the manual clock: 100/s, Burst 100, a request every 2 ms for 5
// s. rate's test accepts anything from 99.9% of the ideal burst + rate ×
// elapsed to one more; on a manual clock the count is exact: the bucket
// lasts 125 requests (0.8 tokens each net of the refill) and then passes
// every fifth; by the last request, at 4.998 s, 100 + 499.8 tokens have
// been available: 599 pass, as many as with rate.Limiter.
func TestRateCaseLongRunningQPS(t *testing.T) {
	c, err := NewController(rules.Flow{Resource: "r", Threshold: 100, Bucket: &rules.Bucket{Burst: 100}}, nodes(nil))
	require.NoError(t, err)
	lim := rate.NewLimiter(100, 100)
	got, want := 0, 0
	for now := int64(0); now < int64(5*time.Second); now += int64(2 * time.Millisecond) {
		if be, _ := check(t, c, rateT0+now, 1); be == nil {
			got++
		}
		if lim.AllowN(rateTime(rateT0+now), 1) {
			want++
		}
	}
	assert.Equal(t, want, got, "rate.Limiter")
	assert.Equal(t, 599, got)
}

// TestRateCaseWaitTimeout is rate_test.go TestWaitTimeout: under a
// context whose deadline is d away, a batch that can go now passes, and one
// whose turn is 2d away fails at once, with an error matching ErrBlocked
// and context.DeadlineExceeded, and waits for nothing.
func TestRateCaseWaitTimeout(t *testing.T) {
	c, err := NewController(rules.Flow{Resource: "r", Threshold: 10, Bucket: &rules.Bucket{Burst: 3}, Throttle: &rules.Throttle{MaxQueueing: time.Hour}}, nodes(nil))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rateD))
	defer cancel()
	clk := &zeroClock{}
	require.Nil(t, c.Check(ctx, newEntry(rateT0, 2), clk))
	be := c.Check(ctx, newEntry(rateT0, 3), clk)
	require.NotNil(t, be)
	assert.True(t, errors.Is(be, core.ErrBlocked) && errors.Is(be, context.DeadlineExceeded), "%v", be)
	assert.Empty(t, clk.waits)
}

// TestRateCaseWaitOnCancelledContext is where a rule differs from rate's
// WaitN (rate_test.go TestWaitSimple, "already-cancelled"): WaitN fails on
// a context already done even when no wait is needed; a rule's context
// bounds only a wait, so an entry that need not wait passes, and one that
// would wait fails at once.
func TestRateCaseWaitOnCancelledContext(t *testing.T) {
	c, err := NewController(rules.Flow{Resource: "r", Threshold: 10, Bucket: &rules.Bucket{Burst: 3}, Throttle: &rules.Throttle{MaxQueueing: time.Hour}}, nodes(nil))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.Nil(t, c.Check(ctx, newEntry(rateT0, 1), neverClock{}), "no wait: passes")
	lim := rate.NewLimiter(10, 3)
	assert.ErrorIs(t, lim.WaitN(ctx, 1), context.Canceled, "rate.Limiter")
	be := c.Check(ctx, newEntry(rateT0, 3), neverClock{})
	require.NotNil(t, be)
	assert.ErrorIs(t, be, context.Canceled)
}

// TestRateCaseJumpBackwards is where a rule differs from rate.Limiter on a
// clock reading earlier than the last one it saw (rate_test.go
// TestLimiterJumpBackwards; also TestReserveJumpBack and
// TestReserveJumpBackCancel): rate counts no time as having passed and
// moves its clock back, so the interval is refilled twice ("should violate
// Limit, Burst", its tests say); a rule reads the earlier instant as
// earlier, when the bucket held less. An engine's clock is monotonic: only
// concurrent callers whose readings and locking cross see this, by
// nanoseconds. On rate's sequence (10/s, Burst 3) a rule admits 4 of the
// 11 requests, rate.Limiter 5.
func TestRateCaseJumpBackwards(t *testing.T) {
	c, err := NewController(rules.Flow{Resource: "r", Threshold: 10, Bucket: &rules.Bucket{Burst: 3}}, nodes(nil))
	require.NoError(t, err)
	lim := rate.NewLimiter(10, 3)
	seq := []int{1, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2}
	want := []bool{true, true, false, false, false, true, false, false, true, false, false}
	rateWant := []bool{true, true, true, false, false, true, false, false, true, false, false}
	for i, k := range seq {
		be, _ := check(t, c, tk(k), 1)
		assert.Equal(t, want[i], be == nil, "step %d at t%d: %v", i, k, be)
		assert.Equal(t, rateWant[i], lim.AllowN(rateTime(tk(k)), 1), "rate.Limiter, step %d", i)
	}
}
