package sluice

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sync/atomic"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
)

const ms = int64(time.Millisecond)

// Behaviour 1: reject, threshold T, steady overload of 5T for 10 s.
func TestFlowRejectSteadyOverload(t *testing.T) {
	const T = 200
	g, clk := newTestEngine(t, 0)
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: T})

	var admitted []int64 // admission times
	step := 5 * ms       // 5T/s = 1,000/s: 5 requests every 5 ms
	for now := int64(0); now < 10*int64(time.Second); now += step {
		clk.Set(now)
		for i := 0; i < 5; i++ {
			if try(g, "r") {
				admitted = append(admitted, now)
			}
		}
	}
	perSecond := make([]int, 10)
	for _, at := range admitted {
		perSecond[at/int64(time.Second)]++
	}
	for s, n := range perSecond {
		assert.InDelta(t, T, n, T*0.01, "second %d admitted %d", s, n)
	}
	// Under steady overload no sliding second admits more than 1.1 T (the
	// window's own share plus one bucket's); bursts timed against the
	// buckets can reach 2T (TestFlowSlidingBoundIsReached).
	maxWin := 0
	for i, j := 0, 0; j < len(admitted); j++ {
		for admitted[j]-admitted[i] >= int64(time.Second) {
			i++
		}
		if n := j - i + 1; n > maxWin {
			maxWin = n
		}
	}
	assert.LessOrEqual(t, maxWin, int(1.1*T), "max admitted in any sliding second")
	s, ok := g.Snapshot("r")
	require.True(t, ok)
	assert.Equal(t, uint64(len(admitted)), s.TotalPass)
	assert.Equal(t, uint64(10*int64(time.Second)/step*5)-uint64(len(admitted)), s.TotalBlock)
}

// Behaviour 2: the fixed-window double-rate case.
func TestFlowRejectNoDoubleRateAtSecondBoundary(t *testing.T) {
	const T = 100
	g, clk := newTestEngine(t, 0)
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: T})
	pass := func(from int64) int {
		n := 0
		for i := 0; i < T; i++ {
			clk.Set(from + int64(i)*ms)
			if try(g, "r") {
				n++
			}
		}
		return n
	}
	require.Equal(t, T, pass(900*ms), "T in the last 100 ms of second 0")
	require.Equal(t, 0, pass(1000*ms), "T in the first 100 ms of second 1 must not pass")
	// Once the burst has left the window, the resource admits again.
	clk.Set(1900 * ms)
	require.True(t, try(g, "r"))
}

func TestFlowRejectCustomStatInterval(t *testing.T) {
	// 30 per minute: the window is one minute of 6 s buckets.
	g, clk := newTestEngine(t, 0)
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 30, StatInterval: time.Minute})
	n := 0
	for i := 0; i < 120; i++ { // one request per second for two minutes
		clk.Set(int64(i) * int64(time.Second))
		if try(g, "r") {
			n++
		}
	}
	// First 30 s admit 30; then each 6 s bucket leaving the window frees
	// the 6 it held.
	require.Equal(t, 60, n)
}

// Behaviour 3: throttle, 10/s with MaxQueueing 500 ms, 20 callers together.
func TestFlowThrottlePacesAndBoundsTheQueue(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 10, Throttle: &rules.Throttle{MaxQueueing: 500 * time.Millisecond}})

	type result struct {
		passed bool
		at     int64 // clock when Entry returned
		err    error
	}
	results := make(chan result, 20)
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := g.Entry("r")
			results <- result{passed: err == nil, at: clk.Nanotime(), err: err}
			p.Exit() // the zero Pass when refused: does nothing
		}()
	}
	// 1 passes at once, 5 wait (100..500 ms), 14 are refused at once: all of
	// that happens before the clock moves.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, clk.BlockUntil(ctx, 5))
	var immediate []result
	for i := 0; i < 15; i++ {
		immediate = append(immediate, <-results)
	}
	passedNow := 0
	for _, r := range immediate {
		require.Equal(t, int64(0), r.at)
		if r.passed {
			passedNow++
		} else {
			var be *core.BlockError
			require.ErrorAs(t, r.err, &be)
			// Six slots of 100 ms are taken: the seventh is 600 ms away,
			// and within the queue bound 100 ms later.
			assert.Equal(t, "wait 600ms exceeds max queueing 500ms", be.Reason)
			assert.Equal(t, 100*time.Millisecond, be.RetryAfter)
		}
	}
	require.Equal(t, 1, passedNow)
	// Each 100 ms releases exactly one queued caller.
	for k := int64(1); k <= 5; k++ {
		clk.Advance(100 * time.Millisecond)
		r := <-results
		require.True(t, r.passed)
		require.Equal(t, k*100*ms, r.at)
		select {
		case r := <-results:
			t.Fatalf("two callers released at %v: %+v", time.Duration(r.at), r)
		default:
		}
	}
	wg.Wait()
}

