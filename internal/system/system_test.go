package system_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"sync/atomic"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/system"
	"github.com/sluice-go/sluice/internal/window"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeSource is a Source whose readings the test sets.
type fakeSource struct {
	load, cpu floatVar
	err       errVar
	calls     atomic.Int64
}

// floatVar is a float64 read and written atomically.
type floatVar struct{ bits atomic.Uint64 }

func (v *floatVar) Load() float64   { return math.Float64frombits(v.bits.Load()) }
func (v *floatVar) Store(f float64) { v.bits.Store(math.Float64bits(f)) }

// errVar is an error read and written atomically; nil is a valid value.
type errVar struct{ p atomic.Pointer[error] }

func (v *errVar) Load() error {
	if p := v.p.Load(); p != nil {
		return *p
	}
	return nil
}
func (v *errVar) Store(err error) { v.p.Store(&err) }

func newFakeSource(load, cpu float64) *fakeSource {
	f := &fakeSource{}
	f.load.Store(load)
	f.cpu.Store(cpu)
	return f
}

func (f *fakeSource) Load1() (float64, error) {
	f.calls.Add(1)
	return f.load.Load(), f.err.Load()
}
func (f *fakeSource) CPUUsage() (float64, error) { return f.cpu.Load(), f.err.Load() }
func (f *fakeSource) Memory() (uint64, error)    { return 1 << 20, nil }

const interval = time.Second

// harness is a slot on a manual clock, a fresh inbound node and a fake
// source.
type harness struct {
	t     *testing.T
	clock *sluicetest.ManualClock
	node  *window.Node
	src   *fakeSource
	slot  *system.Slot
	errs  chan error
}

func newHarness(t *testing.T, load, cpu float64) *harness {
	t.Helper()
	h := &harness{
		t:     t,
		clock: sluicetest.NewManualClock(int64(time.Hour)),
		node:  window.NewNode(),
		src:   newFakeSource(load, cpu),
		errs:  make(chan error, 16),
	}
	h.slot = system.New(system.Config{
		Clock: h.clock, Inbound: h.node, Source: h.src, Interval: interval,
		OnError: func(err error) { h.errs <- err },
	})
	t.Cleanup(func() { require.NoError(t, h.slot.Close()) })
	return h
}

// load puts rs, which must be valid, in force and, when the sampler runs,
// waits for its sample.
func (h *harness) load(rs ...rules.System) {
	h.t.Helper()
	for i := range rs {
		require.NoError(h.t, (&rules.Set{System: rs[i : i+1]}).Validate())
	}
	h.slot.Use(system.Compile(rs))
	if h.clock.Waiters() > 0 || needsSampler(rs) {
		h.parked()
	}
}

func needsSampler(rs []rules.System) bool {
	for _, r := range rs {
		if r.Metric == rules.Load1 || r.Metric == rules.CPUUsage {
			return true
		}
	}
	return false
}

// parked waits until the sampler has taken its sample and waits on its
// next tick.
func (h *harness) parked() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(h.t, h.clock.BlockUntil(ctx, 1))
}

// sample sets the fake readings and lets the sampler take them.
func (h *harness) sample(load, cpu float64) {
	h.t.Helper()
	h.src.load.Store(load)
	h.src.cpu.Store(cpu)
	h.clock.Advance(interval)
	h.parked()
}

// advance moves the clock by d and lets the sampler take any sample that
// came due (its reading is unchanged).
func (h *harness) advance(d time.Duration) {
	h.t.Helper()
	h.clock.Advance(d)
	h.parked()
}

func (h *harness) check(batch int64) *core.BlockError {
	return h.slot.Check(&entry.Context{Resource: "GET /x", Traffic: core.Inbound, Batch: batch, Start: h.clock.Nanotime()})
}

// inFlight raises the inbound concurrency to n (by passing entries).
func (h *harness) inFlight(n int64) {
	h.node.AddPass(h.clock.Nanotime(), n)
}

