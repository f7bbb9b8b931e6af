package degrade

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"sync/atomic"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errBoom = errors.New("boom")

const ms = time.Millisecond

// recorder is a listener that keeps every transition.
type recorder struct {
	mu sync.Mutex
	ts []Transition
}

func (r *recorder) listen(t Transition) {
	r.mu.Lock()
	r.ts = append(r.ts, t)
	r.mu.Unlock()
}

// moves returns the transitions as "from>to" strings.
func (r *recorder) moves() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.ts))
	for i, t := range r.ts {
		out[i] = t.From.String() + ">" + t.To.String()
	}
	return out
}

func (r *recorder) last() Transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ts[len(r.ts)-1]
}

// fixture is one breaker driven by a manual clock.
type fixture struct {
	t   *testing.T
	clk *sluicetest.ManualClock
	hub *Hub
	rec *recorder
	b   *Breaker
}

func newFixture(t *testing.T, r rules.CircuitBreaker) *fixture {
	t.Helper()
	f := &fixture{t: t, clk: sluicetest.NewManualClock(int64(time.Hour)), hub: NewHub(nil), rec: &recorder{}}
	f.hub.AddListener(f.rec.listen)
	b, err := NewBreaker(r, f.hub)
	require.NoError(t, err)
	f.b = b
	return f
}

// enter runs a Check at the clock's reading.
func (f *fixture) enter() (*entry.Context, *core.BlockError) {
	ec := &entry.Context{Resource: f.b.rule.Resource, Batch: 1, Start: f.clk.Nanotime()}
	return ec, f.b.Check(ec)
}

// mustEnter runs a Check that must pass.
func (f *fixture) mustEnter() *entry.Context {
	f.t.Helper()
	ec, be := f.enter()
	require.Nil(f.t, be, "Check at %v refused: %v", f.clk.Elapsed(), be)
	require.Equal(f.t, 1, ec.Tickets())
	return ec
}

// mustBlock runs a Check that must be refused by the breaker.
func (f *fixture) mustBlock() *core.BlockError {
	f.t.Helper()
	ec, be := f.enter()
	require.NotNil(f.t, be, "Check at %v passed, want a refusal (state %v)", f.clk.Elapsed(), f.b.State())
	require.Equal(f.t, 0, ec.Tickets())
	assert.Equal(f.t, core.BlockDegrade, be.Type)
	assert.True(f.t, errors.Is(be, core.ErrBlocked))
	return be
}

// exit ends ec at the clock's reading with err.
func (f *fixture) exit(ec *entry.Context, err error) {
	ec.ReleaseTickets(entry.ExitInfo{Start: ec.Start, End: f.clk.Nanotime(), Batch: ec.Batch, Err: err})
}

// call makes one call that lasts rt and ends with err.
func (f *fixture) call(rt time.Duration, err error) {
	f.t.Helper()
	ec := f.mustEnter()
	f.clk.Advance(rt)
	f.exit(ec, err)
}

// trip opens a breaker whose rule is error count 1 with min 1.
func (f *fixture) trip() {
	f.t.Helper()
	f.call(0, errBoom)
	require.Equal(f.t, Open, f.b.State())
}

type outcome struct {
	rt   time.Duration
	err  error
	want State // state after the call exits
}