func TestFlowThrottleCancelledWaitGivesSlotBack(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 10, Throttle: &rules.Throttle{MaxQueueing: time.Second}})
	require.True(t, try(g, "r")) // passes at 0, next slot at 100 ms

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		p, err := g.EntryContext(ctx, "r") // queued for 100 ms
		p.Exit()                           // the zero Pass when refused: does nothing
		errc <- err
	}()
	bctx, bcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer bcancel()
	require.NoError(t, clk.BlockUntil(bctx, 1))
	cancel()
	err := <-errc
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, core.ErrBlocked)
	require.Equal(t, int64(0), clk.Nanotime(), "returned without the clock moving")

	// The freed slot (100 ms) goes to the next caller, not 200 ms.
	done := make(chan int64, 1)
	go func() {
		p, err := g.Entry("r")
		if err == nil {
			p.Exit()
		}
		done <- clk.Nanotime()
	}()
	require.NoError(t, clk.BlockUntil(bctx, 1))
	clk.Advance(100 * time.Millisecond)
	require.Equal(t, 100*ms, <-done)
}

func TestFlowThrottleIsExactAboveOneThousandPerSecond(t *testing.T) {
	// R callers arrive together with a one-second queue: the pacer must
	// schedule slot k at k/R s for k = 0..R, so exactly R+1 pass within the
	// second and the last one leaves at 1 s. (Millisecond arithmetic, as in
	// sentinel-golang, rounds the spacing to 0 above 1,000/s and lets
	// everyone through.)
	tests := []struct{ rate int }{{1500}, {3000}, {7000}}
	for _, tt := range tests {
		t.Run("", func(t *testing.T) {
			g, clk := newTestEngine(t, 0)
			mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: float64(tt.rate), Throttle: &rules.Throttle{MaxQueueing: time.Second}})
			const extra = 25
			var passed atomic.Int64
			var last atomic.Int64
			refusedc := make(chan struct{}, extra+tt.rate)
			var wg sync.WaitGroup
			for i := 0; i < tt.rate+1+extra; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p, err := g.Entry("r")
					if err != nil {
						refusedc <- struct{}{}
						return
					}
					passed.Add(1)
					if now := clk.Nanotime(); now > last.Load() {
						last.Store(now)
					}
					p.Exit()
				}()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := clk.BlockUntil(ctx, tt.rate) // everyone but slot 0 waits
			for i := 0; i < extra && err == nil; i++ {
				select { // the surplus is refused without the clock moving
				case <-refusedc:
				case <-ctx.Done():
					err = ctx.Err()
				}
			}
			clk.Advance(time.Second)
			if err != nil {
				clk.Advance(time.Hour) // release any stragglers before failing
			}
			wg.Wait()
			require.NoError(t, err)
			assert.Equal(t, int64(tt.rate+1), passed.Load())
			assert.Empty(t, refusedc, "no refusal beyond the surplus")
			assert.Equal(t, int64(time.Second), last.Load())
		})
	}
}

func TestFlowThrottleWithoutQueueSpacesPasses(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 4000, Throttle: &rules.Throttle{}})
	// 250 µs spacing: a caller every 50 µs sees exactly every fifth pass.
	var passes []int64
	for now := int64(0); now < 10*int64(time.Millisecond); now += 50 * int64(time.Microsecond) {
		clk.Set(now)
		if try(g, "r") {
			passes = append(passes, now)
		}
	}
	require.Len(t, passes, 40)
	for i := 1; i < len(passes); i++ {
		require.Equal(t, 250*int64(time.Microsecond), passes[i]-passes[i-1])
	}
}

// Behaviour 4: warm-up, threshold T, cold factor 3.
func TestFlowWarmUpCurve(t *testing.T) {
	const T = 300
	g, clk := newTestEngine(t, 0)
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: T, WarmUp: &rules.WarmUp{Period: 10 * time.Second}})

	run := func(from int64, seconds int) []int {
		per := make([]int, seconds)
		for now := from; now < from+int64(seconds)*int64(time.Second); now += ms {
			clk.Set(now)
			if try(g, "r") { // 1,000/s offered: far over T
				per[(now-from)/int64(time.Second)]++
			}
		}
		return per
	}
	per := run(0, 14)
	want := warmUpCurve(T, 3, 10, 14)
	t.Logf("admitted per second while warming: %v", per)
	t.Logf("Guava curve, integrated:           %v", want)
	// The check compares a one-second sliding window, filled at the
	// earlier, lower allowances, with the current allowance: admissions
	// lead the curve, by less than one second.
	for s := range per {
		hi := float64(T)
		if s+1 < len(want) {
			hi = want[s+1]
		}
		assert.GreaterOrEqual(t, float64(per[s]), want[s]-2, "second %d below the curve", s)
		assert.LessOrEqual(t, float64(per[s]), hi+2, "second %d more than a second ahead of the curve", s)
	}
	assert.InEpsilon(t, T/3, per[0], 0.06, "a cold resource admits about T/3")
	assert.Equal(t, T, per[10], "warm at the end of the period")
	// An idle period as long as the warm-up period makes it cold again.
	idle := run(34*int64(time.Second), 1)
	assert.Equal(t, per[0], idle[0], "cold again after being idle")
}

// warmUpCurve integrates the warm-up model under saturation: stored tokens
// above the warning level x fall at the admitted rate r(x) = 1/(a·x + 1/T)
// from X = 2·P·T/(1+cf) to 0 (when r reaches T), with a = (cf-1)/(T·X). It
// returns the requests admitted in each second.
func warmUpCurve(T, cf, P float64, seconds int) []float64 {
	X := 2 * P * T / (1 + cf)
	a := (cf - 1) / (T * X)
	out := make([]float64, seconds)
	x := X
	const dt = 1e-5
	for i := 0; i < seconds*int(1/dt); i++ {
		r := T
		if x > 0 {
			r = 1 / (a*x + 1/T)
		}
		x -= r * dt
		out[int(float64(i)*dt)] += r * dt
	}
	for i := range out {
		out[i] = float64(int(out[i] + 0.5))
	}
	return out
}

