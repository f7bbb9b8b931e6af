package flow

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/rules"
)

// Published test cases of Guava's RateLimiter (RateLimiterTest.java) and
// of sentinel-golang's throttling controller (core/flow
// tc_throttling_test.go), in our own words. Guava's acquire(n) waits for
// its turn and reports the wait ("R"), a sleep moves the clock ("U"); here
// an acquire is an entry on a pacing rule with a long MaxQueueing that
// waits its turn (the clock moves by the wait), and tryAcquire is an entry
// on one with MaxQueueing 0 (or the timeout). Where sluice differs by
// design the case encodes sluice's documented behaviour and says why
// (docs/design/conformance.md, "Differences").

// peerStep is one step of a peer's case: sleep, or enter a batch of n and
// expect a wait (want) or a refusal.
type peerStep struct {
	sleep   time.Duration
	n       int64
	queue   time.Duration // tryAcquire's timeout: MaxQueueing for this entry (-1: the rule's)
	want    time.Duration // the wait, to the millisecond
	refused bool
	reload  float64 // reload the rule with this threshold before the step
}

func acq(n int64, want time.Duration) peerStep {
	return peerStep{n: n, queue: -1, want: want}
}

func ms(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

func runPeerCase(t *testing.T, rule rules.Flow, steps []peerStep) {
	t.Helper()
	rule.Resource = "r"
	nf := nodes(nil)
	built, err := Build([]rules.Flow{rule}, nil, nf, nil)
	require.NoError(t, err)
	clk := &wuClock{}
	now := int64(time.Hour) // an arbitrary start, not 0
	for i, s := range steps {
		if s.reload != 0 || (s.queue >= 0 && s.n > 0 && s.queue != maxQueueing(&rule)) {
			if s.reload != 0 {
				rule.Threshold = s.reload
			}
			if s.queue >= 0 && s.n > 0 {
				rule.Throttle = &rules.Throttle{MaxQueueing: s.queue}
			}
			built, err = Build([]rules.Flow{rule}, built, nf, nil)
			require.NoError(t, err)
		}
		if s.n == 0 {
			now += int64(s.sleep)
			continue
		}
		clk.waited.Store(0)
		be := built["r"][0].Check(context.Background(), &entry.Context{Resource: "r", Batch: s.n, Start: now}, clk)
		if s.refused {
			require.NotNil(t, be, "step %d: refused", i)
			continue
		}
		require.Nil(t, be, "step %d: admitted", i)
		got := time.Duration(clk.waited.Load())
		assert.Equal(t, s.want.Round(time.Millisecond), got.Round(time.Millisecond), "step %d: wait %v", i, got)
		now += int64(got)
	}
}

func TestGuavaRateLimiterCases(t *testing.T) {
	hour := time.Hour
	pace := func(t float64) rules.Flow {
		return rules.Flow{Threshold: t, Throttle: &rules.Throttle{MaxQueueing: hour}}
	}
	try := func(n int64, timeout time.Duration, ok bool, wait ...time.Duration) peerStep {
		s := peerStep{n: n, queue: timeout, refused: !ok}
		if len(wait) > 0 {
			s.want = wait[0]
		}
		return s
	}
	sleep := func(d time.Duration) peerStep { return peerStep{sleep: d} }
	tests := []struct {
		name  string
		rule  rules.Flow
		steps []peerStep
	}{
		{ // Guava RateLimiterTest testSimple: R0.00, R0.20, R0.20.
			"testSimple", pace(5),
			[]peerStep{acq(1, 0), acq(1, ms(200)), acq(1, ms(200))},
		},
		{ // Guava RateLimiterTest testImmediateTryAcquire.
			"testImmediateTryAcquire", pace(1),
			[]peerStep{try(1, 0, true), try(1, 0, false)},
		},
		{ // Guava RateLimiterTest testDoubleMinValueCanAcquireExactlyOnce.
			"testDoubleMinValueCanAcquireExactlyOnce", pace(math.SmallestNonzeroFloat64),
			[]peerStep{try(1, 0, true), try(1, 0, false), sleep(math.MaxInt32 * time.Millisecond), try(1, 0, false)},
		},
		{ // Guava RateLimiterTest testSimpleWithWait: R0.00, U0.20, R0.00, R0.20.
			"testSimpleWithWait", pace(5),
			[]peerStep{acq(1, 0), sleep(200 * time.Millisecond), acq(1, 0), acq(1, ms(200))},
		},
		{ // Guava RateLimiterTest testSimpleAcquireEarliestAvailableIsInPast:
			// Guava 0, U0.4, 0, 0, 0.2 (the idle 200 ms stored a permit);
			// pacing stores none, so the third waits a slot (a burst after
			// idling needs the token-bucket strategy).
			"testSimpleAcquireEarliestAvailableIsInPast", pace(5),
			[]peerStep{acq(1, 0), sleep(400 * time.Millisecond), acq(1, 0), acq(1, ms(200)), acq(1, ms(200))},
		},
		{ // Guava RateLimiterTest testOneSecondBurst: after idling, Guava
			// grants the five stored permits and one more at once (R0.00 x4
			// for batches 1, 1, 3, 1), then R0.20. The token bucket follows
			// x/time/rate: at most Burst (5) at one instant, so the batch
			// after the stored five waits one slot.
			"testOneSecondBurst", rules.Flow{Threshold: 5, Bucket: &rules.Bucket{}, Throttle: &rules.Throttle{MaxQueueing: hour}},
			[]peerStep{sleep(time.Second), sleep(time.Second), acq(1, 0), acq(1, 0), acq(3, 0), acq(1, ms(200)), acq(1, ms(200))},
		},
		{ // Guava RateLimiterTest testTryAcquire_noWaitAllowed.
			"testTryAcquire_noWaitAllowed", pace(5),
			[]peerStep{try(1, 0, true), try(1, 0, false), try(1, 0, false), sleep(100 * time.Millisecond), try(1, 0, false)},
		},
		{ // Guava RateLimiterTest testTryAcquire_someWaitAllowed: a timeout
			// per call is MaxQueueing here (reloaded; the schedule stays).
			"testTryAcquire_someWaitAllowed", pace(5),
			[]peerStep{try(1, 0, true), try(1, 200*time.Millisecond, true, ms(200)), try(1, 100*time.Millisecond, false), sleep(100 * time.Millisecond), try(1, 100*time.Millisecond, true, ms(100))},
		},
		{ // Guava RateLimiterTest testTryAcquire_negative: five at once at
			// 5/s, then a refusal at 900 ms and an admission at 1,000 ms.
			// Pacing admits a batch within the threshold at once and makes
			// the next caller wait for all its slots, as Guava does.
			"testTryAcquire_negative", rules.Flow{Threshold: 5, Throttle: &rules.Throttle{}},
			[]peerStep{try(5, 0, true), sleep(900 * time.Millisecond), try(1, 0, false), sleep(100 * time.Millisecond), try(1, 0, true)},
		},
		{ // Guava RateLimiterTest testSimpleWeights: 1/s, batches 1, 1, 2,
			// 4, 8, 1: R0, R1, R1, R2, R4, R8. A batch larger than the
			// threshold is refused here (it could never be admitted within
			// one interval), so the same rate is written 8 per 8 s.
			"testSimpleWeights", rules.Flow{Threshold: 8, StatInterval: 8 * time.Second, Throttle: &rules.Throttle{MaxQueueing: hour}},
			[]peerStep{acq(1, 0), acq(1, ms(1000)), acq(2, ms(1000)), acq(4, ms(2000)), acq(8, ms(4000)), acq(1, ms(8000))},
		},
		{ // Guava RateLimiterTest testBurstyAndUpdate: 1/s then 2/s; the
			// first entry after the change repays the slot of the old rate
			// (the schedule survives the reload). Guava admits acquire(4)
			// at 2/s (R1.00, then R2.00); here a batch above the threshold
			// is refused and takes nothing.
			"testBurstyAndUpdate", pace(1),
			[]peerStep{acq(1, 0), acq(1, ms(1000)), {reload: 2, n: 1, queue: -1, want: ms(1000)}, acq(2, ms(500)), {n: 4, queue: -1, refused: true}, acq(1, ms(1000))},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runPeerCase(t, tt.rule, tt.steps) })
	}
}