func TestStrategyOpensExactlyAtThreshold(t *testing.T) {
	ok := func(want State) outcome { return outcome{rt: ms, want: want} }
	bad := func(want State) outcome { return outcome{rt: ms, err: errBoom, want: want} }
	slowCall := func(rt time.Duration, want State) outcome { return outcome{rt: rt, want: want} }
	const C, O = Closed, Open
	tests := []struct {
		name         string
		rule         rules.CircuitBreaker
		calls        []outcome
		wantSnapshot float64 // of the Closed>Open transition, if any
	}{
		{
			name:         "error ratio opens when the ratio exceeds the threshold",
			rule:         rules.CircuitBreaker{Strategy: rules.ErrorRatio, Threshold: 0.5, MinRequestAmount: 4},
			calls:        []outcome{ok(C), bad(C), ok(C), bad(C), bad(O)},
			wantSnapshot: 0.6,
		},
		{
			name:  "error ratio below min requests never opens",
			rule:  rules.CircuitBreaker{Strategy: rules.ErrorRatio, Threshold: 0.1, MinRequestAmount: 6},
			calls: []outcome{bad(C), bad(C), bad(C), bad(C), bad(C)},
		},
		{
			name:         "error ratio opens at min requests",
			rule:         rules.CircuitBreaker{Strategy: rules.ErrorRatio, Threshold: 0.1, MinRequestAmount: 6},
			calls:        []outcome{bad(C), bad(C), bad(C), bad(C), bad(C), bad(O)},
			wantSnapshot: 1,
		},
		{
			name:         "default min requests is five",
			rule:         rules.CircuitBreaker{Strategy: rules.ErrorRatio, Threshold: 0.5},
			calls:        []outcome{bad(C), bad(C), bad(C), bad(C), bad(O)},
			wantSnapshot: 1,
		},
		{
			name:         "error ratio threshold 0 opens on the first error",
			rule:         rules.CircuitBreaker{Strategy: rules.ErrorRatio, Threshold: 0, MinRequestAmount: 3},
			calls:        []outcome{ok(C), ok(C), ok(C), ok(C), bad(O)},
			wantSnapshot: 0.2,
		},
		{
			name:  "error ratio threshold 1 stays closed while any call succeeded",
			rule:  rules.CircuitBreaker{Strategy: rules.ErrorRatio, Threshold: 1, MinRequestAmount: 2},
			calls: []outcome{bad(C), ok(C), bad(C), bad(C), bad(C)},
		},
		{
			name:         "error ratio threshold 1 opens when every call failed",
			rule:         rules.CircuitBreaker{Strategy: rules.ErrorRatio, Threshold: 1, MinRequestAmount: 2},
			calls:        []outcome{bad(C), bad(O)},
			wantSnapshot: 1,
		},
		{
			name:  "error ratio ignores slow calls",
			rule:  rules.CircuitBreaker{Strategy: rules.ErrorRatio, Threshold: 0, MinRequestAmount: 1},
			calls: []outcome{slowCall(time.Second, C), slowCall(time.Second, C)},
		},
		{
			name:         "error count opens when errors reach the threshold",
			rule:         rules.CircuitBreaker{Strategy: rules.ErrorCount, Threshold: 3, MinRequestAmount: 1},
			calls:        []outcome{bad(C), ok(C), bad(C), ok(C), bad(O)},
			wantSnapshot: 3,
		},
		{
			name:         "error count waits for min requests, then opens on a success",
			rule:         rules.CircuitBreaker{Strategy: rules.ErrorCount, Threshold: 3, MinRequestAmount: 5},
			calls:        []outcome{bad(C), bad(C), bad(C), ok(C), ok(O)},
			wantSnapshot: 3,
		},
		{
			name:         "slow ratio counts only RT above the max",
			rule:         rules.CircuitBreaker{Strategy: rules.SlowRequestRatio, Threshold: 0.5, MaxAllowedRT: 100 * ms, MinRequestAmount: 2},
			calls:        []outcome{slowCall(100*ms, C), slowCall(100*ms+1, C), slowCall(150*ms, O)},
			wantSnapshot: 2.0 / 3,
		},
		{
			name:  "slow ratio ignores errors",
			rule:  rules.CircuitBreaker{Strategy: rules.SlowRequestRatio, Threshold: 0, MaxAllowedRT: 100 * ms, MinRequestAmount: 1},
			calls: []outcome{bad(C), bad(C), bad(C)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.rule.Resource, tt.rule.RetryTimeout = "db", time.Second
			f := newFixture(t, tt.rule)
			for i, c := range tt.calls {
				f.call(c.rt, c.err)
				require.Equal(t, c.want, f.b.State(), "state after call %d", i)
			}
			if tt.calls[len(tt.calls)-1].want != Open {
				assert.Empty(t, f.rec.moves())
				return
			}
			require.Equal(t, []string{"closed>open"}, f.rec.moves())
			tr := f.rec.last()
			assert.InDelta(t, tt.wantSnapshot, tr.Snapshot, 1e-12)
			assert.Equal(t, f.clk.Nanotime(), tr.At)
			assert.Equal(t, "db", tr.Resource)
			assert.Equal(t, tt.rule, tr.Rule)
		})
	}
}

