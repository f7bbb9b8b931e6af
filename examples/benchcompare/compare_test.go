package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The benchmarks below measure, in one run, sluice's admission paths beside
// sentinel-golang's Entry+Exit, golang.org/x/time/rate Allow and
// go.uber.org/ratelimit Take, serially and with b.RunParallel. Each path is
// described where it is declared (paths.go). Run them with
//
//	(cd examples/benchcompare && go test -run '^$' -bench . -benchmem -count 5 .)
//
// or, for the same-run ratios with medians and spreads, make bench-compare.

func BenchmarkSluiceOneRule(b *testing.B)  { both(b, sluiceOneRule) }
func BenchmarkSluiceAllKinds(b *testing.B) { both(b, sluiceAllKinds) }
func BenchmarkSluiceBlocked(b *testing.B)  { both(b, sluiceBlocked) }
func BenchmarkSluiceManyResources(b *testing.B) {
	both(b, sluiceManyResources)
}
func BenchmarkSluiceResources100k(b *testing.B)     { both(b, sluiceResources100k) }
func BenchmarkSluiceResourcesZipf10k(b *testing.B)  { both(b, sluiceResourcesZipf10k) }
func BenchmarkSluiceResourcesZipf100k(b *testing.B) { both(b, sluiceResourcesZipf100k) }
func BenchmarkSluiceParamNone(b *testing.B)         { both(b, sluiceParamNone) }
func BenchmarkSluiceParam1M(b *testing.B)           { both(b, sluiceParam1M) }
func BenchmarkSentinelOneRule(b *testing.B)         { both(b, sentinelOneRule) }
func BenchmarkRateInfAllow(b *testing.B)            { both(b, rateInfAllow) }
func BenchmarkRateAllow(b *testing.B)               { both(b, rateAllow) }
func BenchmarkRatelimitTake(b *testing.B)           { both(b, ratelimitTake) }
func BenchmarkSluiceAdaptive(b *testing.B)          { both(b, sluiceAdaptive) }
func BenchmarkFailsafeAdaptive(b *testing.B)        { both(b, failsafeAdaptive) }
func BenchmarkSluiceBudget(b *testing.B)            { both(b, sluiceBudget) }
func BenchmarkFailsafeSmooth(b *testing.B)          { both(b, failsafeSmooth) }
func BenchmarkFailsafeBulkhead(b *testing.B)        { both(b, failsafeBulkhead) }
func BenchmarkSluiceConcurrency(b *testing.B)       { both(b, sluiceConcurrency) }
func BenchmarkSluiceWatched(b *testing.B)           { both(b, sluiceWatched) }
func BenchmarkSluiceBlockedClock(b *testing.B)      { both(b, sluiceBlockedClock) }

func both(b *testing.B, p path) {
	b.Run("serial", func(b *testing.B) { p.run(b, false) })
	b.Run("parallel", func(b *testing.B) { p.run(b, true) })
}

// TestAllPathsPass checks that every measured path admits (or, for the
// blocked one, refuses) as intended, so that no benchmark measures an error
// path.
func TestAllPathsPass(t *testing.T) {
	require.Len(t, paths, 21)
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			require.NoError(t, p.verify(1000))
		})
	}
}

// TestAllKindsConfigured checks that the all-kinds engine has one rule of
// each kind on the resource.
func TestAllKindsConfigured(t *testing.T) {
	g, err := newAllKindsEngine()
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	assert.Len(t, g.Rules().Flow, 2, "flow rules: QPS and concurrency")
	assert.Len(t, g.Rules().CircuitBreaker, 1, "circuit breaker rules")
	assert.Len(t, g.Rules().Param, 1, "param rules")
	assert.Len(t, g.Rules().System, 1, "system rules")
}

// TestSluicePassNoAllocs guards the budget's zero allocations on the sluice
// pass paths (the benchmarks report the same figure).
func TestSluicePassNoAllocs(t *testing.T) {
	for _, p := range []path{sluiceOneRule, sluiceAllKinds, sluiceManyResources, sluiceResourcesZipf10k, sluiceParamNone, sluiceParam1M} {
		t.Run(p.name, func(t *testing.T) {
			newOp, done, err := p.setup()
			require.NoError(t, err)
			t.Cleanup(done)
			op := newOp()
			allocs := testing.AllocsPerRun(1000, func() {
				if err := op(); err != nil {
					t.Fatal(err)
				}
			})
			assert.Zero(t, allocs, "allocs per Entry+Exit")
		})
	}
}

func TestSpread(t *testing.T) {
	m, lo, hi := spread([]float64{3, 1, 2})
	assert.Equal(t, []float64{2, 1, 3}, []float64{m, lo, hi})
	m, lo, hi = spread([]float64{4, 1, 3, 2})
	assert.Equal(t, []float64{2.5, 1, 4}, []float64{m, lo, hi})
}

// TestRatiosNameMeasuredPaths checks that every ratio the program prints
// divides two paths it measures.
func TestRatiosNameMeasuredPaths(t *testing.T) {
	names := map[string]bool{}
	for _, p := range paths {
		names[p.name] = true
	}
	for _, q := range ratios {
		assert.True(t, names[q.num.name] && names[q.den.name], q.label)
	}
}

// TestFastestRatio checks the fastest-chunk measurement on two cheap paths.
func TestFastestRatio(t *testing.T) {
	n, d, err := fastestRatio(rateAllow, sluiceBlockedClock)
	require.NoError(t, err)
	assert.Positive(t, n)
	assert.Positive(t, d)
}
