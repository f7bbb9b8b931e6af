package flow

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
	"sync/atomic"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/rules"
)

// rateBase is the instant the tests map clock reading 0 onto for
// rate.Limiter, which reads time.Time.
var rateBase = time.Unix(1_700_000_000, 0)

func rateTime(ns int64) time.Time { return rateBase.Add(time.Duration(ns)) }

// bucketCase is a random token-bucket rule: its threshold, interval and
// whole burst (rate.Limiter's burst is an int).
type bucketCase struct {
	threshold float64
	interval  time.Duration
	burst     int
}

func (bc bucketCase) rule(behavior behavior, maxQueue time.Duration) rules.Flow {
	return rules.Flow{
		Resource: "r", Threshold: bc.threshold, StatInterval: bc.interval,
		Bucket: &rules.Bucket{Burst: float64(bc.burst)}, Throttle: behavior.section(maxQueue),
	}
}

func (bc bucketCase) limiter() *rate.Limiter {
	return rate.NewLimiter(rate.Limit(bc.threshold/bc.interval.Seconds()), bc.burst)
}

func (bc bucketCase) cost() float64 { return float64(bc.interval) / bc.threshold }

func randomBucketCase(rng *rand.Rand) bucketCase {
	thresholds := []float64{1, 2, 3, 7, 10, 100, 1000, 2.5, 0.5, 333, 1e5}
	intervals := []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second, 7 * time.Second, time.Minute}
	bc := bucketCase{
		threshold: thresholds[rng.Intn(len(thresholds))],
		interval:  intervals[rng.Intn(len(intervals))],
	}
	switch rng.Intn(3) {
	case 0:
		bc.burst = 1
	case 1:
		bc.burst = 1 + rng.Intn(20)
	default:
		bc.burst = max(1, int(bc.threshold))
	}
	return bc
}

// randomGap returns an adversarial gap between arrivals: none (a burst at
// one instant), a few nanoseconds either side of a whole number of tokens'
// refill time, or anything up to a few refill times and, rarely, a long
// idle period.
func randomGap(rng *rand.Rand, cost float64) int64 {
	switch rng.Intn(6) {
	case 0:
		return 0
	case 1, 2:
		k := float64(1 + rng.Intn(3))
		if rng.Intn(2) == 0 {
			return int64(math.Floor(k*cost)) - int64(rng.Intn(3))
		}
		return int64(math.Ceil(k*cost)) + 1 + int64(rng.Intn(3))
	case 3:
		return 1 + rng.Int63n(int64(cost/8)+1)
	case 4:
		return rng.Int63n(int64(3*cost) + 1)
	default:
		if rng.Intn(10) == 0 {
			return int64(cost) * int64(1+rng.Intn(50))
		}
		return rng.Int63n(int64(cost) + 1)
	}
}

func randomBatch(rng *rand.Rand, burst int) int64 {
	switch rng.Intn(8) {
	case 0:
		return int64(burst + 1 + rng.Intn(3)) // never fits
	case 1, 2:
		return int64(1 + rng.Intn(burst))
	default:
		return 1
	}
}

func check(t *testing.T, c *Controller, now, n int64) (*core.BlockError, *entry.Context) {
	t.Helper()
	ec := newEntry(now, n)
	return c.Check(context.Background(), ec, nil), ec
}

