package sluice

import (
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
)

// refusalKind is an engine whose every Entry of entry is refused by one
// rule of a kind, once set up, and the refusal's type.
type refusalKind struct {
	name  string
	rules rules.Set
	// setup brings the rule to refusing (holding passes open, spending a
	// bucket, tripping a breaker); it returns what to release at the end.
	setup func(tb testing.TB, g *Engine) func()
	entry func(g *Engine) (Pass, error)
	typ   BlockType
}

// holdOne enters "r" once and keeps the pass until the returned func.
func holdOne(tb testing.TB, g *Engine, opts ...EntryOption) func() {
	tb.Helper()
	p, err := g.Entry("r", opts...)
	require.NoError(tb, err)
	return p.Exit
}

func enterR(opts ...EntryOption) func(g *Engine) (Pass, error) {
	return func(g *Engine) (Pass, error) { return g.Entry("r", opts...) }
}

// refusalKinds are the rule kinds whose refusals share their error.
func refusalKinds() []refusalKind {
	nothing := func(testing.TB, *Engine) func() { return func() {} }
	return []refusalKind{
		{
			name:  "concurrency",
			rules: rules.Set{Flow: []rules.Flow{{ID: "c", Resource: "r", Metric: rules.Concurrency, Threshold: 1}}},
			setup: func(tb testing.TB, g *Engine) func() { return holdOne(tb, g) },
			entry: enterR(), typ: BlockFlow,
		},
		{
			name:  "adaptive",
			rules: rules.Set{Flow: []rules.Flow{{ID: "ad", Resource: "r", Metric: rules.Concurrency, Adaptive: &rules.Adaptive{Min: 1, Max: 1}}}},
			setup: func(tb testing.TB, g *Engine) func() { return holdOne(tb, g) },
			entry: enterR(), typ: BlockFlow,
		},
		{
			name:  "associated",
			rules: rules.Set{Flow: []rules.Flow{{ID: "as", Resource: "r", RefResource: "other", Threshold: 1}}},
			setup: func(tb testing.TB, g *Engine) func() {
				tb.Helper()
				for range 2 { // the other resource over 1 a second
					p, err := g.Entry("other")
					require.NoError(tb, err)
					p.Exit()
				}
				return func() {}
			},
			entry: enterR(), typ: BlockFlow,
		},
		{
			name:  "breaker-open",
			rules: rules.Set{CircuitBreaker: []rules.CircuitBreaker{{ID: "b", Resource: "r", Strategy: rules.ErrorCount, Threshold: 1, MinRequestAmount: 1, RetryTimeout: time.Hour}}},
			setup: func(tb testing.TB, g *Engine) func() {
				tb.Helper()
				p, err := g.Entry("r")
				require.NoError(tb, err)
				p.SetError(errors.New("boom"))
				p.Exit() // opens the breaker
				return func() {}
			},
			entry: enterR(), typ: BlockDegrade,
		},
		{
			name:  "param-qps",
			rules: rules.Set{Param: []rules.Param{{ID: "p", Resource: "r", Index: 0, Threshold: 1, Duration: time.Hour}}},
			setup: func(tb testing.TB, g *Engine) func() {
				holdOne(tb, g, WithStringArg(0, "u"))()
				return func() {}
			},
			entry: enterR(WithStringArg(0, "u")), typ: BlockParam,
		},
		{
			name:  "param-concurrency",
			rules: rules.Set{Param: []rules.Param{{ID: "p", Resource: "r", Index: 0, Metric: rules.Concurrency, Threshold: 1}}},
			setup: func(tb testing.TB, g *Engine) func() { return holdOne(tb, g, WithStringArg(0, "u")) },
			entry: enterR(WithStringArg(0, "u")), typ: BlockParam,
		},
		{
			name:  "param-exception",
			rules: rules.Set{Param: []rules.Param{{ID: "p", Resource: "r", Index: 0, Threshold: 10, Exceptions: map[string]int64{"banned": 0}}}},
			setup: nothing, entry: enterR(WithStringArg(0, "banned")), typ: BlockParam,
		},
		{
			name:  "system-concurrency",
			rules: rules.Set{System: []rules.System{{ID: "s", Metric: rules.InboundConcurrency, Threshold: 1}}},
			setup: func(tb testing.TB, g *Engine) func() { return holdOne(tb, g) },
			entry: enterR(), typ: BlockSystem,
		},
		{
			name:  "authority",
			rules: rules.Set{Authority: []rules.Authority{{ID: "a", Resource: "r", Deny: []string{"bad"}}}},
			setup: nothing, entry: enterR(WithCaller("bad")), typ: BlockAuthority,
		},
	}
}

