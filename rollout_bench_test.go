package sluice

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
)

// rolloutSets are the rule sets the shadow and tiered benchmarks and
// allocation tests compare: each passing rule enforced and in shadow mode,
// each refusing rule enforced and in shadow mode (a manual clock that never
// moves keeps it refusing), and a tiered rule beside the plain rule of its
// current threshold.
func rolloutSets() []struct {
	name   string
	set    rules.Set
	refuse bool
} {
	flow := func(f rules.Flow) rules.Set { f.Resource = "r"; return rules.Set{Flow: []rules.Flow{f}} }
	param := func(p rules.Param) rules.Set { p.Resource = "r"; return rules.Set{Param: []rules.Param{p}} }
	breaker := rules.CircuitBreaker{Resource: "r", Strategy: rules.ErrorCount, Threshold: 1e9, RetryTimeout: 1e9}
	return []struct {
		name   string
		set    rules.Set
		refuse bool
	}{
		{"qps/enforced", flow(rules.Flow{Threshold: 1e12}), false},
		{"qps/shadow", flow(rules.Flow{Threshold: 1e12, Shadow: true}), false},
		{"concurrency/enforced", flow(rules.Flow{Metric: rules.Concurrency, Threshold: 1e9}), false},
		{"concurrency/shadow", flow(rules.Flow{Metric: rules.Concurrency, Threshold: 1e9, Shadow: true}), false},
		{"token-bucket/enforced", flow(rules.Flow{Threshold: 1e12, Bucket: &rules.Bucket{}}), false},
		{"token-bucket/shadow", flow(rules.Flow{Threshold: 1e12, Bucket: &rules.Bucket{}, Shadow: true}), false},
		{"param/enforced", param(rules.Param{Threshold: 1e12}), false},
		{"param/shadow", param(rules.Param{Threshold: 1e12, Shadow: true}), false},
		{"breaker/enforced", rules.Set{CircuitBreaker: []rules.CircuitBreaker{breaker}}, false},
		{"breaker/shadow", rules.Set{CircuitBreaker: []rules.CircuitBreaker{func() rules.CircuitBreaker { b := breaker; b.Shadow = true; return b }()}}, false},
		{"tiered/plain", flow(rules.Flow{Threshold: 1e12}), false},
		{"tiered/tiered", flow(rules.Flow{Threshold: 1e12, Tiers: []rules.Tier{{Above: 100, Below: 80, Threshold: 5e11}, {Above: 200, Threshold: 1e11}}}), false},
		{"qps-refusing/enforced", flow(rules.Flow{Threshold: 1}), true},
		{"qps-refusing/shadow", flow(rules.Flow{Threshold: 1, Shadow: true}), true},
		{"param-refusing/enforced", param(rules.Param{Threshold: 1}), true},
		{"param-refusing/shadow", param(rules.Param{Threshold: 1, Shadow: true}), true},
	}
}

// rolloutEngine loads set into an engine on a manual clock that never
// moves, and uses up the first admission of a refusing set.
func rolloutEngine(tb testing.TB, set rules.Set, refuse bool) *Engine {
	tb.Helper()
	g := New(WithClock(sluicetest.NewManualClock(1)))
	tb.Cleanup(func() { _ = g.Close() })
	require.NoError(tb, g.LoadRules(set))
	if refuse {
		p, err := g.Entry("r", WithStringArg(0, "k"))
		require.NoError(tb, err)
		p.Exit()
	}
	return g
}

// BenchmarkShadowTiered: Entry+Exit under each rule enforced and in shadow
// mode, and under a tiered rule beside the plain rule of its current
// threshold (pairs side by side in one run). A shadow rule's refusing pair
// is a refused Entry against one that passes, counting the would-be
// refusal.
func BenchmarkShadowTiered(b *testing.B) {
	for _, c := range rolloutSets() {
		b.Run(c.name, func(b *testing.B) {
			g := rolloutEngine(b, c.set, c.refuse)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p, _ := g.Entry("r", WithStringArg(0, "k"))
				p.Exit()
			}
		})
	}
}

// TestShadowTieredAllocs: a shadow rule allocates what its enforced rule
// does: nothing when it admits (the would-be refusal of a rule in shadow
// mode costs what the refusal costs, its *BlockError), and a tiered rule
// nothing.
func TestShadowTieredAllocs(t *testing.T) {
	allocs := map[string]float64{}
	for _, c := range rolloutSets() {
		g := rolloutEngine(t, c.set, c.refuse)
		allocs[c.name] = testing.AllocsPerRun(200, func() {
			p, _ := g.Entry("r", WithStringArg(0, "k"))
			p.Exit()
		})
		if !c.refuse {
			assert.Zero(t, allocs[c.name], c.name)
		}
	}
	assert.Equal(t, allocs["qps-refusing/enforced"], allocs["qps-refusing/shadow"])
	assert.Equal(t, allocs["param-refusing/enforced"], allocs["param-refusing/shadow"])
}