// TestTokenBucketAgreesWithRate runs random adversarial arrival sequences
// with batches through a token-bucket reject rule and through
// rate.Limiter.AllowN at the same instants: every decision agrees, and a
// refusal's RetryAfter is the time rate.Limiter needs for the batch,
// rounded up to the nanosecond.
func TestTokenBucketAgreesWithRate(t *testing.T) {
	const sequences, arrivals = 400, 300
	rng := rand.New(rand.NewSource(1))
	admitted, refused, edges := 0, 0, 0
	for s := 0; s < sequences; s++ {
		bc := randomBucketCase(rng)
		c, err := NewController(bc.rule(behReject, 0), nodes(nil))
		require.NoError(t, err)
		lim := bc.limiter()
		now := rng.Int63n(int64(time.Hour))
		for i := 0; i < arrivals; i++ {
			now += randomGap(rng, bc.cost())
			n := randomBatch(rng, bc.burst)
			want := lim.TokensAt(rateTime(now))
			if math.Abs((float64(n)-want)*bc.cost()-1) < 1e-3 {
				// The tokens are due a nanosecond from now: rate.Limiter
				// admits when they are due less than a nanosecond later,
				// and here its answer is floating-point noise. The exact
				// instant is TestTokenBucketRetryAfterIsExact's.
				edges++
				continue
			}
			wantOK := lim.AllowN(rateTime(now), int(n))
			be, _ := check(t, c, now, n)
			desc := fmt.Sprintf("sequence %d (%+v), arrival %d at %d, batch %d, rate.Limiter held %v", s, bc, i, now, n, want)
			require.Equal(t, wantOK, be == nil, desc)
			if wantOK {
				admitted++
				continue
			}
			refused++
			if n > int64(bc.burst) {
				assert.Equal(t, reasonBurst, be.Reason, desc)
				assert.Zero(t, be.RetryAfter, desc)
				continue
			}
			assert.Equal(t, reasonBucketShort, be.Reason, desc)
			assert.InDelta(t, want, be.Observed, 1e-6, desc)
			assert.Equal(t, float64(n), be.Threshold, desc)
			wantRetry := (float64(n) - want) * bc.cost()
			assert.InDelta(t, math.Floor(wantRetry), float64(be.RetryAfter), 1, desc)
		}
	}
	t.Logf("%d admitted, %d refused, %d arrivals skipped a nanosecond before their tokens", admitted, refused, edges)
	require.Positive(t, admitted)
	require.Positive(t, refused)
}

// TestTokenBucketRetryAfterIsExact checks, for random rules and batches,
// that a refused batch is refused a nanosecond before now + RetryAfter and
// admitted at it.
func TestTokenBucketRetryAfterIsExact(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for i := 0; i < 2000; i++ {
		bc := randomBucketCase(rng)
		c, err := NewController(bc.rule(behReject, 0), nodes(nil))
		require.NoError(t, err)
		now := rng.Int63n(int64(time.Hour))
		// Drain the bucket partly or wholly, at random instants.
		for k := rng.Intn(3 * min(bc.burst, 100)); k > 0; k-- {
			now += rng.Int63n(int64(bc.cost()/2) + 1)
			check(t, c, now, 1)
		}
		n := int64(1 + rng.Intn(bc.burst))
		be, _ := check(t, c, now, n)
		if be == nil {
			continue
		}
		desc := fmt.Sprintf("case %d (%+v) at %d, batch %d", i, bc, now, n)
		require.Positive(t, be.RetryAfter, desc)
		retry := int64(be.RetryAfter)
		be, _ = check(t, c, now+retry-1, n)
		require.NotNil(t, be, desc)
		require.Equal(t, time.Nanosecond, be.RetryAfter, desc)
		be, _ = check(t, c, now+retry, n)
		require.Nil(t, be, desc)
	}
}

