package sluice

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/slots"
)

// TestBudgetOnPassAndRefusal: WithBudget fills the budget of the lone QPS
// rule (the Gate's path) on a pass, through Entry and Do, and on a
// refusal, on a manual clock: 5 per second, counted in buckets of 100 ms.
func TestBudgetOnPassAndRefusal(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	mustLoadFlow(t, g, rules.Flow{ID: "api", Resource: "r", Threshold: 5})
	clk.Set(int64(250 * time.Millisecond)) // bucket 2: its counts leave at 1.2 s
	var b core.Budget
	p, err := g.Entry("r", WithBudget(&b))
	require.NoError(t, err)
	p.Exit()
	want := core.Budget{Limit: 5, Remaining: 4, Reset: 950 * time.Millisecond, Window: time.Second, Rule: core.RuleRef{ID: "api", Metric: "qps"}}
	assert.Equal(t, want, b)

	require.NoError(t, g.Do("r", func() error { return nil }, WithBudget(&b), WithBatch(3)))
	want.Remaining = 1
	assert.Equal(t, want, b)

	// Refused: the batch of 2 does not fit; one request still would.
	_, err = g.Entry("r", WithBatch(2), WithBudget(&b))
	require.ErrorIs(t, err, core.ErrBlocked)
	assert.Equal(t, want, b)

	// A second later the counts of bucket 2 have left: the budget is whole.
	clk.Set(int64(1200 * time.Millisecond))
	require.NoError(t, g.Do("r", func() error { return nil }, WithBudget(&b)))
	want.Remaining, want.Reset = 4, time.Second
	assert.Equal(t, want, b)

	// Without the option nothing is written; a nil pointer is ignored.
	b = core.Budget{}
	require.NoError(t, g.Do("r", func() error { return nil }, WithBudget(nil)))
	assert.Zero(t, b)
}

// TestBudgetTightestRule: with several rate rules the entry hears the one
// with the least remaining relative to its limit; a refusal reports the
// refusing rule's; rules that do not limit a rate (concurrency), rules in
// shadow mode and resources without rules tell nothing.
func TestBudgetTightestRule(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	mustLoadFlow(t, g,
		rules.Flow{ID: "wide", Resource: "r", Threshold: 100},
		rules.Flow{ID: "bucket", Resource: "r", Threshold: 10, Bucket: &rules.Bucket{Burst: 3}},
		rules.Flow{ID: "shadow", Resource: "r", Threshold: 1, StatInterval: 2 * time.Second, Shadow: true},
		rules.Flow{ID: "inflight", Resource: "r", Threshold: 100, Metric: rules.Concurrency},
	)
	var b core.Budget
	require.NoError(t, g.Do("r", func() error { return nil }, WithBudget(&b)))
	assert.Equal(t, "bucket", b.Rule.ID, "%+v", b)
	assert.Equal(t, float64(3), b.Limit)
	assert.Equal(t, int64(2), b.Remaining)
	assert.Equal(t, 100*time.Millisecond, b.Reset)
	assert.Equal(t, 300*time.Millisecond, b.Window)

	require.NoError(t, g.Do("r", func() error { return nil }, WithBudget(&b), WithBatch(2)))
	assert.Equal(t, int64(0), b.Remaining)
	err := g.Do("r", func() error { return nil }, WithBudget(&b))
	var be *core.BlockError
	require.True(t, errors.As(err, &be))
	assert.Equal(t, "bucket", be.Rule.ID)
	assert.Equal(t, "bucket", b.Rule.ID)
	assert.Equal(t, int64(0), b.Remaining)
	assert.Equal(t, 300*time.Millisecond, b.Reset)

	// A param rule tighter than every flow rule: 2 per second per user.
	_, err = loadParams(g, []rules.Param{{ID: "per-user", Resource: "r", Index: 0, Threshold: 2}})
	require.NoError(t, err)
	mustLoadFlow(t, g, rules.Flow{ID: "wide", Resource: "r", Threshold: 100})
	require.NoError(t, g.Do("r", func() error { return nil }, WithBudget(&b), WithStringArg(0, "ann")))
	assert.Equal(t, core.Budget{Limit: 2, Remaining: 1, Reset: 500 * time.Millisecond, Window: time.Second, Rule: core.RuleRef{ID: "per-user", Metric: "qps"}}, b)
	// Without the argument the param rule does not apply.
	require.NoError(t, g.Do("r", func() error { return nil }, WithBudget(&b)))
	assert.Equal(t, "wide", b.Rule.ID)
	assert.Equal(t, int64(100-5), b.Remaining, "five admitted in the window, the refused one given back")

	// No rules: the zero Budget.
	b = core.Budget{Limit: 9}
	require.NoError(t, g.Do("other", func() error { return nil }, WithBudget(&b)))
	assert.Zero(t, b)
}