func TestFlowWarmUpThrottlePacesAtTheWarmRate(t *testing.T) {
	const T = 100
	g, clk := newTestEngine(t, 0)
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: T, WarmUp: &rules.WarmUp{Period: 10 * time.Second}, Throttle: &rules.Throttle{}})
	count := func(from int64) int {
		n := 0
		for now := from; now < from+int64(time.Second); now += ms {
			clk.Set(now)
			if try(g, "r") {
				n++
			}
		}
		return n
	}
	cold := count(0)
	assert.InDelta(t, T/3, cold, 2, "cold: one pass each 30 ms")
	var last int
	for s := int64(1); s < 14; s++ {
		last = count(s * int64(time.Second))
	}
	assert.InDelta(t, T, last, 2, "warm: one pass each 10 ms")
}

// Behaviour 5: concurrency limits, flow metric and isolation.
func TestConcurrencyLimitsHoldUnder64Goroutines(t *testing.T) {
	tests := []struct {
		name string
		load func(g *Engine) error
	}{
		{"flow concurrency", func(g *Engine) error {
			_, err := loadFlow(g, []rules.Flow{{Resource: "r", Metric: rules.Concurrency, Threshold: 7}})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, _ := newTestEngine(t, 0)
			require.NoError(t, tt.load(g))
			var inFlight, maxSeen, passed atomic.Int64
			var wg sync.WaitGroup
			for w := 0; w < 64; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 300; i++ {
						p, err := g.Entry("r")
						if err != nil {
							require.ErrorIs(t, err, core.ErrBlocked)
							continue
						}
						n := inFlight.Add(1)
						for {
							m := maxSeen.Load()
							if n <= m || maxSeen.CompareAndSwap(m, n) {
								break
							}
						}
						passed.Add(1)
						inFlight.Add(-1)
						p.Exit()
					}
				}()
			}
			wg.Wait()
			assert.LessOrEqual(t, maxSeen.Load(), int64(7))
			assert.Positive(t, passed.Load())
			s, _ := g.Snapshot("r")
			assert.Equal(t, int64(0), s.Concurrency)
			// All slots came back: 7 can be held at once again, not 8.
			var held []Pass
			for i := 0; i < 8; i++ {
				if p, err := g.Entry("r"); err == nil {
					held = append(held, p)
				}
			}
			assert.Len(t, held, 7)
			for _, p := range held {
				p.Exit()
			}
		})
	}
}

// Behaviour 6: associated resource.
func TestFlowAssociatedResource(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	mustLoadFlow(t, g, rules.Flow{Resource: "write", RefResource: "read", Threshold: 10})
	for i := 0; i < 11; i++ {
		require.True(t, try(g, "read"))
	}
	p, err := g.Entry("write")
	require.Zero(t, p)
	var be *core.BlockError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, float64(11), be.Observed)
	assert.Equal(t, float64(10), be.Threshold)
	// Once read is quiet (its second has passed), write passes.
	clk.Advance(time.Second)
	require.True(t, try(g, "write"))
	// read at exactly the threshold is not over it.
	for i := 0; i < 10; i++ {
		require.True(t, try(g, "read"))
	}
	require.True(t, try(g, "write"))
}

// Behaviour 7: batch counts.
func TestFlowBatchCounts(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 10})
	for i := 0; i < 3; i++ {
		require.True(t, try(g, "r", WithBatch(3)), "batch %d", i)
	}
	require.False(t, try(g, "r", WithBatch(3)), "9+3 > 10")
	require.True(t, try(g, "r", WithBatch(1)), "9+1 = 10")
	require.False(t, try(g, "r"))

	// A batch larger than the threshold is refused, clearly, even when idle.
	g2, _ := newTestEngine(t, 0)
	mustLoadFlow(t, g2, rules.Flow{Resource: "r", Threshold: 10})
	_, err := g2.Entry("r", WithBatch(11))
	var be *core.BlockError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, "batch larger than threshold", be.Reason)
	assert.Equal(t, float64(11), be.Observed)

	for _, n := range []int{0, -1, maxBatch + 1} {
		_, err := g2.Entry("r", WithBatch(n))
		require.ErrorIs(t, err, ErrBadBatch, "batch %d", n)
		require.NotErrorIs(t, err, core.ErrBlocked)
	}
	s, _ := g2.Snapshot("r")
	assert.Equal(t, uint64(0), s.TotalPass)
}

// Behaviour 8: a panic between Entry and a deferred Exit, and double Exit.
func TestPanicReleasesAndDoubleExitIsNoop(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	_, err := loadFlow(g, []rules.Flow{{Metric: rules.Concurrency, Resource: "r", Threshold: 1}})
	require.NoError(t, err)
	func() {
		defer func() { require.Equal(t, "boom", recover()) }()
		p, err := g.Entry("r")
		require.NoError(t, err)
		defer p.Exit()
		panic("boom")
	}()
	s, _ := g.Snapshot("r")
	require.Equal(t, int64(0), s.Concurrency)

	p, err := g.Entry("r")
	require.NoError(t, err)
	p.Exit()
	p.Exit()
	var zero Pass
	zero.Exit()
	s, _ = g.Snapshot("r")
	require.Equal(t, int64(0), s.Concurrency)
	require.Equal(t, uint64(2), s.TotalComplete)
	// The isolation slot was released once, not twice: still exactly one.
	p1, err := g.Entry("r")
	require.NoError(t, err)
	_, err = g.Entry("r")
	require.ErrorIs(t, err, core.ErrBlocked)
	p1.Exit()
}

