package sluice

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
)

// The remaining budget of calendar quotas, checked on a manual clock
// against a model that knows the period from the test's table (not from
// a calendar of its own): Limit the threshold, Remaining the threshold
// less the period's units, Reset the time to the period's end, Window the
// period's length.

// quotaBudgetModel is one period [start, end) of a quota of limit units.
type quotaBudgetModel struct {
	limit, start, end, used int64
}

func (m *quotaBudgetModel) decide(now, n int64) (bool, core.Budget) {
	ok := m.used+n <= m.limit
	if ok {
		m.used += n
	}
	return ok, core.Budget{Limit: float64(m.limit), Remaining: max(m.limit-m.used, 0),
		Reset: time.Duration(m.end - now), Window: time.Duration(m.end - m.start)}
}

// enterBudget makes one entry of batch n asking for its budget.
func enterBudget(t testing.TB, g *Engine, res string, n int, opts ...EntryOption) (*core.BlockError, core.Budget) {
	t.Helper()
	var b core.Budget
	p, err := g.Entry(res, append(opts, WithBatch(n), WithBudget(&b))...)
	if err == nil {
		p.Exit()
		return nil, b
	}
	var be *core.BlockError
	require.True(t, errors.As(err, &be), "%v", err)
	return be, b
}

// TestQuotaBudgetMonthExample: 3 per month; at 2026-01-31 23:59:59 after
// 3 calls Remaining is 0 and Reset 1 s, on the third pass and on the
// refusal alike; at 2026-02-01 00:00:00 one call leaves 2 of February's
// 28 days.
func TestQuotaBudgetMonthExample(t *testing.T) {
	g, clk := newTestEngine(t, unixAt(t, "2026-01-31T23:59:59Z"))
	mustLoadFlow(t, g, rules.Flow{ID: "plan", Resource: "api", Threshold: 3, Quota: &rules.Quota{Period: "month"}})
	january := 31 * 24 * time.Hour
	for i := int64(1); i <= 3; i++ {
		be, b := enterBudget(t, g, "api", 1)
		require.Nil(t, be)
		assert.Equal(t, core.Budget{Limit: 3, Remaining: 3 - i, Reset: time.Second, Window: january, Rule: core.RuleRef{ID: "plan", Metric: "qps"}}, b)
	}
	be, b := enterBudget(t, g, "api", 1)
	require.NotNil(t, be)
	assert.Equal(t, core.Budget{Limit: 3, Remaining: 0, Reset: time.Second, Window: january, Rule: core.RuleRef{ID: "plan", Metric: "qps"}}, b)
	assert.Equal(t, be.RetryAfter, b.Reset)

	clk.Set(unixAt(t, "2026-02-01T00:00:00Z"))
	be, b = enterBudget(t, g, "api", 1)
	require.Nil(t, be)
	assert.Equal(t, int64(2), b.Remaining)
	assert.Equal(t, 28*24*time.Hour, b.Reset)
	assert.Equal(t, 28*24*time.Hour, b.Window)
}

// TestQuotaBudgetAgreesWithModel runs every boundary of the quota tests
// (month ends, leap days, 23- and 25-hour days, a day without a midnight,
// a skipped day, a half hour, a week from Sunday) with batches, refusals
// at the period's last second and nanosecond, and a reload in the middle
// that keeps the count and raises the threshold.
func TestQuotaBudgetAgreesWithModel(t *testing.T) {
	for _, c := range quotaBoundaryCases {
		t.Run(c.name, func(t *testing.T) {
			start, next := unixAt(t, c.start), unixAt(t, c.next)
			g, clk := newTestEngine(t, start)
			q := c.q
			r := rules.Flow{Resource: "api", Threshold: 5, Quota: &q}
			mustLoadFlow(t, g, r)
			m := &quotaBudgetModel{limit: 5, start: start, end: next}
			steps := []struct {
				at     int64
				n      int
				reload bool
			}{
				{start, 2, false}, {start + 1, 1, false}, {start + 1, 3, false}, // 3 of 5, then refused
				{start + 2, 1, true}, // reloaded at 6: count kept, 4 of 6
				{next - int64(time.Second), 3, false}, {next - int64(time.Second), 2, false},
				{next - 1, 1, false}, {next - 1, 6, false},
			}
			for i, s := range steps {
				if s.reload {
					r.Threshold = 6
					mustLoadFlow(t, g, r)
					m.limit = 6
				}
				clk.Set(s.at)
				be, b := enterBudget(t, g, "api", s.n)
				ok, want := m.decide(s.at, int64(s.n))
				want.Rule.Metric = "qps"
				require.Equal(t, ok, be == nil, "step %d", i)
				require.Equal(t, want, b, "step %d", i)
				if be != nil {
					require.Equal(t, be.RetryAfter, b.Reset, "step %d: Reset is the refusal's RetryAfter", i)
				}
			}
			// The next period: a new count, its own length and reset.
			clk.Set(next)
			be, b := enterBudget(t, g, "api", 2)
			require.Nil(t, be)
			require.Equal(t, int64(4), b.Remaining)
			require.Equal(t, b.Window, b.Reset, "at the period's first instant the reset is the whole period")
			require.GreaterOrEqual(t, b.Window, 30*time.Minute)
		})
	}
}