// completed records n completions of rt each in the current bucket (with
// matching passes, so concurrency is unchanged).
func (h *harness) completed(n int64, rt time.Duration) {
	now := h.clock.Nanotime()
	h.node.AddPass(now, n)
	for i := int64(0); i < n; i++ {
		h.node.AddComplete(now, int64(rt), 1, false)
	}
}

func TestCheckEachMetric(t *testing.T) {
	tests := []struct {
		name      string
		rule      rules.System
		setup     func(h *harness)
		batch     int64
		wantBlock bool
		observed  float64
		reason    string
	}{
		{
			name:  "qps below",
			rule:  rules.System{Metric: rules.InboundQPS, Threshold: 5},
			setup: func(h *harness) { h.node.AddPass(h.clock.Nanotime(), 4) },
			batch: 1,
		},
		{
			name:      "qps at threshold refuses the next",
			rule:      rules.System{Metric: rules.InboundQPS, Threshold: 5},
			setup:     func(h *harness) { h.node.AddPass(h.clock.Nanotime(), 5) },
			batch:     1,
			wantBlock: true, observed: 5, reason: "qps",
		},
		{
			name:      "qps batch over",
			rule:      rules.System{Metric: rules.InboundQPS, Threshold: 5},
			setup:     func(h *harness) { h.node.AddPass(h.clock.Nanotime(), 3) },
			batch:     3,
			wantBlock: true, observed: 3, reason: "qps",
		},
		{
			name: "qps counts the whole second",
			rule: rules.System{Metric: rules.InboundQPS, Threshold: 9},
			setup: func(h *harness) {
				for i := 0; i < 10; i++ { // one per 100 ms bucket
					h.node.AddPass(h.clock.Nanotime(), 1)
					h.clock.Advance(100 * time.Millisecond)
				}
			},
			batch:     1,
			wantBlock: true, observed: 9, reason: "qps", // the oldest bucket has left the window
		},
		{
			name:  "concurrency below",
			rule:  rules.System{Metric: rules.InboundConcurrency, Threshold: 3},
			setup: func(h *harness) { h.inFlight(2) },
			batch: 1,
		},
		{
			name:      "concurrency at threshold",
			rule:      rules.System{Metric: rules.InboundConcurrency, Threshold: 3},
			setup:     func(h *harness) { h.inFlight(3) },
			batch:     1,
			wantBlock: true, observed: 3, reason: "concurrency",
		},
		{
			name:  "avg rt below",
			rule:  rules.System{Metric: rules.InboundAvgRT, Threshold: 10},
			setup: func(h *harness) { h.completed(4, 8*time.Millisecond) },
			batch: 1,
		},
		{
			name:  "avg rt equal passes",
			rule:  rules.System{Metric: rules.InboundAvgRT, Threshold: 10},
			setup: func(h *harness) { h.completed(4, 10*time.Millisecond) },
			batch: 1,
		},
		{
			name: "avg rt above",
			rule: rules.System{Metric: rules.InboundAvgRT, Threshold: 10},
			setup: func(h *harness) {
				h.completed(1, 8*time.Millisecond)
				h.clock.Advance(300 * time.Millisecond)
				h.completed(3, 16*time.Millisecond)
			},
			batch:     1,
			wantBlock: true, observed: 14, reason: "avg-rt", // (8+48)/4
		},
		{
			name:  "avg rt with nothing completed",
			rule:  rules.System{Metric: rules.InboundAvgRT, Threshold: 10},
			setup: func(h *harness) { h.inFlight(100) },
			batch: 1,
		},
		{
			name:  "load below",
			rule:  rules.System{Metric: rules.Load1, Threshold: 4},
			setup: func(h *harness) { h.sample(3.5, 0) },
			batch: 1,
		},
		{
			name:  "load equal passes",
			rule:  rules.System{Metric: rules.Load1, Threshold: 4},
			setup: func(h *harness) { h.sample(4, 0) },
			batch: 1,
		},
		{
			name:      "load above",
			rule:      rules.System{Metric: rules.Load1, Threshold: 4},
			setup:     func(h *harness) { h.sample(6.25, 0) },
			batch:     1,
			wantBlock: true, observed: 6.25, reason: "load1",
		},
		{
			name:  "cpu below",
			rule:  rules.System{Metric: rules.CPUUsage, Threshold: 0.8},
			setup: func(h *harness) { h.sample(0, 0.75) },
			batch: 1,
		},
		{
			name:      "cpu above",
			rule:      rules.System{Metric: rules.CPUUsage, Threshold: 0.8},
			setup:     func(h *harness) { h.sample(0, 0.875) },
			batch:     1,
			wantBlock: true, observed: 0.875, reason: "cpu-usage",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, 0, 0)
			h.load(tt.rule)
			tt.setup(h)
			be := h.check(tt.batch)
			if !tt.wantBlock {
				require.Nil(t, be, "Check() = %v, want pass", be)
				return
			}
			require.NotNil(t, be, "Check() = nil, want block")
			assert.Equal(t, core.BlockSystem, be.Type)
			assert.Equal(t, "GET /x", be.Resource)
			assert.Equal(t, tt.rule.Threshold, be.Threshold)
			assert.InDelta(t, tt.observed, be.Observed, 1e-9)
			assert.Equal(t, tt.reason, be.Reason)
			assert.Equal(t, core.RuleRef{ID: tt.rule.ID, Metric: string(tt.rule.Metric)}, be.Rule)
			assert.True(t, errors.Is(be, core.ErrBlocked))
		})
	}
}