// TestTokenBucketSemantics pins the behaviour at exact instants: a full
// start, the burst at one instant, the refill, the cap at Burst after idle,
// a batch larger than the burst and tokens given back.
func TestTokenBucketSemantics(t *testing.T) {
	c, err := NewController(rules.Flow{Resource: "r", Threshold: 10, Bucket: &rules.Bucket{Burst: 3}}, nodes(nil))
	require.NoError(t, err)
	const ms = int64(time.Millisecond)
	t0 := int64(5 * time.Second)
	for i := 0; i < 3; i++ {
		be, _ := check(t, c, t0, 1)
		require.Nil(t, be, "a bucket starts full: request %d", i)
	}
	be, _ := check(t, c, t0, 1)
	require.NotNil(t, be)
	assert.Equal(t, 100*time.Millisecond, be.RetryAfter, "one token per 100 ms")
	assert.Equal(t, 0.0, be.Observed)
	be, _ = check(t, c, t0+100*ms-1, 1)
	require.NotNil(t, be)
	be, _ = check(t, c, t0+100*ms, 1)
	require.Nil(t, be)
	be, _ = check(t, c, t0+100*ms, 2)
	require.NotNil(t, be)
	assert.Equal(t, 200*time.Millisecond, be.RetryAfter, "two tokens")

	// A long idle period stores Burst tokens, not more.
	t1 := t0 + 3600*1000*ms
	for i := 0; i < 3; i++ {
		be, _ = check(t, c, t1, 1)
		require.Nil(t, be)
	}
	be, _ = check(t, c, t1, 1)
	require.NotNil(t, be)

	// A batch larger than the burst never fits: no RetryAfter.
	be, _ = check(t, c, t1+3600*1000*ms, 4)
	require.NotNil(t, be)
	assert.Equal(t, reasonBurst, be.Reason)
	assert.Zero(t, be.RetryAfter)
	assert.Equal(t, 4.0, be.Observed)
	assert.Equal(t, 3.0, be.Threshold)

	// Tokens of an entry a later check refused go back; never above Burst.
	t2 := t1 + 3600*1000*ms
	be, ec := check(t, c, t2, 3)
	require.Nil(t, be)
	be, _ = check(t, c, t2, 1)
	require.NotNil(t, be)
	ec.ReleaseTickets(entry.ExitInfo{Start: t2, End: t2, Batch: 3, Blocked: true})
	be, ec = check(t, c, t2, 3)
	require.Nil(t, be, "the three tokens came back")
	ec.ReleaseTickets(entry.ExitInfo{Start: t2, End: t2 + 5*ms, Batch: 3})
	be, _ = check(t, c, t2+5*ms, 1)
	require.NotNil(t, be, "a completed entry keeps its tokens")
	t3 := t2 + 3600*1000*ms
	for i := 0; i < 3; i++ {
		_, ec = check(t, c, t3, 1)
		ec.ReleaseTickets(entry.ExitInfo{Start: t3, End: t3, Batch: 1, Blocked: true})
		ec.ReleaseTickets(entry.ExitInfo{Start: t3, End: t3, Batch: 1, Blocked: true})
	}
	for i := 0; i < 3; i++ {
		be, _ = check(t, c, t3, 1)
		require.Nil(t, be)
	}
	be, _ = check(t, c, t3, 1)
	require.NotNil(t, be, "tokens given back twice do not raise the bucket above Burst")
}

// TestTokenBucketFractional checks a threshold below one per interval with
// a fractional burst: 0.5 per second, Burst 1.5.
func TestTokenBucketFractional(t *testing.T) {
	c, err := NewController(rules.Flow{Resource: "r", Threshold: 0.5, Bucket: &rules.Bucket{Burst: 1.5}}, nodes(nil))
	require.NoError(t, err)
	be, _ := check(t, c, 0, 1)
	require.Nil(t, be)
	be, _ = check(t, c, 0, 1)
	require.NotNil(t, be, "half a token left")
	assert.Equal(t, 0.5, be.Observed)
	assert.Equal(t, time.Second, be.RetryAfter)
	be, _ = check(t, c, int64(time.Second), 1)
	require.Nil(t, be)
	be, _ = check(t, c, int64(time.Second), 2)
	require.Equal(t, reasonBurst, be.Reason)
}

// zeroClock is a clock whose timers fire at once, recording each wait:
// throttle tests check the waits without waiting.
type zeroClock struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (z *zeroClock) Nanotime() int64 { return 0 }

func (z *zeroClock) NewTimer(d time.Duration) core.Timer {
	z.mu.Lock()
	z.waits = append(z.waits, d)
	z.mu.Unlock()
	ch := make(chan time.Time, 1)
	ch <- time.Time{}
	return firedTimer(ch)
}

func (z *zeroClock) last() time.Duration {
	z.mu.Lock()
	defer z.mu.Unlock()
	if len(z.waits) == 0 {
		return 0
	}
	return z.waits[len(z.waits)-1]
}

// neverClock is a clock whose timers never fire.
type neverClock struct{}