// refusingEngine is k's engine on clk (nil: the system clock), refusing.
func refusingEngine(tb testing.TB, k refusalKind, clk Clock) (*Engine, func()) {
	tb.Helper()
	g := New()
	if clk != nil {
		g = New(WithClock(clk))
	}
	tb.Cleanup(func() { _ = g.Close() })
	require.NoError(tb, g.LoadRules(k.rules))
	release := k.setup(tb, g)
	_, err := k.entry(g)
	var be *BlockError
	require.True(tb, errors.As(err, &be), "%s: %v", k.name, err)
	require.Equal(tb, k.typ, be.Type)
	return g, release
}

// TestAllocRefusedEntryKinds: a refused Entry allocates nothing on the
// system clock for every kind of rule whose refusals share their error
// (it allocated its *BlockError before), the QPS reject rule's aside
// (TestAllocRefusedEntry). Refusals with a wait (an open breaker, a param
// bucket) allocate at most once a millisecond, which the mean over 10,000
// rounds to 0. Run without -race, which changes inlining.
func TestAllocRefusedEntryKinds(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes inlining; make allocs runs this without it")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for _, k := range refusalKinds() {
		t.Run(k.name, func(t *testing.T) {
			g, release := refusingEngine(t, k, nil)
			defer release()
			const n = 10_000
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for range n {
				if p, err := k.entry(g); err == nil {
					p.Exit()
				}
			}
			runtime.ReadMemStats(&after)
			assert.Equal(t, uint64(0), (after.Mallocs-before.Mallocs)/n, "allocations per refused entry")
			assert.Equal(t, uint64(0), (after.TotalAlloc-before.TotalAlloc)/n, "bytes per refused entry")
		})
	}
}

// TestRefusalKindsSharedOnlyWhenEqual: on a manual clock, the refusals of
// each kind at one instant are one error; a refusal that differs in a field
// gets an error of its own and the earlier one keeps its fields.
func TestRefusalKindsSharedOnlyWhenEqual(t *testing.T) {
	refusal := func(t *testing.T, g *Engine, entry func(*Engine) (Pass, error)) *BlockError {
		t.Helper()
		_, err := entry(g)
		var be *BlockError
		require.True(t, errors.As(err, &be), "%v", err)
		return be
	}
	for _, k := range refusalKinds() {
		t.Run(k.name, func(t *testing.T) {
			clk := sluicetest.NewManualClock(0)
			g, release := refusingEngine(t, k, clk)
			defer release()
			first := refusal(t, g, k.entry)
			copied := *first
			assert.Same(t, first, refusal(t, g, k.entry), "an equal refusal shares the error")
			clk.Advance(time.Millisecond)
			next := refusal(t, g, k.entry)
			if copied.RetryAfter > 0 {
				assert.NotSame(t, first, next, "a millisecond later the wait differs")
				assert.Equal(t, copied.RetryAfter-time.Millisecond, next.RetryAfter)
			} else {
				assert.Same(t, first, next, "nothing differs a millisecond later")
			}
			assert.Equal(t, copied, *first, "the first caller's error is unchanged")
		})
	}
	t.Run("fields differ", func(t *testing.T) {
		// Two in flight of a limit of 2, then one: Observed differs.
		g := New(WithClock(sluicetest.NewManualClock(0)))
		t.Cleanup(func() { _ = g.Close() })
		require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "r", Metric: rules.Concurrency, Threshold: 2}}}))
		a, b := holdOne(t, g), holdOne(t, g)
		first := refusal(t, g, enterR())
		assert.Equal(t, 2.0, first.Observed)
		require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "r", Metric: rules.Concurrency, Threshold: 1}}}))
		b()
		second := refusal(t, g, enterR())
		assert.NotSame(t, first, second)
		assert.Equal(t, 1.0, second.Observed)
		assert.Equal(t, 1.0, second.Threshold)
		assert.Equal(t, 2.0, first.Observed, "the first caller's error is unchanged")
		assert.Equal(t, 2.0, first.Threshold)
		a()
	})
	t.Run("param values share a refusal that names none", func(t *testing.T) {
		g := New(WithClock(sluicetest.NewManualClock(0)))
		t.Cleanup(func() { _ = g.Close() })
		require.NoError(t, g.LoadRules(rules.Set{Param: []rules.Param{{Resource: "r", Index: 0, Threshold: 1, Duration: time.Hour, Exceptions: map[string]int64{"w": 2}}}}))
		for _, v := range []string{"u", "v", "w", "w"} {
			holdOne(t, g, WithStringArg(0, v))()
		}
		u := refusal(t, g, enterR(WithStringArg(0, "u")))
		assert.Same(t, u, refusal(t, g, enterR(WithStringArg(0, "v"))), "equal fields, another value")
		w := refusal(t, g, enterR(WithStringArg(0, "w")))
		assert.NotSame(t, u, w, "another threshold")
		assert.Equal(t, 1.0, u.Threshold)
		assert.Equal(t, 2.0, w.Threshold)
	})
}