func TestCheckQPSWindowSlides(t *testing.T) {
	h := newHarness(t, 0, 0)
	h.load(rules.System{Metric: rules.InboundQPS, Threshold: 3})
	h.node.AddPass(h.clock.Nanotime(), 3)
	require.NotNil(t, h.check(1))
	// Still within the second: the cached closed buckets plus the current one.
	h.clock.Advance(900 * time.Millisecond)
	be := h.check(1)
	require.NotNil(t, be)
	assert.Equal(t, 3.0, be.Observed)
	h.node.AddPass(h.clock.Nanotime(), 0)
	// The three passes left the window.
	h.clock.Advance(100 * time.Millisecond)
	require.Nil(t, h.check(1))
	// Passes in the current bucket count at once (the cache holds only the
	// closed ones).
	h.node.AddPass(h.clock.Nanotime(), 2)
	require.Nil(t, h.check(1))
	h.node.AddPass(h.clock.Nanotime(), 1)
	be = h.check(1)
	require.NotNil(t, be)
	assert.Equal(t, 3.0, be.Observed)
}

// TestCheckBBR drives the BBR cases: with CPU (or load) over the
// threshold, in-flight work below maxCompleted×minRT passes and work above
// it is cut back; under the threshold nothing is refused.
func TestCheckBBR(t *testing.T) {
	tests := []struct {
		name      string
		rule      rules.System
		load, cpu float64
		completed int64         // in one 100 ms bucket: 10× per second
		minRT     time.Duration // of those completions
		inFlight  int64
		wantBlock bool
		observed  float64
	}{
		// Capacity = 100 × 10/s × 0.01 s = 10 requests in flight.
		{"cpu over, below capacity", cpuBBR, 0, 0.95, 100, 10 * time.Millisecond, 5, false, 0},
		{"cpu over, at capacity", cpuBBR, 0, 0.95, 100, 10 * time.Millisecond, 10, false, 0},
		{"cpu over, above capacity", cpuBBR, 0, 0.95, 100, 10 * time.Millisecond, 11, true, 0.95},
		{"cpu over, far above capacity", cpuBBR, 0, 1, 100, 10 * time.Millisecond, 500, true, 1},
		{"cpu under, far above capacity", cpuBBR, 0, 0.5, 100, 10 * time.Millisecond, 500, false, 0},
		{"cpu at threshold", cpuBBR, 0, 0.8, 100, 10 * time.Millisecond, 500, false, 0},
		{"cpu over, one in flight", cpuBBR, 0, 0.95, 0, 0, 1, false, 0},
		{"cpu over, nothing completed", cpuBBR, 0, 0.95, 0, 0, 2, true, 0.95},
		{"load over, below capacity", loadBBR, 9, 0, 50, 40 * time.Millisecond, 19, false, 0},
		{"load over, above capacity", loadBBR, 9, 0, 50, 40 * time.Millisecond, 21, true, 9},
		{"load under, above capacity", loadBBR, 7, 0, 50, 40 * time.Millisecond, 21, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, 0, 0)
			h.load(tt.rule)
			h.sample(tt.load, tt.cpu)
			if tt.completed > 0 {
				h.completed(1, 3*tt.minRT)
				h.completed(tt.completed-1, tt.minRT)
				h.clock.Advance(100 * time.Millisecond)
				h.completed(tt.completed/2, 2*tt.minRT) // a slower bucket: max and min come from the best
			}
			h.inFlight(tt.inFlight)
			want := 0.0
			if tt.completed > 0 {
				want = float64(tt.completed) * 10 * tt.minRT.Seconds()
			}
			assert.InDelta(t, want, system.Capacity(h.node, h.clock.Nanotime()), 1e-9)

			be := h.check(1)
			if !tt.wantBlock {
				require.Nil(t, be, "Check() = %v, want pass", be)
				return
			}
			require.NotNil(t, be)
			assert.Equal(t, core.BlockSystem, be.Type)
			assert.Equal(t, tt.observed, be.Observed)
			assert.Equal(t, tt.rule.Threshold, be.Threshold)
			assert.Equal(t, string(tt.rule.Metric)+" (bbr: concurrency over maxCompletedPerSecond × minRT)", be.Reason)
		})
	}
}