// TestQuotaBudgetTightest: a quota takes part in the choice of the
// tightest rule like every rate rule, and a refusing quota's budget is
// the one the entry hears.
func TestQuotaBudgetTightest(t *testing.T) {
	g, _ := newTestEngine(t, unixAt(t, "2026-06-10T08:00:00Z"))
	mustLoadFlow(t, g,
		rules.Flow{ID: "rate", Resource: "api", Threshold: 4},
		rules.Flow{ID: "plan", Resource: "api", Threshold: 10, Quota: &rules.Quota{Period: "day"}})
	_, b := enterBudget(t, g, "api", 1)
	assert.Equal(t, "rate", b.Rule.ID, "3 of 4 is tighter than 9 of 10")
	_, b = enterBudget(t, g, "api", 3)
	assert.Equal(t, "rate", b.Rule.ID, "0 of 4")

	g, _ = newTestEngine(t, unixAt(t, "2026-06-10T08:00:00Z"))
	mustLoadFlow(t, g,
		rules.Flow{ID: "rate", Resource: "api", Threshold: 100},
		rules.Flow{ID: "plan", Resource: "api", Threshold: 3, Quota: &rules.Quota{Period: "day"}})
	_, b = enterBudget(t, g, "api", 1)
	assert.Equal(t, core.Budget{Limit: 3, Remaining: 2, Reset: 16 * time.Hour, Window: 24 * time.Hour, Rule: core.RuleRef{ID: "plan", Metric: "qps"}}, b)
	_, _ = enterBudget(t, g, "api", 2)
	be, b := enterBudget(t, g, "api", 1)
	require.NotNil(t, be)
	assert.Equal(t, "plan", b.Rule.ID)
	assert.Zero(t, b.Remaining)
	assert.Equal(t, be.RetryAfter, b.Reset)

	// In shadow mode a quota tells nothing.
	g, _ = newTestEngine(t, unixAt(t, "2026-06-10T08:00:00Z"))
	mustLoadFlow(t, g, rules.Flow{Resource: "api", Threshold: 3, Shadow: true, Quota: &rules.Quota{Period: "day"}})
	_, b = enterBudget(t, g, "api", 1)
	assert.Zero(t, b)
}

// TestParamQuotaBudget: a per-user quota reports each user's budget;
// the month-end example per user; a new user refused because the table is
// full hears Remaining 0 until the period's end; a reload keeps the counts.
func TestParamQuotaBudget(t *testing.T) {
	g, clk := newTestEngine(t, unixAt(t, "2026-01-31T23:59:59Z"))
	r := rules.Param{ID: "per-user", Resource: "api", Threshold: 3, Capacity: 2, Quota: &rules.Quota{Period: "month"}}
	mustLoadParam(t, g, r)
	january := 31 * 24 * time.Hour
	user := func(u string) EntryOption { return WithStringArg(0, u) }
	ann := &quotaBudgetModel{limit: 3, start: unixAt(t, "2026-01-01T00:00:00Z"), end: unixAt(t, "2026-02-01T00:00:00Z")}
	now := unixAt(t, "2026-01-31T23:59:59Z")
	for i, n := range []int{2, 2, 1, 1} {
		be, b := enterBudget(t, g, "api", n, user("ann"))
		ok, want := ann.decide(now, int64(n))
		want.Rule = core.RuleRef{ID: "per-user", Metric: "qps"}
		require.Equal(t, ok, be == nil, "step %d", i)
		require.Equal(t, want, b, "step %d", i)
		if be != nil {
			require.Equal(t, be.RetryAfter, b.Reset)
		}
	}
	_, b := enterBudget(t, g, "api", 1, user("bob"))
	assert.Equal(t, int64(2), b.Remaining, "bob's own count")
	be, b := enterBudget(t, g, "api", 1, user("cy"))
	require.NotNil(t, be, "the table holds 2 users")
	assert.Equal(t, core.Budget{Limit: 3, Remaining: 0, Reset: time.Second, Window: january, Rule: core.RuleRef{ID: "per-user", Metric: "qps"}}, b)

	r.Threshold = 4 // same calendar: counts kept
	mustLoadParam(t, g, r)
	_, b = enterBudget(t, g, "api", 1, user("bob"))
	assert.Equal(t, int64(2), b.Remaining, "2 of 4 after the reload")

	clk.Set(unixAt(t, "2026-02-01T00:00:00Z"))
	be, b = enterBudget(t, g, "api", 1, user("ann"))
	require.Nil(t, be)
	assert.Equal(t, core.Budget{Limit: 4, Remaining: 3, Reset: 28 * 24 * time.Hour, Window: 28 * 24 * time.Hour, Rule: core.RuleRef{ID: "per-user", Metric: "qps"}}, b)
}

