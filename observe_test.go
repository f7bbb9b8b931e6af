package sluice

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/slots"
	"github.com/sluice-go/sluice/stat"
)

// typedRefuser refuses entries of resource "c" with block type typ.
type typedRefuser struct{ typ core.BlockType }

func (f typedRefuser) Check(e *slots.Entry) *core.BlockError {
	if e.Resource != "c" {
		return nil
	}
	return &core.BlockError{Type: f.typ}
}

func TestBlockedByType(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	watchInbound(t, g) // inbound entries are counted from now on
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 3})
	_, err := loadFlow(g, append(g.Rules().Flow, rules.Flow{Metric: rules.Concurrency, Resource: "i", Threshold: 1}))
	require.NoError(t, err)

	// Flow: 3 pass, then 5 refused (one of them a batch of 2: 6 requests),
	// across a bucket boundary within the same second.
	for i := 0; i < 3; i++ {
		require.True(t, try(g, "r"))
	}
	for i := 0; i < 4; i++ {
		require.False(t, try(g, "r"))
	}
	clk.Advance(100 * time.Millisecond)
	require.False(t, try(g, "r", WithBatch(2)))

	// Concurrency: one in flight, two refused.
	p, err := g.Entry("i")
	require.NoError(t, err)
	require.False(t, try(g, "i"))
	require.False(t, try(g, "i"))
	p.Exit()

	s, ok := g.Snapshot("r")
	require.True(t, ok)
	want := [len(stat.Snapshot{}.BlockedBy)]uint64{}
	want[core.BlockFlow] = 6
	assert.Equal(t, want, s.BlockedBy)
	assert.Equal(t, s.TotalBlock, uint64(6))
	assert.Equal(t, uint64(6), s.BlockedBy[core.BlockFlow])

	s, _ = g.Snapshot("i")
	assert.Equal(t, uint64(2), s.BlockedBy[core.BlockFlow])
	assert.Equal(t, uint64(2), s.TotalBlock)

	// A reload that keeps the rule keeps the counts; they are totals, so
	// a new second and a new minute keep them too.
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 3}, rules.Flow{Resource: "x", Threshold: 1})
	clk.Advance(2 * time.Minute)
	s, _ = g.Snapshot("r")
	assert.Equal(t, uint64(6), s.BlockedBy[core.BlockFlow])
	assert.Equal(t, uint64(6), s.TotalBlock)

	// Custom slots: BlockCustom by default, an unknown type under index 0.
	require.NoError(t, g.RegisterSlot(typedRefuser{typ: 0}, 0))
	require.False(t, try(g, "c"))
	require.NoError(t, g.RegisterSlot(typedRefuser{typ: 42}, 1))
	s, _ = g.Snapshot("c")
	assert.Equal(t, uint64(1), s.BlockedBy[core.BlockCustom])

	g2, _ := newTestEngine(t, 0)
	require.NoError(t, g2.RegisterSlot(typedRefuser{typ: 42}, 0))
	require.False(t, try(g2, "c", WithBatch(3)))
	s, _ = g2.Snapshot("c")
	assert.Equal(t, uint64(3), s.BlockedBy[0])
	assert.Equal(t, uint64(3), s.BlockedBy[0])

	// The inbound node counts by type too.
	in := g.SystemMetrics().Inbound
	assert.Equal(t, uint64(8), in.BlockedBy[core.BlockFlow], "6 on r, 2 on i")
	assert.Equal(t, uint64(1), in.BlockedBy[core.BlockCustom])
}

func TestEachAndTotalRT(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	require.True(t, exitAfter(g, clk, "a", 3*time.Millisecond, nil))
	require.True(t, exitAfter(g, clk, "a", 5*time.Millisecond, nil, WithBatch(2)))
	require.True(t, try(g, "b"))
	clk.Advance(3 * time.Minute) // totals survive the windows
	got := map[string]stat.Snapshot{}
	g.Each(func(name string, s stat.Snapshot) {
		_, _ = g.Snapshot(name) // f may call the engine
		got[name] = s
	})
	require.Len(t, got, 2)
	assert.Equal(t, uint64(3), got["a"].TotalComplete)
	assert.Equal(t, 13*time.Millisecond, got["a"].TotalRT)
	assert.Equal(t, uint64(1), got["b"].TotalPass)
}