var (
	cpuBBR  = rules.System{Metric: rules.CPUUsage, Threshold: 0.8, Strategy: rules.BBR}
	loadBBR = rules.System{Metric: rules.Load1, Threshold: 8, Strategy: rules.BBR}
)

// TestCheckBBRCutsBack plays a workload through the slot: while in-flight
// work exceeds capacity, entries are refused until enough complete.
func TestCheckBBRCutsBack(t *testing.T) {
	h := newHarness(t, 0, 0)
	h.load(cpuBBR)
	h.sample(0, 0.99)
	h.completed(20, 50*time.Millisecond) // capacity 20 × 10 × 0.05 = 10
	admitted := 0
	for i := 0; i < 30; i++ {
		if h.check(1) == nil {
			h.inFlight(1)
			admitted++
		}
	}
	// Entries pass while concurrency <= capacity, so it ends one above.
	assert.Equal(t, 11, admitted)
	assert.Equal(t, int64(11), h.node.Concurrency())
	// Two complete (in a later, slower bucket: capacity stays 10): two more
	// may enter.
	h.clock.Advance(100 * time.Millisecond)
	h.node.AddComplete(h.clock.Nanotime(), int64(60*time.Millisecond), 2, false)
	for i := 0; i < 5; i++ {
		if h.check(1) == nil {
			h.inFlight(1)
			admitted++
		}
	}
	assert.Equal(t, 13, admitted)
	assert.Equal(t, int64(11), h.node.Concurrency())
	// CPU cools: everything passes again.
	h.sample(0, 0.5)
	for i := 0; i < 5; i++ {
		require.Nil(t, h.check(1))
	}
}