func TestBlockErrorShape(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	mustLoadFlow(t, g, rules.Flow{ID: "orders-qps", Resource: "GET /orders", Threshold: 1})
	require.True(t, try(g, "GET /orders"))
	p, err := g.Entry("GET /orders")
	require.Zero(t, p)
	require.Error(t, err)
	require.True(t, errors.Is(err, core.ErrBlocked))
	var be *core.BlockError
	require.True(t, errors.As(err, &be))
	assert.Equal(t, core.BlockType(1), be.Type)
	assert.Equal(t, "flow", be.Type.String())
	assert.Equal(t, "GET /orders", be.Resource)
	assert.Equal(t, core.RuleRef{ID: "orders-qps", Metric: "qps"}, be.Rule)
	assert.Equal(t, float64(1), be.Observed)
	assert.Equal(t, float64(1), be.Threshold)
	assert.Equal(t, time.Second, be.RetryAfter, "when the entry at 0 leaves the window")
	assert.Equal(t, `sluice: blocked by flow rule on "GET /orders": observed 1, threshold 1, retry after 1s`, be.Error())
}

// refusal makes one entry that must be refused and returns its error.
func refusal(t *testing.T, g *Engine, res string, opts ...EntryOption) *core.BlockError {
	t.Helper()
	p, err := g.Entry(res, opts...)
	p.Exit() // the zero Pass when refused: does nothing
	var be *core.BlockError
	require.ErrorAs(t, err, &be)
	return be
}

// A batch takes as many places in a pacing schedule as it has requests,
// whether the schedule was idle or not: it may start at once, and the next
// caller waits for all of them (MaxQueueing 0: refused until then, with the
// exact RetryAfter).
func TestFlowThrottleBatchOccupiesItsSlots(t *testing.T) {
	tests := []struct {
		name  string
		rule  rules.Flow
		batch int
		free  int64 // when the schedule is free again after the batch at 0
	}{
		{"throttle, 10/s", rules.Flow{Resource: "r", Threshold: 10, Throttle: &rules.Throttle{}}, 5, 500 * ms},
		{"throttle, whole threshold", rules.Flow{Resource: "r", Threshold: 10, Throttle: &rules.Throttle{}}, 10, 1000 * ms},
		// Cold: a third of 10/s, 300 ms per request.
		{"warm-up throttle, cold", rules.Flow{Resource: "r", Threshold: 10, WarmUp: &rules.WarmUp{Period: 10 * time.Second}, Throttle: &rules.Throttle{}}, 3, 900 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, clk := newTestEngine(t, 0)
			mustLoadFlow(t, g, tt.rule)
			require.True(t, try(g, "r", WithBatch(tt.batch)), "the idle schedule lets the batch start at once")
			clk.Set(tt.free - ms)
			be := refusal(t, g, "r")
			assert.Equal(t, time.Millisecond, be.RetryAfter, "the next caller waits for the whole batch")
			clk.Set(tt.free)
			require.True(t, try(g, "r"))
			require.False(t, try(g, "r"), "and takes its own slot")
		})
	}
}

// A batch larger than a flow rule's threshold can never pass: every kind of
// rule refuses it with the same reason, the batch as the observed value,
// and no RetryAfter, since retrying cannot help.
func TestFlowBatchLargerThanThresholdIsRefusedClearly(t *testing.T) {
	tests := []struct {
		name string
		rule rules.Flow
	}{
		{"reject", rules.Flow{Resource: "r", Threshold: 10}},
		{"reject, one minute", rules.Flow{Resource: "r", Threshold: 10, StatInterval: time.Minute}},
		{"exact", rules.Flow{Resource: "r", Threshold: 10, Exact: true}},
		{"concurrency", rules.Flow{Resource: "r", Threshold: 10, Metric: rules.Concurrency}},
		{"throttle", rules.Flow{Resource: "r", Threshold: 10, Throttle: &rules.Throttle{}}},
		{"throttle with a queue", rules.Flow{Resource: "r", Threshold: 10, Throttle: &rules.Throttle{MaxQueueing: 500 * time.Millisecond}}},
		{"warm-up", rules.Flow{Resource: "r", Threshold: 10, WarmUp: &rules.WarmUp{Period: time.Second}}},
		{"warm-up throttle", rules.Flow{Resource: "r", Threshold: 10, WarmUp: &rules.WarmUp{Period: time.Second}, Throttle: &rules.Throttle{MaxQueueing: time.Second}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, batch := range []int{11, maxBatch} {
				g, clk := newTestEngine(t, 0)
				mustLoadFlow(t, g, tt.rule)
				be := refusal(t, g, "r", WithBatch(batch))
				assert.Equal(t, "batch larger than threshold", be.Reason)
				assert.Equal(t, float64(batch), be.Observed)
				assert.Equal(t, float64(10), be.Threshold)
				assert.Zero(t, be.RetryAfter)
				// Nothing was taken: a single entry 1.2 s later passes, and
				// so does one at once.
				clk.Set(1200 * ms)
				require.True(t, try(g, "r"), "batch %d", batch)
			}
		})
	}
}