func (neverClock) Nanotime() int64                   { return 0 }
func (neverClock) NewTimer(time.Duration) core.Timer { return firedTimer(nil) }

type firedTimer chan time.Time

func (f firedTimer) C() <-chan time.Time { return f }
func (f firedTimer) Stop() bool          { return false }

// TestTokenBucketThrottleAgreesWithReserve runs random adversarial arrival
// sequences through a token-bucket throttle rule and through
// rate.Limiter.ReserveN (cancelled when its delay exceeds MaxQueueing): the
// same requests are admitted, each after rate's delay rounded up to the
// nanosecond, and a refusal's RetryAfter is when the wait will fit.
func TestTokenBucketThrottleAgreesWithReserve(t *testing.T) {
	const sequences, arrivals = 300, 300
	rng := rand.New(rand.NewSource(3))
	waited, refused, edges := 0, 0, 0
	for s := 0; s < sequences; s++ {
		bc := randomBucketCase(rng)
		maxQueue := time.Duration(rng.Int63n(int64(4*bc.cost())) + 1)
		if rng.Intn(5) == 0 {
			maxQueue = 0
		}
		c, err := NewController(bc.rule(behThrottle, maxQueue), nodes(nil))
		require.NoError(t, err)
		lim := bc.limiter()
		clk := &zeroClock{}
		now := rng.Int63n(int64(time.Hour))
		for i := 0; i < arrivals; i++ {
			now += randomGap(rng, bc.cost())
			n := randomBatch(rng, bc.burst)
			at := rateTime(now)
			short := (float64(n) - lim.TokensAt(at)) * bc.cost()
			if math.Abs(short-math.Round(short)) < 1e-3 && (math.Round(short) == 1 || math.Round(short) == float64(maxQueue+1)) {
				// A nanosecond from a boundary, where rate.Limiter's
				// truncated delay is floating-point noise.
				edges++
				continue
			}
			r := lim.ReserveN(at, int(n))
			delay := r.DelayFrom(at)
			wantOK := r.OK() && delay <= maxQueue
			if r.OK() && !wantOK {
				r.CancelAt(at)
			}
			before := len(clk.waits)
			ec := newEntry(now, n)
			be := c.Check(context.Background(), ec, clk)
			desc := fmt.Sprintf("sequence %d (%+v, max queueing %v), arrival %d at %d, batch %d, rate delay %v", s, bc, maxQueue, i, now, n, delay)
			require.Equal(t, wantOK, be == nil, "%s: %v", desc, be)
			switch {
			case wantOK && delay > 0:
				waited++
				require.Len(t, clk.waits, before+1, desc)
				assert.InDelta(t, float64(delay), float64(clk.last()), 1, desc)
			case wantOK:
				require.Len(t, clk.waits, before, desc)
			case n > int64(bc.burst):
				assert.Equal(t, reasonBurst, be.Reason, desc)
			default:
				refused++
				assert.InDelta(t, float64(delay-maxQueue), float64(be.RetryAfter), 1, desc)
			}
		}
	}
	t.Logf("%d waited, %d refused, %d arrivals skipped a nanosecond from a boundary", waited, refused, edges)
	require.Positive(t, waited)
	require.Positive(t, refused)
}

// TestTokenBucketThrottleCancelGivesBack checks that a request whose wait
// ends with its context gives its tokens back.
func TestTokenBucketThrottleCancelGivesBack(t *testing.T) {
	r := rules.Flow{Resource: "r", Threshold: 10, Bucket: &rules.Bucket{Burst: 1}, Throttle: &rules.Throttle{MaxQueueing: time.Second}}
	c, err := NewController(r, nodes(nil))
	require.NoError(t, err)
	clk := &zeroClock{}
	require.Nil(t, c.Check(context.Background(), newEntry(0, 1), clk))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	be := c.Check(ctx, newEntry(0, 1), neverClock{})
	require.NotNil(t, be)
	require.ErrorIs(t, be.Cause, context.Canceled)
	// The cancelled request's token went back: the next waits 100 ms, not
	// 200.
	require.Nil(t, c.Check(context.Background(), newEntry(0, 1), clk))
	assert.Equal(t, 100*time.Millisecond, clk.last())
	// A wait over MaxQueueing is refused; RetryAfter is when it fits.
	for i := 0; i < 9; i++ {
		require.Nil(t, c.Check(context.Background(), newEntry(0, 1), clk))
	}
	be = c.Check(context.Background(), newEntry(0, 1), clk)
	require.NotNil(t, be)
	assert.Equal(t, 100*time.Millisecond, be.RetryAfter)
}