func TestCheckRuleOrderAndSet(t *testing.T) {
	h := newHarness(t, 0, 0)
	set := []rules.System{
		{ID: "qps", Metric: rules.InboundQPS, Threshold: 1000},
		{ID: "conc", Metric: rules.InboundConcurrency, Threshold: 2},
		{ID: "rt", Metric: rules.InboundAvgRT, Threshold: 1000},
		{ID: "load", Metric: rules.Load1, Threshold: 1},
		{ID: "cpu", Metric: rules.CPUUsage, Threshold: 0.5, Strategy: rules.BBR},
	}
	h.load(set...)
	require.Nil(t, h.check(1))
	h.sample(2, 0.9) // both load and cpu over; load comes first
	be := h.check(1)
	require.NotNil(t, be)
	assert.Equal(t, "load", be.Rule.ID)
	h.inFlight(2)
	be = h.check(1)
	require.NotNil(t, be)
	assert.Equal(t, "conc", be.Rule.ID)
}

func TestStaleValuesStopBlocking(t *testing.T) {
	h := newHarness(t, 0, 0)
	h.load(rules.System{Metric: rules.CPUUsage, Threshold: 0.5})
	h.sample(0, 0.9)
	require.NotNil(t, h.check(1))

	h.src.err.Store(errors.New("proc gone"))
	h.src.cpu.Store(0.1)
	for i := 1; i <= system.StaleIntervals; i++ {
		h.clock.Advance(interval)
		h.parked()
		be := h.check(1)
		require.NotNil(t, be, "after %d failed samples the last good value is still in use", i)
		assert.Equal(t, 0.9, be.Observed)
	}
	m := h.slot.Metrics()
	assert.Equal(t, 0.9, m.CPUUsage)
	assert.Equal(t, system.StaleIntervals*interval, m.CPUUsageAge)
	h.clock.Advance(interval)
	h.parked()
	require.Nil(t, h.check(1), "too old: fail open")
	// Errors were reported once per metric, not once per sample.
	require.Len(t, h.errs, 2)
	assert.ErrorContains(t, <-h.errs, "proc gone")

	// A good sample brings the rule back.
	h.src.err.Store(nil)
	h.sample(0, 0.7)
	require.NotNil(t, h.check(1))
}

func TestNeverSampledPasses(t *testing.T) {
	// A source that fails from the start: NaN readings never block.
	h := newHarness(t, 0, 0)
	h.src.err.Store(errors.New("no load"))
	h.load(rules.System{Metric: rules.Load1, Threshold: 0.1}, rules.System{Metric: rules.CPUUsage, Threshold: 0.1})
	require.Nil(t, h.check(1))
	m := h.slot.Metrics()
	assert.True(t, math.IsNaN(m.Load1))
	assert.Equal(t, time.Duration(-1), m.Load1Age)
}

func TestCompileAndUse(t *testing.T) {
	h := newHarness(t, 0, 0)
	assert.False(t, h.slot.Active())
	assert.Nil(t, system.Compile(nil), "no rules compile to nil")

	good := []rules.System{
		{Metric: rules.InboundQPS, Threshold: 100},
		{Metric: rules.InboundConcurrency, Threshold: 10},
	}
	set := system.Compile(good)
	assert.False(t, h.slot.Active(), "Compile changes nothing")
	good[1].Threshold = 1 // Compile keeps its own copy
	h.slot.Use(set)
	assert.True(t, h.slot.Active())
	assert.Nil(t, h.check(10))
	be := h.check(11)
	require.NotNil(t, be)
	assert.Equal(t, 10.0, be.Threshold, "the rule compiled, not the caller's slice")
	assert.Equal(t, 0, h.clock.Waiters(), "no sampler for inbound-only rules")
	assert.Equal(t, int64(0), h.src.calls.Load())

	// A CPU rule starts the sampler.
	h.load(rules.System{Metric: rules.CPUUsage, Threshold: 0.5})
	assert.Equal(t, int64(1), h.src.calls.Load())

	// Removing every rule deactivates the slot.
	h.slot.Use(nil)
	assert.False(t, h.slot.Active())
	assert.Nil(t, h.check(1))
}