func TestBatchCountsAsManyCalls(t *testing.T) {
	f := newFixture(t, rules.CircuitBreaker{Resource: "db", Strategy: rules.ErrorCount, Threshold: 4, MinRequestAmount: 4, RetryTimeout: time.Second})
	ec := &entry.Context{Resource: "db", Batch: 3, Start: f.clk.Nanotime()}
	require.Nil(t, f.b.Check(ec))
	f.exit(ec, errBoom)
	require.Equal(t, Closed, f.b.State(), "3 errors < 4")
	ec = &entry.Context{Resource: "db", Batch: 2, Start: f.clk.Nanotime()}
	require.Nil(t, f.b.Check(ec))
	f.exit(ec, errBoom)
	require.Equal(t, Open, f.b.State(), "5 errors >= 4")
	assert.Equal(t, 5.0, f.rec.last().Snapshot)
}

func TestWindowSlides(t *testing.T) {
	f := newFixture(t, rules.CircuitBreaker{Resource: "db", Strategy: rules.ErrorCount, Threshold: 3, MinRequestAmount: 1, RetryTimeout: time.Second})
	f.clk.Set(int64(2 * time.Hour)) // start of a bucket
	f.call(0, errBoom)
	f.call(0, errBoom)
	f.clk.Advance(time.Second) // the bucket holding both errors has left the one-second window
	f.call(0, errBoom)
	f.call(0, errBoom)
	require.Equal(t, Closed, f.b.State(), "only two errors in the window")
	f.clk.Advance(time.Second - 100*ms) // the last bucket of the window
	f.call(0, errBoom)
	require.Equal(t, Open, f.b.State(), "three errors in the window")
}

func TestGoodExitsTripOnlyWhileABadCallIsInTheWindow(t *testing.T) {
	tests := []struct {
		name      string
		goodAfter time.Duration // when the good calls exit, after the bad one
		want      State
	}{
		{"bad call in the window's oldest bucket", 900 * ms, Open},
		{"bad call has left the window", time.Second, Closed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, rules.CircuitBreaker{Resource: "db", Strategy: rules.ErrorCount, Threshold: 1, MinRequestAmount: 3, RetryTimeout: time.Second})
			f.clk.Set(int64(2 * time.Hour)) // start of a bucket
			f.call(0, errBoom)
			f.clk.Advance(tt.goodAfter)
			f.call(0, nil)
			require.Equal(t, Closed, f.b.State(), "two calls, below the minimum")
			f.call(0, nil)
			assert.Equal(t, tt.want, f.b.State())
		})
	}
}

func TestClosingStartsAFreshWindow(t *testing.T) {
	f := newFixture(t, rules.CircuitBreaker{Resource: "db", Strategy: rules.ErrorCount, Threshold: 2, MinRequestAmount: 1, RetryTimeout: time.Second})
	late := f.mustEnter() // admitted while closed, exits while open
	f.call(0, errBoom)
	f.call(0, errBoom)
	require.Equal(t, Open, f.b.State())
	f.exit(late, errBoom) // not counted anywhere
	f.clk.Advance(time.Second)
	f.call(0, nil) // the probe
	require.Equal(t, Closed, f.b.State())
	f.call(0, errBoom)
	require.Equal(t, Closed, f.b.State(), "one error in the fresh window")
	f.call(0, errBoom)
	require.Equal(t, Open, f.b.State())
	assert.Equal(t, []string{"closed>open", "open>half-open", "half-open>closed", "closed>open"}, f.rec.moves())
}