// TestQuotaBudgetCluster: a cluster quota reports what the instance knows
// from the store's answer, which carries no count: Remaining 0 (a lower
// bound) with the threshold, the time to the period's end and its length;
// while the store is down, the local fallback's share and its count.
func TestQuotaBudgetCluster(t *testing.T) {
	clk := sluicetest.NewManualClock(unixAt(t, "2026-01-31T23:59:59Z"))
	st := newFakeStore(clk)
	g := New(WithClock(clk), WithCluster(st, ClusterConfig{App: "shop", InstanceID: "a"}))
	t.Cleanup(func() { _ = g.Close() })
	mustLoadFlow(t, g, rules.Flow{ID: "plan", Resource: "api", Threshold: 3, Quota: &rules.Quota{Period: "month"},
		Cluster: &rules.Cluster{LocalThreshold: 2}})
	ref := core.RuleRef{ID: "plan", Metric: "qps"}
	january := 31 * 24 * time.Hour
	for i := 0; i < 3; i++ {
		be, b := enterBudget(t, g, "api", 1)
		require.Nil(t, be)
		assert.Equal(t, core.Budget{Limit: 3, Remaining: 0, Reset: time.Second, Window: january, Rule: ref}, b)
	}
	be, b := enterBudget(t, g, "api", 1)
	require.NotNil(t, be)
	assert.Equal(t, core.BlockCluster, be.Type)
	assert.Equal(t, core.Budget{Limit: 3, Remaining: 0, Reset: time.Second, Window: january, Rule: ref}, b)
	assert.Equal(t, be.RetryAfter, b.Reset)

	st.setDown(true)
	clk.Set(unixAt(t, "2026-02-01T00:00:00Z"))
	be, b = enterBudget(t, g, "api", 1)
	require.Nil(t, be, "the local share of February")
	feb := 28 * 24 * time.Hour
	assert.Equal(t, core.Budget{Limit: 2, Remaining: 1, Reset: feb, Window: feb, Rule: ref}, b)
	_, _ = enterBudget(t, g, "api", 1)
	be, b = enterBudget(t, g, "api", 1)
	require.NotNil(t, be)
	assert.Equal(t, core.Budget{Limit: 2, Remaining: 0, Reset: feb, Window: feb, Rule: ref}, b)
}

// TestAllocBudgetQuota: asking a quota for its budget costs no
// allocation, flow and param alike.
func TestAllocBudgetQuota(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes inlining; make allocs runs this without it")
	}
	g, _ := newTestEngine(t, unixAt(t, "2026-06-10T08:00:00Z"))
	mustLoadFlow(t, g, rules.Flow{Resource: "flow", Threshold: 1e12, Quota: &rules.Quota{Period: "month", Zone: "Europe/Berlin"}})
	mustLoadParam(t, g, rules.Param{Resource: "param", Threshold: 1e12, Quota: &rules.Quota{Period: "day"}})
	var b core.Budget
	assert.Zero(t, testing.AllocsPerRun(200, func() {
		p, _ := g.Entry("flow", WithBudget(&b))
		p.Exit()
	}), "Entry on a flow quota")
	assert.Positive(t, b.Limit)
	// A param quota's pass allocates what gives the value's units back if a
	// later rule refuses the entry (its undo and the key's copy); asking for
	// the budget adds nothing to that.
	b = core.Budget{}
	with := testing.AllocsPerRun(200, func() {
		p, _ := g.Entry("param", WithStringArg(0, "ann"), WithBudget(&b))
		p.Exit()
	})
	without := testing.AllocsPerRun(200, func() {
		p, _ := g.Entry("param", WithStringArg(0, "ann"))
		p.Exit()
	})
	assert.Equal(t, without, with, "Entry on a param quota")
	assert.Positive(t, b.Limit)
}
