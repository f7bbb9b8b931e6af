package flow

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/rules"
)

// refBudgetModel is the other resource's passes per 100 ms bucket: the
// budget of a rule on it is its headroom in the one-second window.
type refBudgetModel struct {
	limit  float64
	counts map[int64]int64
}

func (m *refBudgetModel) decide(now int64) (bool, core.Budget) {
	w := int64(100 * time.Millisecond)
	e := now / w
	var sum int64
	newest := int64(math.MinInt64)
	for k := e - 9; k <= e; k++ {
		sum += m.counts[k]
		if m.counts[k] > 0 {
			newest = k
		}
	}
	b := core.Budget{Limit: m.limit, Remaining: int64(max(math.Floor(m.limit-float64(sum)), 0)), Window: time.Second}
	if newest != math.MinInt64 {
		b.Reset = time.Duration((newest+10)*w - now)
	}
	return float64(sum) <= m.limit, b
}

// TestBudgetRefResourceAgreesWithModel: a rule counting another resource
// (RefResource, QPS) reports that resource's headroom, checked against a
// model on a manual clock: the other resource's traffic and this one's
// entries arrive at adversarial instants around its bucket boundaries, in
// batches, with a reload of the threshold half way; every decision and
// every budget agree, a refusal's Reset is no earlier than its
// RetryAfter, and at Reset the budget is whole. The concurrency metric
// reports nothing.
func TestBudgetRefResourceAgreesWithModel(t *testing.T) {
	width := int64(100 * time.Millisecond)
	for seed := int64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewSource(seed))
		nf := nodes(nil)
		rule := rules.Flow{Resource: "r", RefResource: "other", Threshold: 6.5}
		cs, err := Build([]rules.Flow{rule}, nil, nf, nil)
		require.NoError(t, err)
		c := cs["r"][0]
		other := nf("other")
		m := &refBudgetModel{limit: rule.Threshold, counts: map[int64]int64{}}
		now := int64(1_000_000_007)
		for step := 0; step < 400; step++ {
			if step == 200 {
				rule.Threshold = 3
				cs, err = Build([]rules.Flow{rule}, cs, nf, nil)
				require.NoError(t, err)
				c = cs["r"][0]
				m.limit = 3
			}
			now += adversarialGap(rng, now, width)
			if rng.Intn(2) == 0 {
				n := 1 + rng.Int63n(3)
				other.AddPass(now, n)
				m.counts[now/width] += n
				continue
			}
			where := fmt.Sprintf("seed %d step %d at %d", seed, step, now)
			be, got := budgetCheck(c, now, 1+rng.Int63n(3))
			ok, want := m.decide(now)
			require.Equal(t, ok, be == nil, "%s: decision (%v)", where, be)
			require.Equal(t, core.RuleRef{Metric: "qps"}, got.Rule, where)
			got.Rule = core.RuleRef{}
			require.Equal(t, want, got, where)
			if be != nil {
				// RetryAfter is rounded up to the millisecond; Reset is exact.
				require.GreaterOrEqual(t, got.Reset, be.RetryAfter-time.Millisecond+1, where)
				// At Reset the other resource's window is empty.
				be, whole := budgetCheck(c, now+int64(got.Reset), 1)
				require.Nil(t, be, where)
				require.Equal(t, int64(math.Floor(m.limit)), whole.Remaining, where)
				require.Zero(t, whole.Reset, where)
			}
		}
	}

	// The concurrency metric: a limit on what is in flight elsewhere, no
	// rate; the budget stays as the rules before left it.
	nf := nodes(nil)
	cs, err := Build([]rules.Flow{{Resource: "r", RefResource: "other", Metric: rules.Concurrency, Threshold: 1}}, nil, nf, nil)
	require.NoError(t, err)
	ec := newEntry(5, 1)
	ec.WantBudget = true
	ec.Budget = core.Budget{Limit: 9, Remaining: 4}
	require.Nil(t, cs["r"][0].Check(context.Background(), ec, &zeroClock{}))
	require.Equal(t, core.Budget{Limit: 9, Remaining: 4}, ec.Budget)
}

// TestBudgetAdaptiveReportsNothing: an adaptive concurrency rule limits
// what is in flight, not a rate: no Limit per Window, nothing refills, so
// it reports no budget, passing or refusing, and leaves the one the rate
// rules before it noted (a refusal by it included), as concurrency rules
// do (docs/rules.md, "Remaining budget").
func TestBudgetAdaptiveReportsNothing(t *testing.T) {
	cs, err := Build([]rules.Flow{{Resource: "r", Metric: rules.Concurrency, Threshold: 1,
		Adaptive: &rules.Adaptive{Min: 1, Max: 1, Initial: 1}}}, nil, nodes(nil), nil)
	require.NoError(t, err)
	c := cs["r"][0]
	before := core.Budget{Limit: 10, Remaining: 3, Reset: time.Second, Window: time.Second}
	check := func() (*core.BlockError, *entry.Context) {
		ec := newEntry(int64(time.Second), 1)
		ec.WantBudget = true
		ec.Budget = before
		return c.Check(context.Background(), ec, &zeroClock{}), ec
	}
	be, first := check()
	require.Nil(t, be)
	require.Equal(t, before, first.Budget)
	be, ec := check() // the limit of 1 is in flight
	require.NotNil(t, be)
	require.Equal(t, before, ec.Budget)
}