// TestRefusalKindsSharedConcurrently: refusals of every kind from many
// goroutines while the clock moves, sharing errors, each see a whole and
// unchanging error (run with -race).
func TestRefusalKindsSharedConcurrently(t *testing.T) {
	for _, k := range refusalKinds() {
		t.Run(k.name, func(t *testing.T) {
			clk := sluicetest.NewManualClock(0)
			g, release := refusingEngine(t, k, clk)
			defer release()
			const goroutines, each = 8, 200
			errs := make([][]*BlockError, goroutines)
			var wg sync.WaitGroup
			for i := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range each {
						_, err := k.entry(g)
						var be *BlockError
						if errors.As(err, &be) {
							errs[i] = append(errs[i], be)
						}
					}
				}()
			}
			for range 50 {
				clk.Advance(time.Millisecond / 2)
			}
			wg.Wait()
			for _, es := range errs {
				require.Len(t, es, each)
				for _, be := range es {
					assert.Equal(t, k.typ, be.Type)
					assert.Equal(t, "r", be.Resource)
					assert.Zero(t, be.RetryAfter%time.Millisecond)
				}
			}
		})
	}
}

// BenchmarkEntryRefusedKinds is a refused Entry on the system clock for
// each kind of refusalKinds, serially and from GOMAXPROCS goroutines,
// beside golang.org/x/time/rate's Allow on a limiter that admits (rate) in
// the same run; BenchmarkEntryRefusedSystemClock is the QPS reject rule's.
func BenchmarkEntryRefusedKinds(b *testing.B) {
	b.Run("rate", func(b *testing.B) {
		l := rate.NewLimiter(1e9, 1e9)
		b.ReportAllocs()
		for b.Loop() {
			_ = l.Allow()
		}
	})
	for _, k := range refusalKinds() {
		b.Run(k.name+"/serial", func(b *testing.B) {
			g, release := refusingEngine(b, k, nil)
			defer release()
			b.ReportAllocs()
			for b.Loop() {
				if p, err := k.entry(g); err == nil {
					p.Exit()
				}
			}
		})
		b.Run(k.name+"/parallel", func(b *testing.B) {
			g, release := refusingEngine(b, k, nil)
			defer release()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if p, err := k.entry(g); err == nil {
						p.Exit()
					}
				}
			})
		})
	}
}

// BenchmarkEntryRefusedKindsRatio runs, for each kind of refusalKinds, a
// refused Entry on the system clock and x/time/rate's Allow on a limiter
// that admits in alternating rounds of 10,000 calls within one benchmark,
// and reports the ratio of their times per call (x-rate-allow): a figure a
// busy host inflates far less than either time.
func BenchmarkEntryRefusedKindsRatio(b *testing.B) {
	for _, k := range refusalKinds() {
		b.Run(k.name, func(b *testing.B) {
			g, release := refusingEngine(b, k, nil)
			defer release()
			admitting := rate.NewLimiter(1e9, 1e9)
			const round = 10_000
			var tEntry, tAllow time.Duration
			b.ReportAllocs()
			for i := 0; i < b.N; i += round {
				t0 := time.Now()
				for range round {
					if p, err := k.entry(g); err == nil {
						p.Exit()
					}
				}
				t1 := time.Now()
				for range round {
					_ = admitting.Allow()
				}
				tEntry, tAllow = tEntry+t1.Sub(t0), tAllow+time.Since(t1)
			}
			b.ReportMetric(float64(tEntry)/float64(tAllow), "x-rate-allow")
		})
	}
}