// TestBudgetWithCustomSlots: the budget is filled on the path of an engine
// with custom slots too, and a custom slot's refusal leaves what the rate
// rules before it noted.
func TestBudgetWithCustomSlots(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	slot := &refusingSlot{}
	require.NoError(t, g.RegisterSlot(slot, 0))
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 10, Bucket: &rules.Bucket{}})
	var b core.Budget
	require.NoError(t, g.Do("r", func() error { return nil }, WithBudget(&b)))
	assert.Equal(t, int64(9), b.Remaining)
	slot.refuse = true
	require.ErrorIs(t, g.Do("r", func() error { return nil }, WithBudget(&b)), core.ErrBlocked)
	assert.Equal(t, int64(8), b.Remaining, "the rate rule took the entry's token before the custom slot refused it")
}

// TestAllocBudget: asking for the budget allocates nothing on the pass
// path, through Entry and Do, on the Gate's path and the rule set's (run
// without -race: make allocs).
func TestAllocBudget(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes inlining; make allocs runs this without it")
	}
	g, _ := newTestEngine(t, 0)
	mustLoadFlow(t, g, rules.Flow{Resource: "gate", Threshold: 1e12})
	mustLoadFlow(t, g, rules.Flow{Resource: "gate", Threshold: 1e12},
		rules.Flow{Resource: "set", Threshold: 1e12}, rules.Flow{Resource: "set", Threshold: 1e12, Bucket: &rules.Bucket{}})
	var b core.Budget
	for _, res := range []string{"gate", "set"} {
		assert.Zero(t, testing.AllocsPerRun(200, func() {
			p, _ := g.Entry(res, WithBudget(&b))
			p.Exit()
		}), "Entry on %s", res)
		assert.Zero(t, testing.AllocsPerRun(200, func() {
			_ = g.Do(res, func() error { return nil }, WithBudget(&b))
		}), "Do on %s", res)
		assert.Positive(t, b.Limit)
	}
}

// refusingSlot is a custom check that refuses while refuse is set.
type refusingSlot struct{ refuse bool }

func (s *refusingSlot) Check(*slots.Entry) *core.BlockError {
	if s.refuse {
		return &core.BlockError{Reason: "custom"}
	}
	return nil
}

// TestBudgetConcurrent: 8 goroutines enter a resource of 100 per second at
// one frozen instant, each asking for its budget (under -race in make
// test): the 100 passes report each remaining count from 99 down to 0
// exactly once (each admission is one step of the window's counter, and
// its budget is read from that step), and every refusal reports 0.
func TestBudgetConcurrent(t *testing.T) {
	g, _ := newTestEngine(t, int64(time.Hour))
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 100})
	const workers, each = 8, 40
	seen := make([][]int64, workers)
	refused := make([][]int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				var b core.Budget
				p, err := g.Entry("r", WithBudget(&b))
				if err != nil {
					refused[w] = append(refused[w], b.Remaining)
					continue
				}
				p.Exit()
				seen[w] = append(seen[w], b.Remaining)
			}
		}()
	}
	wg.Wait()
	count := map[int64]int{}
	for w := range workers {
		for _, r := range seen[w] {
			count[r]++
		}
		for _, r := range refused[w] {
			assert.Zero(t, r)
		}
	}
	require.Len(t, count, 100)
	for r := int64(0); r < 100; r++ {
		assert.Equal(t, 1, count[r], "remaining %d", r)
	}
}