func TestOpenRejectsUntilRetryTimeout(t *testing.T) {
	r := rules.CircuitBreaker{ID: "cb1", Resource: "db", Strategy: rules.ErrorCount, Threshold: 1, MinRequestAmount: 1, RetryTimeout: 5 * time.Second}
	f := newFixture(t, r)
	f.trip()
	opened := f.clk.Nanotime()
	tests := []struct {
		at        time.Duration // after opening
		wantRetry time.Duration
	}{
		{0, 5 * time.Second},
		{time.Second, 4 * time.Second},
		{5*time.Second - time.Millisecond - 1, 2 * time.Millisecond}, // rounded up to the millisecond
		{5*time.Second - 1, time.Millisecond},                        // 1 ns
	}
	for _, tt := range tests {
		f.clk.Set(opened + int64(tt.at))
		be := f.mustBlock()
		assert.Equal(t, tt.wantRetry, be.RetryAfter, "RetryAfter at open+%v", tt.at)
		assert.Equal(t, "db", be.Resource)
		assert.Equal(t, 1.0, be.Observed)
		assert.Equal(t, 1.0, be.Threshold)
		assert.Equal(t, reasonOpen, be.Reason)
		assert.Equal(t, core.RuleRef{ID: r.ID, Metric: string(cmp.Or(r.Strategy, rules.SlowRequestRatio))}, be.Rule)
		assert.Equal(t, Open, f.b.State())
	}
	f.clk.Set(opened + int64(5*time.Second))
	f.mustEnter()
	assert.Equal(t, HalfOpen, f.b.State())
	assert.Equal(t, []string{"closed>open", "open>half-open"}, f.rec.moves())
	assert.Equal(t, f.clk.Nanotime(), f.rec.last().At)
}

func TestHalfOpenAdmitsExactlyNOfManyConcurrentCallers(t *testing.T) {
	for _, n := range []int{1, 3, 10} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			f := newFixture(t, rules.CircuitBreaker{Resource: "db", Strategy: rules.ErrorCount, Threshold: 1, MinRequestAmount: 1, RetryTimeout: time.Second, Probes: n})
			f.trip()
			f.clk.Advance(time.Second)
			const callers = 100
			var (
				wg      sync.WaitGroup
				start   = make(chan struct{})
				passed  = make(chan *entry.Context, callers)
				refused = make(chan *core.BlockError, callers)
			)
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					ec, be := f.enter()
					if be != nil {
						refused <- be
						return
					}
					passed <- ec
				}()
			}
			close(start)
			wg.Wait()
			close(passed)
			close(refused)
			require.Len(t, passed, n)
			require.Len(t, refused, callers-n)
			for be := range refused {
				assert.Equal(t, core.BlockDegrade, be.Type)
				assert.Equal(t, reasonHalfOpen, be.Reason)
				assert.Equal(t, float64(n), be.Threshold)
			}
			require.Equal(t, HalfOpen, f.b.State())
			for ec := range passed {
				f.exit(ec, nil)
			}
			assert.Equal(t, Closed, f.b.State())
			assert.Equal(t, []string{"closed>open", "open>half-open", "half-open>closed"}, f.rec.moves())
			assert.Equal(t, float64(n), f.rec.last().Snapshot)
		})
	}
}