func TestStartAndClose(t *testing.T) {
	h := newHarness(t, 2, 0.25)
	h.slot.Start()
	h.parked()
	m := h.slot.Metrics()
	assert.Equal(t, 2.0, m.Load1)
	assert.Equal(t, 0.25, m.CPUUsage)
	assert.Equal(t, uint64(1<<20), m.Memory)
	require.NoError(t, h.slot.Close())
	assert.Equal(t, 0, h.clock.Waiters())
	require.NoError(t, h.slot.Close())
	calls := h.src.calls.Load()
	h.clock.Advance(10 * interval)
	assert.Equal(t, calls, h.src.calls.Load(), "no sampling after Close")
	// Using rules after Close keeps working but starts nothing.
	h.slot.Use(system.Compile([]rules.System{{Metric: rules.Load1, Threshold: 1}}))
	assert.True(t, h.slot.Active())
	assert.Equal(t, 0, h.clock.Waiters())
}

func TestNewDefaults(t *testing.T) {
	s := system.New(system.Config{})
	assert.False(t, s.Active())
	require.Nil(t, s.Check(&entry.Context{Batch: 1}))
	require.NoError(t, s.Close())
}

// TestCheckConcurrentWindow races checks across bucket boundaries against
// passes: run with -race. The QPS seen never exceeds what was added.
func TestCheckConcurrentWindow(t *testing.T) {
	h := newHarness(t, 0, 0)
	h.load(rules.System{Metric: rules.InboundQPS, Threshold: 1e9})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				assert.Nil(t, h.check(1))
			}
		}()
	}
	for i := 0; i < 200; i++ {
		h.node.AddPass(h.clock.Nanotime(), 1)
		h.clock.Advance(37 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	// Exact once quiet: the cache (filled by the racing checks or now)
	// agrees with a full scan of the window.
	now := h.clock.Nanotime()
	want := h.node.Sum(now, window.Pass)
	// Passes at 37·i ms, i < 200; now is 7400 ms, in bucket 74, so the
	// window is buckets 65..74 = [6500, 7500) ms: i = 176..199.
	require.Equal(t, uint64(24), want)
	require.Nil(t, h.check(1))
	h.load(rules.System{Metric: rules.InboundQPS, Threshold: float64(want)})
	be := h.check(1)
	require.NotNil(t, be)
	assert.Equal(t, float64(want), be.Observed)
}

func TestLowestThresholdSpeaks(t *testing.T) {
	h := newHarness(t, 0, 0)
	h.load(
		rules.System{ID: "loose", Metric: rules.CPUUsage, Threshold: 0.9},
		rules.System{ID: "tight", Metric: rules.CPUUsage, Threshold: 0.6},
		rules.System{ID: "bbr", Metric: rules.CPUUsage, Threshold: 0.5, Strategy: rules.BBR},
	)
	h.sample(0, 0.95)
	be := h.check(1)
	require.NotNil(t, be)
	assert.Equal(t, "tight", be.Rule.ID)
	assert.Equal(t, 0.6, be.Threshold)
	h.sample(0, 0.55) // only the bbr rule's trigger: capacity 0, concurrency 0
	require.Nil(t, h.check(1))
	h.inFlight(2)
	be = h.check(1)
	require.NotNil(t, be)
	assert.Equal(t, "bbr", be.Rule.ID)
}

// TestCheckBBRMinRTMemory plays a sustained overload: a calm start where
// requests take 5 ms, then seconds in which every request waits behind the
// others and takes 50 ms. Capacity keeps the 5 ms service time for
// window.MinRTMemory (ten seconds), so BBR holds concurrency near what the
// process completes without queueing instead of settling at the queue it
// already has (400/s × 50 ms = 20).
func TestCheckBBRMinRTMemory(t *testing.T) {
	tests := []struct {
		name         string
		overload     time.Duration // after the calm second, 40 completions per 100 ms at 50 ms each
		inFlight     int64
		wantCapacity float64
		wantBlock    bool
	}{
		// 40 per 100 ms = 400/s; × 5 ms = 2.
		{"early overload, at capacity", 2 * time.Second, 2, 2, false},
		{"early overload, over capacity", 2 * time.Second, 3, 2, true},
		{"last moment of the memory", 8900 * time.Millisecond, 3, 2, true},
		{"one-second min rt would admit this", 5 * time.Second, 19, 2, true},
		// Now in the eleventh second since the calm one: it left the memory
		// and the service time is now 50 ms.
		{"calm start forgotten, at capacity", 9 * time.Second, 20, 20, false},
		{"calm start forgotten, over capacity", 9 * time.Second, 21, 20, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, 0, 0.95)
			h.load(cpuBBR)
			h.clock.Set(h.clock.Nanotime() / int64(time.Second) * int64(time.Second)) // whole second
			h.completed(4, 5*time.Millisecond)                                        // the calm second
			h.advance(time.Second)
			for d := time.Duration(0); d < tt.overload; d += 100 * time.Millisecond {
				h.completed(40, 50*time.Millisecond)
				h.advance(100 * time.Millisecond)
			}
			h.completed(40, 50*time.Millisecond) // the current bucket
			h.inFlight(tt.inFlight)
			now := h.clock.Nanotime()
			require.InDelta(t, tt.wantCapacity, system.Capacity(h.node, now), 1e-9)
			require.InDelta(t, 400*0.05, h.node.MaxCompletePerSecond(now)*float64(mustMinRT(t, h.node, now))/1e6, 1e-9,
				"the one-second window alone says 20")
			for k := 0; k < 2; k++ { // a cold read of the window cache and a warm one
				be := h.check(1)
				if !tt.wantBlock {
					require.Nil(t, be, "Check() = %v, want pass", be)
					continue
				}
				require.NotNil(t, be, "Check() = nil, want block")
				assert.Equal(t, 0.95, be.Observed)
			}
		})
	}
}