// A warm-up rule admits less than its threshold while cold: a batch above
// the cold allowance but within the threshold passes alone and is paid for
// in time, as Guava's acquire(n) is: the next batch still above the
// allowance may come n/allowance intervals later, and one at once is
// refused with that RetryAfter (throttle: the batch's slots end then).
// (With a 20 s warm-up the 15 tokens taken leave the allowance at 10.3.)
func TestFlowWarmUpBatchAboveTheColdAllowance(t *testing.T) {
	const T = 30 // cold allowance 10 per second
	for _, throttle := range []*rules.Throttle{nil, {}} {
		t.Run(behaviorName(throttle), func(t *testing.T) {
			g, clk := newTestEngine(t, 0)
			mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: T, WarmUp: &rules.WarmUp{Period: 20 * time.Second}, Throttle: throttle})
			require.True(t, try(g, "r", WithBatch(15)), "an idle resource admits the batch")
			be := refusal(t, g, "r", WithBatch(15))
			assert.Equal(t, 1500*time.Millisecond, be.RetryAfter, "15 at 10 per second")
			clk.Set(1500*ms - 1)
			be = refusal(t, g, "r", WithBatch(15))
			assert.Equal(t, time.Duration(1), be.RetryAfter)
			clk.Set(1500 * ms)
			require.True(t, try(g, "r", WithBatch(15)))
			// A batch above the threshold never passes.
			be = refusal(t, g, "r", WithBatch(T+1))
			assert.Equal(t, "batch larger than threshold", be.Reason)
		})
	}
}

// A warm-up rule whose traffic is all batches above the cold allowance
// warms up: 4/s with batches of 2, and 20/s with batches of 10 (cold
// allowance 4/3 and 20/3 per second, ColdFactor 3, WarmUpPeriod 10 s),
// tried every 10 ms for 60 s. Both pass at 0, 1.5, 2.9, 4.2 s, ... (each
// batch paid for at the allowance it found: 2/(4/3) = 1.5 s, then 2/(4/2.8)
// = 1.4 s, as the tokens it took warmed the resource), then at the
// threshold: two batches a second (reject, in the window of one second) or
// one every 500 ms (throttle). Before, not one of the 6,000 tries passed.
func TestFlowWarmUpTrafficOfBatchesAboveTheColdAllowance(t *testing.T) {
	for _, tc := range []struct {
		threshold float64
		batch     int
	}{{4, 2}, {20, 10}} {
		for _, throttle := range []*rules.Throttle{nil, {}} {
			t.Run(fmt.Sprintf("%v-per-s/batch-%d/%s", tc.threshold, tc.batch, behaviorName(throttle)), func(t *testing.T) {
				g, clk := newTestEngine(t, 0)
				mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: tc.threshold, WarmUp: &rules.WarmUp{Period: 10 * time.Second}, Throttle: throttle})
				var at []int64 // ms
				for now := int64(0); now < 60*int64(time.Second); now += 10 * ms {
					clk.Set(now)
					if try(g, "r", WithBatch(tc.batch)) {
						at = append(at, now/ms)
					}
				}
				require.Len(t, at, 103)
				assert.Equal(t, []int64{0, 1500, 2900, 4200, 5600, 6900, 8100, 9400, 10600}, at[:9], "cold: paid for at the allowance")
				if throttle == nil {
					assert.Equal(t, []int64{57600, 57610, 58600, 58610, 59600, 59610}, at[len(at)-6:], "warm: two batches a second")
				} else {
					assert.Equal(t, []int64{57700, 58200, 58700, 59200, 59700}, at[len(at)-5:], "warm: one batch every 500 ms")
				}
				s, _ := g.Snapshot("r")
				assert.Equal(t, uint64(103*tc.batch), s.TotalPass)
			})
		}
	}
}

// A pacing rule's refusal gives its wait and its queue bound in
// milliseconds as Observed and Threshold, and both with their units in the
// message.
func TestFlowQueueRefusalsSayTheirUnits(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 10, Throttle: &rules.Throttle{MaxQueueing: 50 * time.Millisecond}})
	require.True(t, try(g, "r")) // the next slot is at 100 ms
	clk.Set(44123)
	be := refusal(t, g, "r")
	assert.Equal(t, 99.955877, be.Observed)
	assert.Equal(t, float64(50), be.Threshold)
	assert.Equal(t, 49955877*time.Nanosecond, be.RetryAfter)
	assert.Equal(t, "wait 99.96ms exceeds max queueing 50ms", be.Reason)
	assert.Equal(t, `sluice: blocked by flow rule on "r": observed 99.955877, threshold 50 (wait 99.96ms exceeds max queueing 50ms), retry after 49.955877ms`, be.Error())
}