func TestProbeOutcomes(t *testing.T) {
	type probe struct {
		rt  time.Duration
		err error
	}
	good := probe{rt: ms}
	tests := []struct {
		name     string
		strategy rules.BreakerStrategy
		probes   []probe // three probes, all admitted first, then exited in order
		want     State
		snapshot float64 // of the last transition
	}{
		{"three successes close", rules.ErrorCount, []probe{good, good, good}, Closed, 3},
		{"a failure reopens", rules.ErrorCount, []probe{good, {rt: 7 * ms, err: errBoom}, good}, Open, 7},
		{"a slow probe reopens a slow-ratio breaker", rules.SlowRequestRatio, []probe{{rt: 101 * ms}, good, good}, Open, 101},
		{"an error reopens a slow-ratio breaker", rules.SlowRequestRatio, []probe{good, good, {rt: ms, err: errBoom}}, Open, 1},
		{"a slow probe is a success for an error breaker", rules.ErrorRatio, []probe{{rt: 900 * ms}, good, good}, Closed, 3},
		{"a probe of the whole interval fails", rules.ErrorRatio, []probe{good, {rt: time.Second}, good}, Open, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rules.CircuitBreaker{Resource: "db", Strategy: tt.strategy, MinRequestAmount: 1, RetryTimeout: 10 * time.Second, Probes: 3}
			tripRT := time.Duration(0)
			if tt.strategy == rules.ErrorCount {
				r.Threshold = 1
			}
			if tt.strategy == rules.SlowRequestRatio {
				r.MaxAllowedRT, tripRT = 100*ms, 200*ms
			}
			f := newFixture(t, r)
			f.call(tripRT, errBoom)
			require.Equal(t, Open, f.b.State())
			f.clk.Advance(10 * time.Second)
			base := f.clk.Nanotime()
			ecs := []*entry.Context{f.mustEnter(), f.mustEnter(), f.mustEnter()}
			f.mustBlock()
			for i, p := range tt.probes {
				ecs[i].ReleaseTickets(entry.ExitInfo{Start: base, End: base + int64(p.rt), Batch: 1, Err: p.err})
				if f.b.State() == Open {
					break
				}
				if i < 2 {
					require.Equal(t, HalfOpen, f.b.State(), "after probe %d", i)
				}
			}
			require.Equal(t, tt.want, f.b.State())
			assert.InDelta(t, tt.snapshot, f.rec.last().Snapshot, 1e-9)
			if tt.want == Closed {
				assert.Equal(t, []string{"closed>open", "open>half-open", "half-open>closed"}, f.rec.moves())
				f.mustEnter()
				return
			}
			// Reopened for another full retry timeout from the failure.
			assert.Equal(t, []string{"closed>open", "open>half-open", "half-open>open"}, f.rec.moves())
			reopened := f.rec.last().At
			for i := range ecs { // the other probes' exits change nothing
				f.exit(ecs[i], nil)
			}
			require.Equal(t, Open, f.b.State())
			f.clk.Set(reopened + int64(10*time.Second) - 1)
			be := f.mustBlock()
			assert.Equal(t, time.Millisecond, be.RetryAfter, "1 ns to wait, rounded up to the millisecond")
			f.clk.Advance(1)
			f.mustEnter()
			assert.Equal(t, HalfOpen, f.b.State())
		})
	}
}

func TestBlockedProbeGivesItsSlotBack(t *testing.T) {
	f := newFixture(t, rules.CircuitBreaker{Resource: "db", Strategy: rules.ErrorCount, Threshold: 1, MinRequestAmount: 1, RetryTimeout: time.Second})
	f.trip()
	f.clk.Advance(time.Second)
	probe := f.mustEnter() // opens the round
	f.mustBlock()
	// A later slot refuses the probe's entry.
	probe.ReleaseTickets(entry.ExitInfo{Start: probe.Start, End: probe.Start, Batch: 1, Blocked: true})
	require.Equal(t, HalfOpen, f.b.State())
	again := f.mustEnter()
	f.mustBlock()
	f.exit(again, nil)
	assert.Equal(t, Closed, f.b.State())
	assert.Equal(t, []string{"closed>open", "open>half-open", "half-open>closed"}, f.rec.moves())
}

func TestProbesThatNeverExitDoNotWedgeTheBreaker(t *testing.T) {
	r := rules.CircuitBreaker{Resource: "db", Strategy: rules.ErrorCount, Threshold: 1, MinRequestAmount: 1, RetryTimeout: 3 * time.Second, StatInterval: time.Second, Probes: 2}
	f := newFixture(t, r)
	f.trip()
	f.clk.Advance(3 * time.Second)
	first := f.mustEnter()
	f.clk.Advance(300*ms + 1) // the deadline counts from the last admission, rounded up to a millisecond
	second := f.mustEnter()
	lastAdmitted := f.clk.Nanotime()

	// One probe out with a free slot is not stuck: nothing expires.
	f.clk.Set(lastAdmitted + int64(time.Second) - int64(ms))
	be := f.mustBlock()
	assert.Equal(t, reasonHalfOpen, be.Reason)
	assert.Equal(t, 2.0, be.Observed)
	require.Equal(t, HalfOpen, f.b.State())

	f.clk.Set(lastAdmitted + int64(time.Second) + int64(ms) - 1) // the admission time was rounded up to 301 ms
	be = f.mustBlock()
	assert.Equal(t, reasonOpen, be.Reason, "probes given up: open again")
	assert.Equal(t, 3*time.Second, be.RetryAfter)
	require.Equal(t, Open, f.b.State())
	assert.Equal(t, []string{"closed>open", "open>half-open", "half-open>open"}, f.rec.moves())
	assert.InDelta(t, 1000.0, f.rec.last().Snapshot, 1e-9)

	// Their late exits are ignored, even successful ones.
	f.exit(first, nil)
	f.exit(second, nil)
	require.Equal(t, Open, f.b.State())

	f.clk.Advance(3 * time.Second)
	f.call(0, nil)
	f.call(0, nil)
	assert.Equal(t, Closed, f.b.State())
}

