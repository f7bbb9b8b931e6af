package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The benchmarks below measure, in one run, sluice's admission paths beside
// golang.org/x/time/rate Allow and go.uber.org/ratelimit Take, serially and
// with b.RunParallel. Each path is described where it is declared
// (paths.go). Run them with
//
//	go test -run '^$' -bench . -benchmem -count 5 ./examples/benchcompare/

func BenchmarkSluiceOneRule(b *testing.B)  { both(b, sluiceOneRule) }
func BenchmarkSluiceAllKinds(b *testing.B) { both(b, sluiceAllKinds) }
func BenchmarkSluiceBlocked(b *testing.B)  { both(b, sluiceBlocked) }
func BenchmarkRateInfAllow(b *testing.B)   { both(b, rateInfAllow) }
func BenchmarkRateAllow(b *testing.B)      { both(b, rateAllow) }
func BenchmarkRatelimitTake(b *testing.B)  { both(b, ratelimitTake) }

func both(b *testing.B, p path) {
	b.Run("serial", func(b *testing.B) { p.run(b, false) })
	b.Run("parallel", func(b *testing.B) { p.run(b, true) })
}

// TestAllPathsPass checks that every measured path admits (or, for the
// blocked one, refuses) as intended, so that no benchmark measures an error
// path.
func TestAllPathsPass(t *testing.T) {
	require.Len(t, paths, 6)
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
	assert.Len(t, g.FlowRules(), 1, "flow rules")
	assert.Len(t, g.IsolationRules(), 1, "isolation rules")
	assert.Len(t, g.CircuitBreakerRules(), 1, "circuit breaker rules")
	assert.Len(t, g.ParamRules(), 1, "param rules")
	assert.Len(t, g.SystemRules(), 1, "system rules")
}

// TestSluicePassNoAllocs guards the budget's zero allocations on the sluice
// pass paths (the benchmarks report the same figure).
func TestSluicePassNoAllocs(t *testing.T) {
	for _, p := range []path{sluiceOneRule, sluiceAllKinds} {
		t.Run(p.name, func(t *testing.T) {
			op, done, err := p.setup()
			require.NoError(t, err)
			t.Cleanup(done)
			allocs := testing.AllocsPerRun(1000, func() {
				if err := op(); err != nil {
					t.Fatal(err)
				}
			})
			assert.Zero(t, allocs, "allocs per Entry+Exit")
		})
	}
}