// Waits longer than a time.Duration can hold (tiny thresholds: one request
// every 31,700 years) saturate instead of wrapping around, and the first
// request of an idle schedule still passes; huge batches within a huge
// threshold are scheduled exactly. (The entries carry a deadline so that a
// regression that queues them fails instead of waiting for a clock that
// never moves.)
func TestFlowTinyThresholdsAndHugeBatchesSaturate(t *testing.T) {
	const longest = time.Duration(math.MaxInt64)
	refused := func(t *testing.T, g *Engine, opts ...EntryOption) *core.BlockError {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p, err := g.EntryContext(ctx, "r", opts...)
		p.Exit() // the zero Pass when refused: does nothing
		var be *core.BlockError
		require.ErrorAs(t, err, &be)
		require.NoError(t, be.Cause, "refused at once, not after queueing")
		return be
	}
	for _, rule := range []rules.Flow{
		{Resource: "r", Threshold: 1e-12, Throttle: &rules.Throttle{}},
		{Resource: "r", Threshold: 1e-12, Throttle: &rules.Throttle{MaxQueueing: time.Hour}},
		{Resource: "r", Threshold: 1e-12, Throttle: &rules.Throttle{}, StatInterval: time.Hour},
		{Resource: "r", Threshold: 1e-12, WarmUp: &rules.WarmUp{Period: time.Second}, Throttle: &rules.Throttle{}},
		{Resource: "r", Threshold: 1e-12, Bucket: &rules.Bucket{Burst: 1}, Throttle: &rules.Throttle{MaxQueueing: time.Hour}},
	} {
		t.Run(fmt.Sprintf("%+v", rule), func(t *testing.T) {
			g, clk := newTestEngine(t, 0)
			mustLoadFlow(t, g, rule)
			require.True(t, try(g, "r"), "the first request of an idle schedule")
			for _, step := range []time.Duration{time.Millisecond, 1000 * time.Hour} {
				clk.Advance(step)
				be := refused(t, g)
				assert.Equal(t, longest, be.RetryAfter)
				assert.Greater(t, be.Observed, 9e14, "the wait in ms, > 31,700 years")
				assert.Contains(t, be.Reason, "wait more than 2562047h")
			}
		})
	}
	// 2^30 requests at 1e12 per hour take 3.87 s of schedule.
	g, _ := newTestEngine(t, 0)
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 1e12, StatInterval: time.Hour, Throttle: &rules.Throttle{MaxQueueing: time.Second}})
	require.True(t, try(g, "r", WithBatch(maxBatch)))
	be := refused(t, g)
	assert.Equal(t, time.Duration(math.Round(float64(maxBatch)*3.6))-time.Second, be.RetryAfter)
}

// obeyRetryAfter checks the refusal be of a batch entry at the clock's
// reading t: its RetryAfter d is positive, an entry at t+d-1 is still
// refused, and one at t+d passes. Refusals take nothing, so the probe at
// t+d-1 leaves the state as it was.
func obeyRetryAfter(t *testing.T, g *Engine, clk *sluicetest.ManualClock, res string, batch int, be *core.BlockError, msg string) {
	t.Helper()
	obeyRetryAfterWithin(t, g, clk, res, batch, be, msg, 1)
}

// obeyRetryAfterWithin is obeyRetryAfter for a RetryAfter rounded up to a
// multiple of precision: it is one, an entry precision before it is
// refused (the exact instant is later: the rounding is the least), and one
// at it passes. A QPS reject rule's RetryAfter is whole milliseconds
// (flow.retryMs).
func obeyRetryAfterWithin(t *testing.T, g *Engine, clk *sluicetest.ManualClock, res string, batch int, be *core.BlockError, msg string, precision time.Duration) {
	t.Helper()
	d := int64(be.RetryAfter)
	require.Positive(t, d, "%s: %v", msg, be)
	require.Zero(t, d%int64(precision), "%s: RetryAfter %v is not a multiple of %v", msg, be.RetryAfter, precision)
	at := clk.Nanotime()
	clk.Set(at + d - int64(precision))
	require.False(t, try(g, res, WithBatch(batch)), "%s: admitted %v before RetryAfter %v", msg, precision, be.RetryAfter)
	clk.Set(at + d)
	require.True(t, try(g, res, WithBatch(batch)), "%s: refused at RetryAfter %v", msg, be.RetryAfter)
}

// A client that obeys a QPS refusal's RetryAfter exactly is admitted on its
// first retry, and not a millisecond earlier (RetryAfter is rounded up to
// the millisecond, the least such rounding): the retry is when enough of the
// window's oldest buckets have slid out, whatever the fill pattern, for
// windows of one second and one minute, through the flow gate (a lone
// one-second rule) and through the rule set's checks (beside an isolation
// rule).
func TestFlowRetryAfterAdmitsOnTheFirstRetry(t *testing.T) {
	type arrival struct {
		at    int64 // fraction of the interval, in thousandths
		batch int
	}
	patterns := map[string][]arrival{
		"one burst":               {{0, 10}},
		"burst at a bucket's end": {{99, 10}},
		"spread over the window":  {{0, 2}, {100, 2}, {300, 2}, {550, 2}, {950, 2}},
		"heavy tail":              {{0, 1}, {800, 4}, {999, 5}},
		"heavy head":              {{0, 7}, {10, 2}, {990, 1}},
	}
	for _, interval := range []time.Duration{time.Second, time.Minute} {
		for _, withIsolation := range []bool{false, true} {
			for name, pattern := range patterns {
				for _, batch := range []int{1, 3, 10} {
					msg := fmt.Sprintf("%v, isolation %v, %s, batch %d", interval, withIsolation, name, batch)
					g, clk := newTestEngine(t, int64(time.Hour))
					mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 10, StatInterval: interval})
					if withIsolation {
						_, err := loadFlow(g, append(g.Rules().Flow, rules.Flow{Metric: rules.Concurrency, Resource: "r", Threshold: 1000}))
						require.NoError(t, err)
					}
					start := clk.Nanotime()
					for _, a := range pattern {
						clk.Set(start + a.at*int64(interval)/1000)
						require.True(t, try(g, "r", WithBatch(a.batch)), msg)
					}
					be := refusal(t, g, "r", WithBatch(batch))
					obeyRetryAfterWithin(t, g, clk, "r", batch, be, msg, time.Millisecond)
				}
			}
		}
	}
}