func mustMinRT(t *testing.T, n *window.Node, now int64) int64 {
	t.Helper()
	v, ok := n.MinRT(now)
	require.True(t, ok)
	return v
}

// TestCheckBBRBoundary checks the request-path arithmetic (whole numbers
// through the window cache) against Capacity at its edges, with the best
// bucket and the shortest RT in closed buckets or in the current one.
func TestCheckBBRBoundary(t *testing.T) {
	tests := []struct {
		name    string
		closed  [2]int64 // completions, RT in µs, in the previous bucket
		current [2]int64 // the same, in the current bucket
		want    float64  // capacity
	}{
		{"closed only", [2]int64{30, 7000}, [2]int64{0, 0}, 2.1},
		{"current holds the max", [2]int64{10, 7000}, [2]int64{30, 9000}, 2.1},
		{"current holds the min", [2]int64{30, 9000}, [2]int64{10, 7000}, 2.1},
		{"sub-millisecond rt", [2]int64{500, 300}, [2]int64{0, 0}, 1.5},
		{"whole capacity", [2]int64{25, 20000}, [2]int64{25, 20000}, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, 0, 0.95)
			h.load(cpuBBR)
			h.completed(tt.closed[0], time.Duration(tt.closed[1])*time.Microsecond)
			h.advance(100 * time.Millisecond)
			h.completed(tt.current[0], time.Duration(tt.current[1])*time.Microsecond)
			require.InDelta(t, tt.want, system.Capacity(h.node, h.clock.Nanotime()), 1e-9)
			// Concurrency up to capacity passes; one more is refused.
			limit := int64(math.Floor(tt.want + 1e-9))
			h.inFlight(max(2, limit))
			if limit >= 2 {
				require.Nil(t, h.check(1), "Check() at concurrency %d, capacity %v", limit, tt.want)
			}
			h.inFlight(1)
			require.NotNil(t, h.check(1), "Check() at concurrency %d, capacity %v", max(2, limit)+1, tt.want)
		})
	}
}