func TestIdleHalfOpenWaitsForProbes(t *testing.T) {
	f := newFixture(t, rules.CircuitBreaker{Resource: "db", Strategy: rules.ErrorCount, Threshold: 1, MinRequestAmount: 1, RetryTimeout: time.Second, Probes: 2})
	f.trip()
	f.clk.Advance(time.Second)
	f.call(ms, nil) // one of two probes succeeded; no other call for a long time
	f.clk.Advance(time.Hour)
	require.Equal(t, HalfOpen, f.b.State())
	f.call(ms, nil)
	assert.Equal(t, Closed, f.b.State())
}

func TestErrorClassifier(t *testing.T) {
	hub := NewHub(func(err error) bool { return !errors.Is(err, context.Canceled) })
	b, err := NewBreaker(rules.CircuitBreaker{Resource: "db", Strategy: rules.ErrorCount, Threshold: 2, MinRequestAmount: 1, RetryTimeout: time.Second}, hub)
	require.NoError(t, err)
	call := func(now int64, err error) {
		ec := &entry.Context{Resource: "db", Batch: 1, Start: now}
		require.Nil(t, b.Check(ec))
		ec.ReleaseTickets(entry.ExitInfo{Start: now, End: now, Batch: 1, Err: err})
	}
	for range 5 {
		call(0, context.Canceled)
		call(0, fmt.Errorf("wrapped: %w", context.Canceled))
	}
	require.Equal(t, Closed, b.State())
	call(0, context.DeadlineExceeded)
	call(0, errBoom)
	require.Equal(t, Open, b.State())
	// A probe ending with an ignored error succeeds.
	call(int64(time.Second), context.Canceled)
	assert.Equal(t, Closed, b.State())
}

func TestListenersSeeEveryTransitionOnceInOrder(t *testing.T) {
	f := newFixture(t, rules.CircuitBreaker{Resource: "db", Strategy: rules.ErrorCount, Threshold: 1, MinRequestAmount: 1, RetryTimeout: time.Second})
	second := &recorder{}
	remove := f.hub.AddListener(second.listen)
	f.trip()                   // closed>open
	f.clk.Advance(time.Second) //
	f.call(0, errBoom)         // open>half-open, half-open>open
	f.clk.Advance(time.Second)
	remove()
	remove()       // harmless
	f.call(0, nil) // open>half-open, half-open>closed
	want := []string{"closed>open", "open>half-open", "half-open>open", "open>half-open", "half-open>closed"}
	assert.Equal(t, want, f.rec.moves())
	assert.Equal(t, want[:3], second.moves())
	var at int64
	for i, tr := range f.rec.ts {
		assert.GreaterOrEqual(t, tr.At, at, "transition %d", i)
		at = tr.At
	}
}

func TestConcurrentTransitionsAreDeliveredInOrder(t *testing.T) {
	f := newFixture(t, rules.CircuitBreaker{Resource: "db", Strategy: rules.ErrorCount, Threshold: 1, MinRequestAmount: 1, RetryTimeout: ms, StatInterval: 10 * ms, Probes: 2})
	var (
		wg  sync.WaitGroup
		now atomic.Int64
	)
	now.Store(int64(time.Hour))
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				// A shared clock every goroutine moves forward (ManualClock's
				// Advance is not meant for concurrent callers).
				ec := &entry.Context{Resource: "db", Batch: 1, Start: now.Load()}
				be := f.b.Check(ec)
				end := now.Add(int64(50 * time.Microsecond))
				if be != nil {
					continue
				}
				var err error
				if (i+g)%3 == 0 {
					err = errBoom
				}
				ec.ReleaseTickets(entry.ExitInfo{Start: ec.Start, End: end, Batch: 1, Err: err})
			}
		}()
	}
	wg.Wait()
	moves := f.rec.moves()
	require.Greater(t, len(moves), 10)
	next := map[State][]State{Closed: {Open}, Open: {HalfOpen}, HalfOpen: {Open, Closed}}
	prev := Closed
	for i, tr := range f.rec.ts {
		require.Equal(t, prev, tr.From, "transition %d of %v", i, moves)
		require.Contains(t, next[tr.From], tr.To, "transition %d", i)
		prev = tr.To
	}
	assert.Equal(t, prev, f.b.State())
}