// The same with random arrivals over many windows: every refusal's
// RetryAfter is obeyed at once, and the history goes on from there.
func TestFlowRetryAfterUnderRandomArrivals(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		for _, interval := range []time.Duration{time.Second, time.Minute} {
			for _, exact := range []bool{false, true} {
				rng := rand.New(rand.NewSource(seed))
				g, clk := newTestEngine(t, int64(time.Hour))
				mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 17, StatInterval: interval, Exact: exact})
				retried := 0
				for i := 0; i < 2000; i++ {
					clk.Advance(time.Duration(rng.Int63n(int64(interval) / 40)))
					batch := 1 + rng.Intn(6)
					p, err := g.Entry("r", WithBatch(batch))
					if err == nil {
						p.Exit()
						continue
					}
					var be *core.BlockError
					require.ErrorAs(t, err, &be)
					precision := time.Millisecond // a reject rule's
					if exact {
						precision = time.Nanosecond
					}
					obeyRetryAfterWithin(t, g, clk, "r", batch, be, fmt.Sprintf("seed %d, %v, exact %v, entry %d", seed, interval, exact, i), precision)
					retried++
				}
				require.Greater(t, retried, 100)
			}
		}
	}
}

// A warm-up rule's RetryAfter is computed the same way with its current
// allowance (exact while the allowance holds), and an associated-resource
// rule's is when the other resource's window falls to the threshold if it
// gets no more traffic.
func TestFlowRetryAfterOfWarmUpAndAssociatedRules(t *testing.T) {
	t.Run("warm-up", func(t *testing.T) {
		g, clk := newTestEngine(t, 0)
		mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 30, WarmUp: &rules.WarmUp{Period: 10 * time.Second}})
		for _, at := range []int64{0, 250, 500} { // cold: 10 per second
			clk.Set(at * ms)
			require.True(t, try(g, "r", WithBatch(3)))
		}
		clk.Set(700 * ms)
		be := refusal(t, g, "r", WithBatch(3))
		assert.Equal(t, "warming up", be.Reason)
		assert.Equal(t, 300*time.Millisecond, be.RetryAfter, "the batch of 0 ms leaves at 1,000 ms")
		obeyRetryAfter(t, g, clk, "r", 3, be, "warm-up")
	})
	t.Run("associated", func(t *testing.T) {
		g, clk := newTestEngine(t, 0)
		mustLoadFlow(t, g, rules.Flow{Resource: "write", RefResource: "read", Threshold: 10})
		for _, at := range []int64{0, 300, 600} {
			clk.Set(at * ms)
			for i := 0; i < 5; i++ {
				require.True(t, try(g, "read"))
			}
		}
		clk.Set(650 * ms)
		be := refusal(t, g, "write")
		assert.Equal(t, 350*time.Millisecond, be.RetryAfter, "read's first five leave at 1,000 ms")
		obeyRetryAfter(t, g, clk, "write", 1, be, "associated")
	})
}

// admittedIn returns the most admissions found in any interval [s, s+span)
// of the sorted admission times at (one time per admitted request).
func admittedIn(at []int64, span int64) int {
	most := 0
	for i, j := 0, 0; i < len(at); i++ {
		for j < len(at) && at[j] < at[i]+span {
			j++
		}
		if j-i > most {
			most = j - i
		}
	}
	return most
}

// burst enters n single requests at the clock's reading and returns how
// many passed, appending their times to at.
func burst(g *Engine, clk *sluicetest.ManualClock, n int, at *[]int64) int {
	passed := 0
	for i := 0; i < n; i++ {
		if try(g, "r") {
			passed++
			*at = append(*at, clk.Nanotime())
		}
	}
	return passed
}

// The bucketed window's bound is reached: T admitted in the last
// nanosecond of one bucket and T more at the start of the bucket W - w
// later, 2T within an interval shorter than the window. The exact window
// refuses the second burst until the first is a whole window old.
func TestFlowSlidingBoundIsReached(t *testing.T) {
	const T = 100
	second := int64(time.Second)
	t.Run("buckets", func(t *testing.T) {
		g, clk := newTestEngine(t, 0)
		mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: T})
		var at []int64
		clk.Set(100*ms - 1)
		require.Equal(t, T, burst(g, clk, T, &at))
		clk.Set(second)
		require.Equal(t, T, burst(g, clk, T, &at), "the first burst's bucket has left the window")
		require.Equal(t, 2*T, admittedIn(at, 900*ms+2), "2T within 900 ms and 2 ns")
	})
	t.Run("exact", func(t *testing.T) {
		g, clk := newTestEngine(t, 0)
		mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: T, Exact: true})
		var at []int64
		clk.Set(100*ms - 1)
		require.Equal(t, T, burst(g, clk, T, &at))
		clk.Set(second)
		be := refusal(t, g, "r")
		assert.Equal(t, float64(T), be.Observed)
		assert.Equal(t, 100*time.Millisecond-1, be.RetryAfter, "when the first burst is a window old")
		clk.Set(1100*ms - 2)
		require.False(t, try(g, "r"))
		clk.Set(1100*ms - 1)
		require.Equal(t, T, burst(g, clk, T+5, &at))
		require.Equal(t, T, admittedIn(at, second))
	})
}

