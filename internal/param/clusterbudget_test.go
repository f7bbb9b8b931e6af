package param

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
	"github.com/sluice-go/sluice/internal/lease"
	"github.com/sluice-go/sluice/rules"
)

// clusterBucketModel is one value's token bucket in the store: burst
// tokens, full at first use, refilled at limit per interval.
type clusterBucketModel struct {
	limit, burst float64
	interval     int64
	tok          float64
	last         int64
	used         bool
}

// take decides one request at now, and the wait a refused one is told.
func (m *clusterBucketModel) take(now int64) (bool, time.Duration) {
	if !m.used {
		m.tok, m.used = m.burst, true
	} else {
		m.tok = math.Min(m.burst, m.tok+float64(now-m.last)*m.limit/float64(m.interval))
	}
	m.last = now
	if m.tok >= 1 {
		m.tok--
		return true, 0
	}
	return false, time.Duration(math.Ceil((1 - m.tok) * float64(m.interval) / m.limit))
}

// budgetEnter runs one entry of value v at the clock's now, asking for its
// budget.
func (f *fleet) budgetEnter(c *Controller, v string) (*core.BlockError, core.Budget) {
	ec := &entry.Context{Resource: "res", Batch: 1, Start: f.clk.Nanotime(), WantBudget: true}
	be := c.CheckKey(context.Background(), ec, v, f.clk)
	return be, ec.Budget
}

// TestClusterBudgetAgreesWithModel: a strict cluster param rule (5+2 per
// 10 s per value, shared by 3 instances, per-value budgets in the store)
// reports the fleet's bucket for the value: Limit 7, Window 14 s,
// Remaining 0 (this instance holds nothing), Reset the refusal's
// RetryAfter (the model's, exact) or on a pass the Window; entries arrive
// at adversarial instants from any instance for two values, and a reload
// to 3+2 half way changes the terms. A per-instance rule's budget is the
// fleet's (times the live instances), and with leases Remaining is what
// this instance holds: exactly that many more entries pass without asking
// the store.
func TestClusterBudgetAgreesWithModel(t *testing.T) {
	for seed := int64(1); seed <= 10; seed++ {
		rng := rand.New(rand.NewSource(seed))
		f := newFleet(t, 3)
		r := rules.Param{Key: "user", Threshold: 5, Burst: 2, Duration: 10 * time.Second, Cluster: &rules.Cluster{}}
		cs := make([]*Controller, 3)
		olds := make([]map[string][]*Controller, 3)
		for i := range cs {
			cs[i], olds[i] = f.build(t, i, r, nil)
		}
		models := map[string]*clusterBucketModel{}
		model := func(v string) *clusterBucketModel {
			if models[v] == nil {
				models[v] = &clusterBucketModel{limit: float64(r.Threshold), burst: float64(r.Threshold + r.Burst), interval: int64(r.Duration)}
			}
			return models[v]
		}
		slot := int64(r.Duration) / (r.Threshold)
		for step := 0; step < 300; step++ {
			if step == 150 {
				r.Threshold = 3
				for i := range cs {
					cs[i], olds[i] = f.build(t, i, r, olds[i])
				}
				for _, m := range models {
					m.limit, m.burst = 3, 5
				}
				slot = int64(r.Duration) / r.Threshold
			}
			now := f.clk.Nanotime()
			gap := int64(0)
			switch rng.Intn(5) {
			case 0:
				gap = 1
			case 1:
				gap = (now/slot+1)*slot - now
			case 2:
				gap = rng.Int63n(slot)
			case 3:
				gap = 3 * slot
			}
			f.clk.Advance(time.Duration(gap))
			v := []string{"alice", "bob"}[rng.Intn(2)]
			be, got := f.budgetEnter(cs[rng.Intn(3)], v)
			ok, retry := model(v).take(f.clk.Nanotime())
			where := fmt.Sprintf("seed %d step %d value %s", seed, step, v)
			require.Equal(t, ok, be == nil, "%s: %v", where, be)
			limit := float64(r.Threshold + r.Burst)
			window := time.Duration(limit * float64(r.Duration) / float64(r.Threshold))
			want := core.Budget{Limit: limit, Window: window, Reset: window, Rule: core.RuleRef{Metric: "qps"}}
			if !ok {
				want.Reset = retry
				require.Equal(t, retry, be.RetryAfter, where)
			}
			require.Equal(t, want, got, where)
		}
	}

	// Per instance: the fleet's budget, 5+2 times 3 live instances.
	f := newFleet(t, 3)
	c, _ := f.build(t, 0, rules.Param{Key: "user", Threshold: 5, Burst: 2, Duration: 10 * time.Second,
		Cluster: &rules.Cluster{Mode: rules.ClusterPerInstance}}, nil)
	be, got := f.budgetEnter(c, "alice")
	require.Nil(t, be)
	require.Equal(t, core.Budget{Limit: 21, Window: 14 * time.Second, Reset: 14 * time.Second, Rule: core.RuleRef{Metric: "qps"}}, got)

	// Leases: Remaining is what the value's Limiter holds; that many pass
	// without a Take, and the next asks the store.
	f = newFleet(t, 1)
	c, _ = f.build(t, 0, rules.Param{Key: "user", Threshold: 1000, Duration: time.Minute, Cluster: &rules.Cluster{Leases: true}}, nil)
	be, got = f.budgetEnter(c, "alice")
	require.Nil(t, be)
	require.Positive(t, got.Remaining)
	require.Equal(t, float64(1000), got.Limit)
	// The held permits decide those entries: none waits for the store. (A
	// refill asked ahead as the lease runs low is a Take too, sent on the
	// Manager's goroutine: counting Takes raced with it on a loaded host.)
	lim := soleLimiter(t, c)
	before := lim.Stats()
	prev := got.Remaining
	for i := int64(0); i < got.Remaining; i++ {
		be, b := f.budgetEnter(c, "alice")
		require.Nil(t, be)
		// Each entry spends one of the held permits, unless a grant asked
		// ahead has arrived meanwhile and joined them.
		if lim.Stats().Prefetches == before.Prefetches {
			require.Equal(t, prev-1, b.Remaining, "entry %d", i)
		}
		prev = b.Remaining
	}
	after := lim.Stats()
	require.Equal(t, before.Waits, after.Waits, "the permits held decided them")
	require.Equal(t, before.Refills-before.Prefetches, after.Refills-after.Prefetches, "no refill but ahead of need")
}

// soleLimiter returns the lease.Limiter of the one value c's leasing
// cluster rule holds.
func soleLimiter(t *testing.T, c *Controller) *lease.Limiter {
	t.Helper()
	lc := c.cl.leases
	lc.mu.Lock()
	defer lc.mu.Unlock()
	require.Len(t, lc.m, 1)
	for _, e := range lc.m {
		return e.lim
	}
	return nil
}
