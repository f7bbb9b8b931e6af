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

// refusedEngine returns an engine on clk (nil: the system clock) whose
// resource "r" has one QPS reject rule of threshold 1, already spent.
func refusedEngine(tb testing.TB, clk Clock) *Engine {
	tb.Helper()
	var g *Engine
	if clk == nil {
		g = New()
	} else {
		g = New(WithClock(clk))
	}
	tb.Cleanup(func() { _ = g.Close() })
	require.NoError(tb, g.LoadRules(rules.Set{Flow: []rules.Flow{{ID: "one", Resource: "r", Threshold: 1}}}))
	if p, err := g.Entry("r"); err == nil {
		p.Exit()
	}
	return g
}

// TestAllocRefusedEntry: a refused Entry on the system clock allocates
// nothing (it allocated its 112-byte *BlockError before): refusals that
// agree on every field share one immutable error (flow.reject.refusal).
// Run without -race, which changes inlining (make allocs).
func TestAllocRefusedEntry(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes inlining; make allocs runs this without it")
	}
	g := refusedEngine(t, nil)
	var last error
	refuse := func() {
		if p, err := g.Entry("r"); err == nil {
			p.Exit() // the window turned: one entry a second passes
		} else {
			last = err
		}
	}
	// Each millisecond's first refusal makes the error the others share
	// (and so does the first after the goroutine was descheduled): far less
	// than one allocation per refusal over 10,000, which the mean rounds to
	// 0 on a busy host too.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	refuse()
	const n = 10_000
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		refuse()
	}
	runtime.ReadMemStats(&after)
	assert.Equal(t, uint64(0), (after.Mallocs-before.Mallocs)/n, "allocations per refused entry")
	assert.Equal(t, uint64(0), (after.TotalAlloc-before.TotalAlloc)/n, "bytes per refused entry")

	// The shared error is still the whole refusal.
	require.ErrorIs(t, last, ErrBlocked)
	var be *BlockError
	require.True(t, errors.As(last, &be))
	assert.Equal(t, BlockFlow, be.Type)
	assert.Equal(t, "r", be.Resource)
	assert.Equal(t, RuleRef{ID: "one", Metric: "qps"}, be.Rule)
	assert.Equal(t, 1.0, be.Threshold)
	assert.Greater(t, be.RetryAfter, time.Duration(0))
	assert.LessOrEqual(t, be.RetryAfter, time.Second)
	assert.Zero(t, be.RetryAfter%time.Millisecond, "RetryAfter is whole milliseconds")
}

// TestRefusalSharedOnlyWhenEqual: on a manual clock, refusals at one
// instant return one error; a refusal whose RetryAfter differs (a
// millisecond later) gets an error of its own, and the first caller's error
// keeps its fields: the caller owns an error that never changes. RetryAfter
// is rounded up to the millisecond, exactly.
func TestRefusalSharedOnlyWhenEqual(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	g := refusedEngine(t, clk)

	refusal := func() *BlockError {
		t.Helper()
		_, err := g.Entry("r")
		var be *BlockError
		require.True(t, errors.As(err, &be), "%v", err)
		return be
	}
	// The one pass at 0 slides out of the one-second window at 1 s.
	first := refusal()
	assert.Equal(t, time.Second, first.RetryAfter)
	assert.Same(t, first, refusal(), "an equal refusal shares the error")

	clk.Advance(time.Nanosecond)
	assert.Same(t, first, refusal(), "999,999,999 ns rounds up to 1 s: equal")

	clk.Advance(time.Millisecond) // 1,000,001 ns: 998,999,999 ns to wait
	second := refusal()
	assert.NotSame(t, first, second)
	assert.Equal(t, 999*time.Millisecond, second.RetryAfter)
	assert.Equal(t, time.Second, first.RetryAfter, "the first caller's error is unchanged")

	clk.Advance(999*time.Millisecond - 2*time.Nanosecond) // 1 s - 1 ns: 1 ns to wait
	assert.Equal(t, time.Millisecond, refusal().RetryAfter, "1 ns rounds up to 1 ms")

	clk.Advance(time.Nanosecond) // 1 s: the window is free
	p, err := g.Entry("r")
	require.NoError(t, err)
	p.Exit()
}

// TestRefusalSharedConcurrently: refusals from many goroutines, sharing
// errors, each see a whole and unchanging error (run with -race).
func TestRefusalSharedConcurrently(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	g := refusedEngine(t, clk)
	const goroutines, each = 8, 200
	errs := make([][]*BlockError, goroutines)
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				_, err := g.Entry("r")
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
			assert.Equal(t, BlockFlow, be.Type)
			assert.Equal(t, 1.0, be.Observed)
			assert.Zero(t, be.RetryAfter%time.Millisecond)
			assert.True(t, be.RetryAfter > 970*time.Millisecond && be.RetryAfter <= time.Second, "%v", be.RetryAfter)
		}
	}
}

// BenchmarkEntryRefusedSystemClock is a refused Entry on the system clock
// (one QPS reject rule, spent; one entry a second passes), serially and
// from GOMAXPROCS goroutines, beside golang.org/x/time/rate's Allow on a
// limiter that refuses (rate-refused) and one that admits (rate-allow).
// BenchmarkEntryRefusedRatio gives the same-run ratio.
func BenchmarkEntryRefusedSystemClock(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		g := refusedEngine(b, nil)
		b.ReportAllocs()
		for b.Loop() {
			if p, err := g.Entry("r"); err == nil {
				p.Exit()
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		g := refusedEngine(b, nil)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if p, err := g.Entry("r"); err == nil {
					p.Exit()
				}
			}
		})
	})
	b.Run("rate-refused", func(b *testing.B) {
		l := refusingLimiter()
		b.ReportAllocs()
		for b.Loop() {
			_ = l.Allow()
		}
	})
	b.Run("rate-allow", func(b *testing.B) {
		l := rate.NewLimiter(1e9, 1e9)
		b.ReportAllocs()
		for b.Loop() {
			_ = l.Allow()
		}
	})
}

// refusingLimiter is an x/time/rate limiter whose one token is spent and
// that gets the next in an hour.
func refusingLimiter() *rate.Limiter {
	l := rate.NewLimiter(rate.Every(time.Hour), 1)
	l.Allow()
	return l
}

// BenchmarkEntryRefusedRatio runs a refused Entry on the system clock and
// x/time/rate's Allow in alternating rounds of 10,000 calls within one
// benchmark, and reports the ratio of their times per call: x-rate-allow
// against a limiter that admits (as the perf figures quote it) and
// x-rate-refused against one that refuses.
func BenchmarkEntryRefusedRatio(b *testing.B) {
	g := refusedEngine(b, nil)
	refusing, admitting := refusingLimiter(), rate.NewLimiter(1e9, 1e9)
	const round = 10_000
	var tEntry, tRefused, tAllow time.Duration
	b.ReportAllocs()
	for i := 0; i < b.N; i += round {
		t0 := time.Now()
		for range round {
			if p, err := g.Entry("r"); err == nil {
				p.Exit()
			}
		}
		t1 := time.Now()
		for range round {
			_ = refusing.Allow()
		}
		t2 := time.Now()
		for range round {
			_ = admitting.Allow()
		}
		t3 := time.Now()
		tEntry, tRefused, tAllow = tEntry+t1.Sub(t0), tRefused+t2.Sub(t1), tAllow+t3.Sub(t2)
	}
	b.ReportMetric(float64(tEntry)/float64(tAllow), "x-rate-allow")
	b.ReportMetric(float64(tEntry)/float64(tRefused), "x-rate-refused")
}
