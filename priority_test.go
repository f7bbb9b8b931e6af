package sluice

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/rules"
)

// fill enters res with opts until an entry is refused (at most 2000), and
// returns the passes and the refusal.
func fill(t *testing.T, g *Engine, res string, opts ...EntryOption) ([]Pass, error) {
	t.Helper()
	var held []Pass
	for range 2000 {
		p, err := g.Entry(res, opts...)
		if err != nil {
			return held, err
		}
		held = append(held, p)
	}
	t.Fatal("nothing refused")
	return nil, nil
}

// TestAdaptivePriorityShares: under an adaptive limit of 8 (Min = Max),
// sheddable entries fill three quarters of it (6), default ones the limit
// (2 more), and critical ones a quarter more (2 more): the headroom no other
// entry can take. Snapshot shows the limit.
func TestAdaptivePriorityShares(t *testing.T) {
	g, _ := newTestEngine(t, int64(time.Hour))
	rule := rules.Flow{ID: "a", Resource: "r", Metric: rules.Concurrency, Adaptive: &rules.Adaptive{Min: 8, Max: 8}}
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{rule}}))
	var all []Pass
	for _, c := range []struct {
		p    core.Priority
		want int
	}{{core.PrioritySheddable, 6}, {core.PriorityDefault, 2}, {core.PriorityCritical, 2}} {
		held, err := fill(t, g, "r", WithPriority(c.p))
		assert.Len(t, held, c.want, "%v entries admitted", c.p)
		var be *core.BlockError
		require.True(t, errors.As(err, &be))
		assert.Equal(t, core.BlockFlow, be.Type)
		assert.Equal(t, "a", be.Rule.ID)
		all = append(all, held...)
	}
	s, ok := g.Snapshot("r")
	require.True(t, ok)
	assert.Equal(t, int64(8), s.AdaptiveLimit)
	assert.Equal(t, int64(10), s.Concurrency)
	for _, p := range all {
		p.Exit()
	}
	// A priority other than the three reads as the default.
	held, _ := fill(t, g, "r", WithPriority(core.Priority(9)))
	assert.Len(t, held, 8)
	for _, p := range held {
		p.Exit()
	}
}

// TestSystemBBRPriorityShares: with CPU over a BBR rule's threshold and a
// capacity of 10 in flight (as TestSystemBBRThroughEngine), sheddable
// entries are refused past three quarters of it (admitted while fewer than 8
// are in flight), default ones past it (11), critical ones past a quarter
// more (13).
func TestSystemBBRPriorityShares(t *testing.T) {
	g, clk, src := sysEngine(t)
	rule := rules.System{Metric: rules.CPUUsage, Threshold: 0.8, Strategy: rules.BBR}
	require.NoError(t, g.LoadRules(rules.Set{System: []rules.System{rule}}))
	waitSampler(t, clk)
	var held []Pass
	for range 10 {
		p, err := g.Entry("GET /a")
		require.NoError(t, err)
		held = append(held, p)
	}
	clk.Advance(100 * time.Millisecond)
	for _, p := range held {
		p.Exit()
	}
	src.cpu.Store(0.95)
	clk.Advance(900 * time.Millisecond)
	waitSampler(t, clk)

	var all []Pass
	for _, c := range []struct {
		p    core.Priority
		want int
	}{{core.PrioritySheddable, 8}, {core.PriorityDefault, 3}, {core.PriorityCritical, 2}} {
		held, err := fill(t, g, "GET /a", WithPriority(c.p))
		assert.Len(t, held, c.want, "%v entries admitted", c.p)
		systemBlock(t, err, rule, 0.95)
		all = append(all, held...)
	}
	for _, p := range all {
		p.Exit()
	}
}

// TestAdaptiveRuleFindsTheKnee drives an adaptive rule through the engine
// on the manual clock against a closed-loop service: each round, as many
// entries as the rule admits run together and all exit after 10 ms, or
// 10 ms × n/20 when n > 20 run (the service does 20 at once without
// queueing). From a limit of 4, and from 200, the limit settles within 20%
// of 20 and stays there.
func TestAdaptiveRuleFindsTheKnee(t *testing.T) {
	for _, initial := range []int64{4, 200} {
		g, clk := newTestEngine(t, int64(time.Hour))
		rule := rules.Flow{Resource: "r", Metric: rules.Concurrency, Adaptive: &rules.Adaptive{Min: 1, Max: 1000, Initial: initial}}
		require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{rule}}))
		var limits []int64
		for round := range 600 {
			held, _ := fill(t, g, "r")
			n := len(held)
			clk.Advance(10 * time.Millisecond * time.Duration(max(n, 20)) / 20)
			for _, p := range held {
				p.Exit()
			}
			if round >= 400 {
				s, _ := g.Snapshot("r")
				limits = append(limits, s.AdaptiveLimit)
			}
		}
		for _, l := range limits {
			require.True(t, l >= 16 && l <= 24, "from %d: limit %d not within 20%% of 20 after settling (%v)", initial, l, limits)
		}
	}
}