func TestReentrantListenerDoesNotDeadlock(t *testing.T) {
	f := newFixture(t, rules.CircuitBreaker{Resource: "db", Strategy: rules.ErrorCount, Threshold: 1, MinRequestAmount: 1, RetryTimeout: time.Second})
	var log []string
	f.hub.AddListener(func(tr Transition) {
		m := tr.From.String() + ">" + tr.To.String()
		log = append(log, "begin "+m)
		if tr.To == Open && len(log) == 1 {
			// Call back in: refused while open; then, a retry timeout later,
			// a call that turns the breaker half-open from inside this
			// listener and fails at once.
			_, be := f.enter()
			assert.NotNil(t, be)
			f.clk.Advance(time.Second)
			f.call(0, errBoom)
			log = append(log, fmt.Sprintf("state %v", f.b.State()))
		}
		log = append(log, "end "+m)
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.trip()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("re-entrant listener deadlocked")
	}
	assert.Equal(t, []string{
		"begin closed>open", "state open", "end closed>open",
		"begin open>half-open", "end open>half-open",
		"begin half-open>open", "end half-open>open",
	}, log)
}

func TestPanickingListenerDoesNotStopDelivery(t *testing.T) {
	f := newFixture(t, rules.CircuitBreaker{Resource: "db", Strategy: rules.ErrorCount, Threshold: 1, MinRequestAmount: 1, RetryTimeout: time.Second})
	panicked := false
	f.hub.AddListener(func(Transition) {
		if !panicked {
			panicked = true
			panic("listener bug")
		}
	})
	require.PanicsWithValue(t, "listener bug", func() { f.call(0, errBoom) })
	require.Equal(t, Open, f.b.State())
	f.clk.Advance(time.Second)
	f.call(0, nil)
	assert.Equal(t, []string{"closed>open", "open>half-open", "half-open>closed"}, f.rec.moves())
}

func TestBuild(t *testing.T) {
	errCount := rules.CircuitBreaker{Resource: "db", Strategy: rules.ErrorCount, Threshold: 3, MinRequestAmount: 1, RetryTimeout: 10 * time.Second}
	hub := NewHub(nil)
	rec := &recorder{}
	hub.AddListener(rec.listen)
	call := func(b *Breaker, now int64, err error) *core.BlockError {
		ec := &entry.Context{Resource: b.rule.Resource, Batch: 1, Start: now}
		be := b.Check(ec)
		ec.ReleaseTickets(entry.ExitInfo{Start: now, End: now, Batch: 1, Err: err})
		return be
	}

	build := func(rs []rules.CircuitBreaker, old map[string][]*Breaker) map[string][]*Breaker {
		m := Build(rs, old, hub)
		Use(m)
		return m
	}

	t.Run("building changes nothing until Use", func(t *testing.T) {
		m1 := build([]rules.CircuitBreaker{errCount}, nil)
		b1 := m1["db"][0]
		lower := errCount
		lower.Threshold = 1
		m2 := Build([]rules.CircuitBreaker{lower}, m1, hub) // dropped
		require.Len(t, m2["db"], 1)
		require.Nil(t, call(b1, 0, errBoom))
		assert.Equal(t, Closed, b1.State(), "the rule in force still wants 3 errors")
		Use(m2)
		require.Nil(t, call(b1, 0, errBoom))
		assert.Equal(t, Open, b1.State(), "the state now judges by the new rule")
	})

	t.Run("equivalent rules keep window and state", func(t *testing.T) {
		other := rules.CircuitBreaker{Resource: "cache", Strategy: rules.ErrorRatio, Threshold: 0.5, RetryTimeout: time.Second}
		m1 := build([]rules.CircuitBreaker{errCount, other}, nil)
		b1 := m1["db"][0]
		require.Nil(t, call(b1, 0, errBoom))
		inFlight := &entry.Context{Resource: "db", Batch: 1, Start: 0}
		require.Nil(t, b1.Check(inFlight))

		// Threshold 3 -> 2: the window's one error is kept, and the call
		// admitted by the old breaker is judged by the new threshold.
		lower := errCount
		lower.Threshold, lower.ID = 2, "lower"
		m2 := build([]rules.CircuitBreaker{lower}, m1)
		require.Len(t, m2, 1)
		b2 := m2["db"][0]
		assert.Equal(t, lower, b2.Rule())
		inFlight.ReleaseTickets(entry.ExitInfo{Start: 0, End: 0, Batch: 1, Err: errBoom})
		require.Equal(t, Open, b2.State())
		assert.Equal(t, lower, rec.last().Rule)

		// Open stays open until the same instant across a reload.
		m3 := build([]rules.CircuitBreaker{errCount}, m2)
		b3 := m3["db"][0]
		be := call(b3, int64(10*time.Second)-1, nil)
		require.NotNil(t, be)
		assert.Equal(t, time.Millisecond, be.RetryAfter, "1 ns to wait, rounded up to the millisecond")
		assert.Nil(t, call(b3, int64(10*time.Second), nil))
		assert.Equal(t, Closed, b3.State())

		// Another strategy on the same resource starts afresh.
		require.Nil(t, call(b3, int64(10*time.Second), errBoom))
		require.Nil(t, call(b3, int64(10*time.Second), errBoom))
		require.Nil(t, call(b3, int64(10*time.Second), errBoom))
		require.Equal(t, Open, b3.State())
		ratio := rules.CircuitBreaker{Resource: "db", Strategy: rules.ErrorRatio, Threshold: 0.5, MinRequestAmount: 1, RetryTimeout: time.Second}
		m4 := build([]rules.CircuitBreaker{ratio}, m3)
		assert.Equal(t, Closed, m4["db"][0].State())
	})

	t.Run("each old breaker is taken over once", func(t *testing.T) {
		m1 := build([]rules.CircuitBreaker{errCount}, nil)
		for range 3 {
			call(m1["db"][0], 0, errBoom)
		}
		require.Equal(t, Open, m1["db"][0].State())
		m2 := build([]rules.CircuitBreaker{errCount, errCount}, m1)
		require.Len(t, m2["db"], 2)
		assert.Equal(t, Open, m2["db"][0].State())
		assert.Equal(t, Closed, m2["db"][1].State())
	})
}

func TestPassPathsDoNotAllocate(t *testing.T) {
	f := newFixture(t, rules.CircuitBreaker{Resource: "db", Strategy: rules.ErrorRatio, Threshold: 0.5, MinRequestAmount: 1, RetryTimeout: time.Second, Probes: 2})
	ec := &entry.Context{Resource: "db", Batch: 1}
	x := entry.ExitInfo{Batch: 1}
	closed := testing.AllocsPerRun(1000, func() {
		if f.b.Check(ec) != nil {
			panic("refused")
		}
		ec.ReleaseTickets(x)
	})
	assert.Equal(t, 0.0, closed, "closed pass path")
	f.call(0, errBoom)
	f.clk.Advance(time.Second)
	f.mustEnter() // opens the round; holds one of two slots
	ec.Start = f.clk.Nanotime()
	x = entry.ExitInfo{Start: ec.Start, End: ec.Start, Batch: 1, Blocked: true}
	probe := testing.AllocsPerRun(1000, func() {
		if f.b.Check(ec) != nil {
			panic("refused")
		}
		ec.ReleaseTickets(x) // gives the slot back
	})
	assert.Equal(t, 0.0, probe, "probe path")
	assert.Equal(t, HalfOpen, f.b.State())
}