// TestTokenBucketReloadKeepsTokens checks reloads at exact instants: a new
// threshold keeps the stored tokens (capped at the new burst) and refills
// at the new rate from the reload on; a debt carries over too.
func TestTokenBucketReloadKeepsTokens(t *testing.T) {
	nf := nodes(nil)
	rule := func(threshold, burst float64) rules.Flow {
		return rules.Flow{Resource: "r", Threshold: threshold, Bucket: &rules.Bucket{Burst: burst}}
	}
	build := func(old map[string][]*Controller, r rules.Flow) map[string][]*Controller {
		cs, err := Build([]rules.Flow{r}, old, nf, nil)
		require.NoError(t, err)
		return cs
	}
	admit := func(cs map[string][]*Controller, now int64, n int) int {
		got := 0
		for i := 0; i < n; i++ {
			if be, _ := check(t, cs["r"][0], now, 1); be == nil {
				got++
			}
		}
		return got
	}
	const ms = int64(time.Millisecond)
	cs := build(nil, rule(10, 10))
	require.Equal(t, 4, admit(cs, 0, 4))
	// 6 stored; a larger burst keeps 6.
	cs = build(cs, rule(20, 20))
	require.Equal(t, 6, admit(cs, 0, 100))
	// Refill at 20/s from now: 50 ms gives one token.
	require.Equal(t, 0, admit(cs, 50*ms-1, 5))
	require.Equal(t, 1, admit(cs, 50*ms, 5))
	// Idle a minute: full at 20. A burst of 5 caps the 20 stored at 5.
	cs = build(cs, rule(20, 5))
	require.Equal(t, 5, admit(cs, 60_000*ms, 100))
	// Back to 10/s with burst 10: still empty, one token per 100 ms. (The
	// new rule takes over at its first decision: until then the bucket
	// refills at the old rate.)
	cs = build(cs, rule(10, 10))
	require.Equal(t, 0, admit(cs, 60_000*ms, 5))
	require.Equal(t, 0, admit(cs, 60_000*ms+100*ms-1, 5))
	require.Equal(t, 1, admit(cs, 60_000*ms+100*ms, 5))

	// A throttle rule's debt survives a new threshold: 1 owed token at
	// 10/s is 100 ms; at 1/s it is a second.
	th := rules.Flow{Resource: "r", Threshold: 10, Bucket: &rules.Bucket{Burst: 1}, Throttle: &rules.Throttle{MaxQueueing: time.Hour}}
	cs = build(nil, th)
	clk := &zeroClock{}
	require.Nil(t, cs["r"][0].Check(context.Background(), newEntry(0, 1), clk))
	require.Nil(t, cs["r"][0].Check(context.Background(), newEntry(0, 1), clk))
	assert.Equal(t, 100*time.Millisecond, clk.last())
	th.Threshold = 1
	cs = build(cs, th)
	require.Nil(t, cs["r"][0].Check(context.Background(), newEntry(0, 1), clk))
	assert.Equal(t, 2*time.Second, clk.last(), "one token owed, one taken: two at 1/s")
}