// Guava's warm-up cases. Two differences by design shape the expected
// waits (docs/design/conformance.md): a request's slot is the one of the allowance
// before it takes its token (Guava charges the mean over the permit it
// takes, so its first warm-up slots are half a step shorter: 1.38 s where
// sluice waits 1.5 s), and a resource at full load stays at the warning
// level, so after idling it is cold again sooner than in Guava (it refills
// Threshold per interval up to maxToken from there). The curve's area is
// the same: the allowance reaches Threshold after the same tokens.
func TestGuavaWarmUpCases(t *testing.T) {
	warm := func(th float64, period time.Duration, cf float64) rules.Flow {
		return rules.Flow{Threshold: th, WarmUp: &rules.WarmUp{Period: period, ColdFactor: cf}, Throttle: &rules.Throttle{MaxQueueing: time.Hour}}
	}
	eight := func(waits ...float64) []peerStep {
		var out []peerStep
		for _, w := range waits {
			out = append(out, acq(1, ms(w)))
		}
		return out
	}
	sleep := func(d time.Duration) peerStep { return peerStep{sleep: d} }
	join := func(parts ...[]peerStep) []peerStep {
		var out []peerStep
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tests := []struct {
		name  string
		rule  rules.Flow
		steps []peerStep
	}{
		{
			// Guava RateLimiterTest testWarmUp (2/s, 4 s, cold factor 3):
			// R0.00, R1.38, R1.13, R0.88, R0.63, R0.50 x3; cold again after
			// 4 s idle; still warm after 2 s idle. Here 0, 1.5, 1.25, 1.0,
			// 0.75, then 0.5; cold after 4 s; after 2 s idle from full
			// load, which sits at the warning level, cold again.
			"testWarmUp", warm(2, 4*time.Second, 3),
			join(
				eight(0, 1500, 1250, 1000, 750, 500, 500, 500),
				[]peerStep{sleep(500 * time.Millisecond), sleep(4 * time.Second)},
				eight(0, 1500, 1250, 1000, 750, 500, 500, 500),
				[]peerStep{sleep(500 * time.Millisecond), sleep(2 * time.Second)},
				eight(0, 1500, 1250, 1000, 750, 500, 500, 500),
			),
		},
		{
			// Guava RateLimiterTest testWarmUpWithColdFactor (5/s, 4 s, cold
			// factor 10): R0.00, R1.75, R1.26, R0.76, R0.30, R0.20 x3. Here
			// the slot before each token: 2.0, 1.505, 1.01, 0.515, then 0.2.
			"testWarmUpWithColdFactor", warm(5, 4*time.Second, 10),
			join(
				eight(0, 2000, 1505, 1010, 515, 200, 200, 200),
				[]peerStep{sleep(200 * time.Millisecond), sleep(4 * time.Second)},
				eight(0, 2000, 1505, 1010, 515, 200, 200, 200),
			),
		},
		{
			// Guava RateLimiterTest testWarmUpAndUpdate: 2/s warming, then
			// setRate(4). The first entry after the change repays the slot
			// of the old rate in both (R0.88 there, 1.0 here); Guava then
			// keeps the fraction of the warm-up done (R0.34, R0.28, ...),
			// while a reload that changes the curve starts it cold (0.75
			// s, the cold slot of 4/s).
			"testWarmUpAndUpdate", warm(2, 4*time.Second, 3),
			join(
				eight(0, 1500, 1250, 1000, 750, 500, 500, 500),
				[]peerStep{sleep(4500 * time.Millisecond)},
				eight(0, 1500, 1250),
				[]peerStep{{reload: 4, n: 1, queue: -1, want: ms(1000)}},
				eight(750, 687.5, 625, 562.5),
			),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runPeerCase(t, tt.rule, tt.steps) })
	}
	// Guava RateLimiterTest testWarmUpWithColdFactor1: a cold factor of 1
	// means no warm-up at all; sluice refuses it (leave the warmUp
	// section out instead).
	r := rules.Flow{Resource: "r", Threshold: 5, WarmUp: &rules.WarmUp{Period: 4 * time.Second, ColdFactor: 1}}
	var re *rules.Error
	require.ErrorAs(t, (&rules.Set{Flow: []rules.Flow{r}}).Validate(), &re)
	assert.Equal(t, "WarmUp.ColdFactor", re.Field)
}