// slidingBound is the most admissions a window of B buckets of w ns
// allows in an interval of span ns: the interval touches at most
// ceil(span/w)+1 buckets, and any B consecutive buckets hold at most T.
func slidingBound(T, B int, w, span int64) int {
	touched := int((span+w-1)/w) + 1
	return T * ((touched + B - 1) / B)
}

// Random bursty arrivals, most of them at bucket edges, never admit more
// than the bound in any interval: for the bucketed window the bound of
// slidingBound (T for an interval of 0.9 W, 2T for W), for the exact one
// T per whole or partial window.
func TestFlowSlidingBoundHoldsForRandomArrivals(t *testing.T) {
	const T = 20
	for _, exact := range []bool{false, true} {
		for _, interval := range []time.Duration{time.Second, time.Minute} {
			for seed := int64(1); seed <= 3; seed++ {
				W := int64(interval)
				w := W / 10
				g, clk := newTestEngine(t, 0)
				mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: T, StatInterval: interval, Exact: exact})
				rng := rand.New(rand.NewSource(seed))
				var at []int64
				now := int64(0)
				for i := 0; i < 3000; i++ {
					switch rng.Intn(4) {
					case 0: // the last nanosecond of a bucket
						now = (now/w+1)*w - 1
					case 1: // the first of the next
						now = (now/w + 1) * w
					default:
						now += rng.Int63n(w / 2)
					}
					clk.Set(now)
					batch := 1 + rng.Intn(4)
					if try(g, "r", WithBatch(batch)) {
						for k := 0; k < batch; k++ {
							at = append(at, now)
						}
					}
				}
				for _, span := range []int64{9 * w, W, W + w/2, 2 * W} {
					want := slidingBound(T, 10, w, span)
					if exact {
						want = T * int((span+W-1)/W)
					}
					got := admittedIn(at, span)
					require.LessOrEqual(t, got, want, "exact %v, %v, seed %d, span %v", exact, interval, seed, time.Duration(span))
					if !exact && span == 9*w {
						require.Equal(t, T, got, "an interval of 0.9 W holds T at most, and saturation reaches it")
					}
				}
				if exact {
					require.Equal(t, T, admittedIn(at, W), "exact: saturation reaches T, never more")
				}
			}
		}
	}
}

// An exact rule admits exactly its threshold in a window however many
// goroutines race for it (half of them entering batches of two), and
// exactly as many again once the first admissions are a window old.
func TestFlowExactUnderConcurrency(t *testing.T) {
	const T = 500
	g, clk := newTestEngine(t, int64(time.Hour))
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: T, Exact: true})
	race := func() int64 {
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				batch := 1 + w%2
				for i := 0; i < 200; i++ {
					if try(g, "r", WithBatch(batch)) {
						admitted.Add(int64(batch))
					}
				}
			}()
		}
		wg.Wait()
		return admitted.Load()
	}
	require.Equal(t, int64(T), race())
	clk.Advance(time.Second - 1)
	require.Equal(t, int64(0), race())
	clk.Advance(1)
	require.Equal(t, int64(T), race())
}

// A reloaded exact rule keeps the admissions of the rule it replaces, at a
// new threshold too, and an admission that a later check refused is given
// back.
func TestFlowExactAcrossReloadsAndLaterRefusals(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	exact := func(T float64) rules.Flow { return rules.Flow{Resource: "r", Threshold: T, Exact: true} }
	mustLoadFlow(t, g, exact(10))
	require.Equal(t, 10, admitted(g, "r"))
	clk.Set(500 * ms)
	mustLoadFlow(t, g, exact(15))
	require.Equal(t, 5, admitted(g, "r"), "15 in the window, not 10 + 15")
	mustLoadFlow(t, g, exact(5))
	clk.Set(1000 * ms) // the ten of 0 ms are a window old; the five of 500 ms are not
	require.Equal(t, 0, admitted(g, "r"))
	clk.Set(1500 * ms)
	require.Equal(t, 5, admitted(g, "r"))

	require.NoError(t, g.RegisterSlot(&refuseFirst{n: 3}, 0))
	clk.Set(2500 * ms)
	for i := 0; i < 3; i++ {
		be := refusal(t, g, "r", WithBatch(2))
		require.Equal(t, core.BlockCustom, be.Type)
	}
	require.Equal(t, 5, admitted(g, "r"), "the refused batches were given back")
}

// Concurrent batches above the cold allowance at one instant: exactly one
// passes (it is alone in the window, and the others find it paid for
// later), with reject and with throttle.
func TestFlowWarmUpConcurrentBatchesAboveTheAllowance(t *testing.T) {
	for _, throttle := range []*rules.Throttle{nil, {}} {
		t.Run(behaviorName(throttle), func(t *testing.T) {
			g, _ := newTestEngine(t, int64(time.Hour))
			mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 4, WarmUp: &rules.WarmUp{Period: 10 * time.Second}, Throttle: throttle})
			var passed atomic.Int64
			var wg sync.WaitGroup
			for i := 0; i < 16; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if try(g, "r", WithBatch(2)) {
						passed.Add(1)
					}
				}()
			}
			wg.Wait()
			assert.Equal(t, int64(1), passed.Load())
		})
	}
}