// TestTokenBucketReloadUnderConcurrency reloads the rule with other
// thresholds while goroutines take tokens at frozen instants: each instant
// admits exactly the burst, whatever rule each caller found.
func TestTokenBucketReloadUnderConcurrency(t *testing.T) {
	const burst, workers, perWorker = 50, 8, 40
	nf := nodes(nil)
	var cur atomic.Pointer[Controller]
	var mu sync.Mutex // serialises reloads, as the engine does
	var old map[string][]*Controller
	reload := func(threshold float64) {
		mu.Lock()
		defer mu.Unlock()
		cs, err := Build([]rules.Flow{{Resource: "r", Threshold: threshold, Bucket: &rules.Bucket{Burst: burst}}}, old, nf, nil)
		if err != nil {
			panic(err)
		}
		old = cs
		cur.Store(cs["r"][0])
	}
	reload(1)
	for round := int64(0); round < 5; round++ {
		// A day apart: full again at any of the thresholds.
		now := round * int64(24*time.Hour)
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < perWorker; i++ {
					ec := newEntry(now, 1)
					if cur.Load().Check(context.Background(), ec, nil) == nil {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				reload([]float64{1, 7, 100, 2.5}[i%4])
			}
		}()
		wg.Wait()
		require.Equal(t, int64(burst), admitted.Load(), "round %d", round)
	}
}

// TestTokenBucketLongSaturation keeps a bucket of two tokens at one per
// hour short of full for 20 days, past the 13 days after which the state is
// rebased: each request passes exactly on the hour and not a nanosecond
// before.
func TestTokenBucketLongSaturation(t *testing.T) {
	c, err := NewController(rules.Flow{Resource: "r", Threshold: 1, StatInterval: time.Hour, Bucket: &rules.Bucket{Burst: 2}}, nodes(nil))
	require.NoError(t, err)
	const hour = int64(time.Hour)
	t0 := int64(7 * time.Minute)
	be, _ := check(t, c, t0, 2)
	require.Nil(t, be)
	for h := int64(1); h <= 20*24; h++ {
		be, _ = check(t, c, t0+h*hour-1, 1)
		require.NotNil(t, be, "hour %d", h)
		require.Equal(t, time.Nanosecond, be.RetryAfter, "hour %d", h)
		be, _ = check(t, c, t0+h*hour, 1)
		require.Nil(t, be, "hour %d", h)
	}
}

// TestTokenBucketThrottleGivesBackOnLaterRefusal checks that a throttle
// entry a later check refused gives back its tokens: the next request
// waits as if it had never been.
func TestTokenBucketThrottleGivesBackOnLaterRefusal(t *testing.T) {
	r := rules.Flow{Resource: "r", Threshold: 10, Bucket: &rules.Bucket{Burst: 1}, Throttle: &rules.Throttle{MaxQueueing: time.Second}}
	c, err := NewController(r, nodes(nil))
	require.NoError(t, err)
	clk := &zeroClock{}
	require.Nil(t, c.Check(context.Background(), newEntry(0, 1), clk))
	ec := newEntry(0, 2)
	be := c.Check(context.Background(), ec, clk)
	require.Equal(t, reasonBurst, be.Reason)
	ec = newEntry(0, 1)
	require.Nil(t, c.Check(context.Background(), ec, clk))
	assert.Equal(t, 100*time.Millisecond, clk.last())
	ec.ReleaseTickets(entry.ExitInfo{Start: 0, End: 0, Batch: 1, Blocked: true})
	require.Nil(t, c.Check(context.Background(), newEntry(0, 1), clk))
	assert.Equal(t, 100*time.Millisecond, clk.last(), "the refused entry's token came back")
}

// TestTokenBucketTinyThresholdSaturates checks a token every 1e12 hours:
// the bucket starts with its one token, and the next is further away than
// a time.Duration holds, so RetryAfter saturates instead of wrapping.
func TestTokenBucketTinyThresholdSaturates(t *testing.T) {
	c, err := NewController(rules.Flow{Resource: "r", Threshold: 1e-12, StatInterval: time.Hour, Bucket: &rules.Bucket{Burst: 1}}, nodes(nil))
	require.NoError(t, err)
	be, _ := check(t, c, 0, 1)
	require.Nil(t, be)
	for _, now := range []int64{0, int64(1000 * time.Hour)} {
		be, _ = check(t, c, now, 1)
		require.NotNil(t, be)
		assert.Equal(t, time.Duration(math.MaxInt64), be.RetryAfter)
		assert.Equal(t, reasonBucketShort, be.Reason)
	}
}
