package sluice

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/rules"
)

// TestInboundCountedWhileReadOrRuled pins what SystemMetrics().Inbound
// shows: inbound entries (and their exits) made while a system rule is in
// force, or within a minute of the engine's clock after a SystemMetrics
// call; no others, and the concurrency of the counted entries only.
func TestInboundCountedWhileReadOrRuled(t *testing.T) {
	g, clk := newTestEngine(t, int64(time.Hour))
	enter := func(n int) {
		for i := 0; i < n; i++ {
			require.True(t, try(g, "r"))
		}
	}
	// No reader, no system rule: nothing is counted engine-wide.
	enter(3)
	early, err := g.Entry("r") // in flight across the first read
	require.NoError(t, err)
	in := g.SystemMetrics().Inbound
	require.Zero(t, in.TotalPass)
	require.Zero(t, in.Concurrency)
	// Read: counted from the call on, for a minute after it.
	enter(5)
	early.Exit() // not counted on entry, so not on exit either
	in = g.SystemMetrics().Inbound
	require.Equal(t, uint64(5), in.TotalPass)
	require.Equal(t, uint64(5), in.TotalComplete)
	require.Equal(t, 5.0, in.PassQPS)
	require.Zero(t, in.Concurrency)
	clk.Advance(59 * time.Second)
	enter(2) // within a minute of the last call
	clk.Advance(1 * time.Second)
	enter(4) // a minute after it: not counted
	p, err := g.Entry("r")
	require.NoError(t, err)
	clk.Advance(time.Minute)
	// A system rule: counted whatever the readers, and judged on them.
	_, err = loadSystem(g, []rules.System{{Metric: rules.InboundQPS, Threshold: 3}})
	require.NoError(t, err)
	clk.Advance(time.Minute)
	enter(3)
	require.False(t, try(g, "r"), "the system rule sees the counted entries")
	p.Exit()
	in = g.SystemMetrics().Inbound
	require.Equal(t, uint64(5+2+3), in.TotalPass)
	require.Equal(t, uint64(1), in.TotalBlock)
	require.Equal(t, uint64(5+2+3), in.TotalComplete)
	require.Zero(t, in.Concurrency)
	// Rules gone, the reader's minute gone: not counted again.
	_, err = loadSystem(g, nil)
	require.NoError(t, err)
	clk.Advance(2 * time.Minute)
	enter(7)
	require.Equal(t, uint64(10), g.SystemMetrics().Inbound.TotalPass)
}