// sentinel-golang core/flow tc_throttling_test.go, with its sleeps on the
// manual clock and its tolerances removed: sluice's pacing is exact.
func TestSentinelThrottlingCases(t *testing.T) {
	check := func(c *Controller, clk *wuClock, now int64) (bool, time.Duration) {
		clk.waited.Store(0)
		be := c.Check(context.Background(), &entry.Context{Resource: "r", Batch: 1, Start: now}, clk)
		return be == nil, time.Duration(clk.waited.Load())
	}
	t.Run("TestThrottlingChecker_DoCheckNoQueueingSingleThread", func(t *testing.T) {
		c, err := NewController(rules.Flow{Resource: "r", Threshold: 5, Throttle: &rules.Throttle{}}, nodes(nil))
		require.NoError(t, err)
		clk := &wuClock{}
		ok, _ := check(c, clk, 0)
		require.True(t, ok, "the first request passes")
		for i := 0; i < 5; i++ {
			ok, _ := check(c, clk, 0)
			require.False(t, ok, "request %d at once", i)
		}
		now := int64(210 * time.Millisecond)
		ok, _ = check(c, clk, now)
		require.True(t, ok, "after a slot and 10 ms")
		ok, _ = check(c, clk, now)
		require.False(t, ok)
	})
	t.Run("TestThrottlingChecker_DoCheckSingleThread", func(t *testing.T) {
		c, err := NewController(rules.Flow{Resource: "r", Threshold: 5, Throttle: &rules.Throttle{MaxQueueing: time.Second}}, nodes(nil))
		require.NoError(t, err)
		clk := &wuClock{}
		for i := 0; i < 10; i++ {
			ok, wait := check(c, clk, 0)
			if i <= 5 {
				require.True(t, ok, "request %d", i)
				assert.Equal(t, time.Duration(i)*200*time.Millisecond, wait, "request %d waits i slots", i)
			} else {
				require.False(t, ok, "request %d: its wait is over MaxQueueing", i)
			}
		}
	})
	t.Run("TestThrottlingChecker_DoCheckQueueingParallel", func(t *testing.T) {
		// 24 callers at once after the first: exactly 5 wait (sentinel-
		// golang allows a delta), 19 are refused.
		c, err := NewController(rules.Flow{Resource: "r", Threshold: 5, Throttle: &rules.Throttle{MaxQueueing: time.Second}}, nodes(nil))
		require.NoError(t, err)
		clk := &wuClock{}
		ok, _ := check(c, clk, 0)
		require.True(t, ok)
		var mu sync.Mutex
		waited, refused := 0, 0
		var wg sync.WaitGroup
		for i := 0; i < 24; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				be := c.Check(context.Background(), &entry.Context{Resource: "r", Batch: 1, Start: 0}, clk)
				mu.Lock()
				defer mu.Unlock()
				if be == nil {
					waited++
				} else {
					refused++
				}
			}()
		}
		wg.Wait()
		assert.Equal(t, 5, waited)
		assert.Equal(t, 19, refused)
	})
}