// TestAdaptiveCancelledExitsAreNotSamples: entries that exit with
// context.Canceled recorded give no RT sample. A window of them alone (fast
// exits) decides nothing; counted, they would have been a window of
// near-zero RTs.
func TestAdaptiveCancelledExitsAreNotSamples(t *testing.T) {
	g, clk := newTestEngine(t, int64(time.Hour))
	rule := rules.Flow{Resource: "r", Metric: rules.Concurrency, Adaptive: &rules.Adaptive{Initial: 10, Max: 100, Window: time.Millisecond}}
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{rule}}))
	for range 200 {
		p, err := g.Entry("r")
		require.NoError(t, err)
		clk.Advance(time.Millisecond)
		p.SetError(context.Canceled)
		p.Exit()
	}
	s, _ := g.Snapshot("r")
	assert.Equal(t, int64(10), s.AdaptiveLimit, "the limit moved on cancelled exits")
	// The same exits without the cancellation are samples: the first
	// window decides (a probe halves the limit).
	for range 20 {
		p, _ := g.Entry("r")
		clk.Advance(time.Millisecond)
		p.Exit()
	}
	s, _ = g.Snapshot("r")
	assert.Equal(t, int64(5), s.AdaptiveLimit)
}

func TestAdaptiveEntryExitAllocatesNothing(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	rule := rules.Flow{Resource: "r", Metric: rules.Concurrency, Adaptive: &rules.Adaptive{Min: 1000, Max: 1000}}
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{rule, {Resource: "q", Threshold: 1e12, PriorityWait: time.Millisecond}}}))
	for _, tt := range []struct {
		name string
		run  func()
	}{
		{"adaptive", func() { p, _ := g.Entry("r"); p.Exit() }},
		{"adaptive with priority", func() { p, _ := g.Entry("r", WithPriority(core.PriorityCritical)); p.Exit() }},
		{"qps with priority wait", func() { p, _ := g.Entry("q", WithPriority(core.PriorityCritical)); p.Exit() }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if raceEnabled && strings.Contains(tt.name, "priority") {
				t.Skip("the race detector changes inlining; make test checks this without -race (make allocs)")
			}
			assert.Zero(t, testing.AllocsPerRun(200, tt.run))
		})
	}
}

// TestPriorityWaitThroughTheEngine: a lone one-second QPS rule with
// PriorityWait (which the resource's fast gate would otherwise decide
// alone) lets a critical entry over the threshold wait for the window's
// next bucket, and refuses the others at once.
func TestPriorityWaitThroughTheEngine(t *testing.T) {
	g, clk := newTestEngine(t, int64(time.Hour)+int64(50*time.Millisecond))
	rule := rules.Flow{Resource: "r", Threshold: 3, PriorityWait: 100 * time.Millisecond}
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{rule}}))
	for range 3 {
		require.True(t, try(g, "r"))
	}
	require.False(t, try(g, "r"), "a default entry over the threshold")
	require.False(t, try(g, "r", WithPriority(core.PrioritySheddable)))
	// The three admissions are in the bucket that started 50 ms ago; the
	// window's next bucket (50 ms away) still has it in its window, so a
	// critical entry cannot borrow it either.
	require.False(t, try(g, "r", WithPriority(core.PriorityCritical)))
	// 901 ms later the window's last bucket began 1 ms ago; the first
	// bucket, with the three admissions, leaves the window when the next
	// starts, 99 ms away: a default entry is refused, a critical one waits
	// for the next bucket and is counted there.
	clk.Advance(901 * time.Millisecond)
	require.False(t, try(g, "r"))
	done := make(chan error, 1)
	before := clk.Waiters()
	go func() {
		p, err := g.EntryContext(context.Background(), "r", WithPriority(core.PriorityCritical))
		if err == nil {
			p.Exit()
		}
		done <- err
	}()
	waitCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, clk.BlockUntil(waitCtx, before+1), "the critical entry did not wait")
	clk.Advance(99 * time.Millisecond)
	require.NoError(t, <-done)
	// It was counted in the bucket it borrowed: two more fit, not three.
	require.True(t, try(g, "r"))
	require.True(t, try(g, "r"))
	require.False(t, try(g, "r"))
}

// TestAdaptiveReloadKeepsTheLimit: reloading the same adaptive rule (a new
// section of the same values, as a rule file read again gives) keeps the
// limit it found; a changed section starts again from Initial.
func TestAdaptiveReloadKeepsTheLimit(t *testing.T) {
	g, clk := newTestEngine(t, int64(time.Hour))
	rule := func(max int64) rules.Set {
		return rules.Set{Flow: []rules.Flow{{Resource: "r", Metric: rules.Concurrency, Adaptive: &rules.Adaptive{Initial: 10, Max: max, Window: time.Millisecond}}}}
	}
	require.NoError(t, g.LoadRules(rule(100)))
	for range 20 { // one window of samples: the first probe halves the limit
		p, err := g.Entry("r")
		require.NoError(t, err)
		clk.Advance(time.Millisecond)
		p.Exit()
	}
	s, _ := g.Snapshot("r")
	require.Equal(t, int64(5), s.AdaptiveLimit)
	require.NoError(t, g.LoadRules(rule(100)))
	s, _ = g.Snapshot("r")
	assert.Equal(t, int64(5), s.AdaptiveLimit, "the same rule, reloaded, lost its limit")
	require.NoError(t, g.LoadRules(rule(50)))
	s, _ = g.Snapshot("r")
	assert.Equal(t, int64(10), s.AdaptiveLimit, "a changed section keeps the old limit")
}
