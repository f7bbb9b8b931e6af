package sluice

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/rules"
)

// TestInboundCountedWhileRuled pins what SystemMetrics().Inbound shows:
// the inbound entries (and their exits) made while a system rule is in
// force, shadow ones included; no others, and the concurrency of the
// counted entries only. Readers change nothing: an exporter that calls
// SystemMetrics every second for load1 and CPU usage makes no call write
// the engine-wide node (before, each call counted inbound entries for a
// minute after it).
func TestInboundCountedWhileRuled(t *testing.T) {
	g, clk := newTestEngine(t, int64(time.Hour))
	enter := func(n int) {
		for i := 0; i < n; i++ {
			require.True(t, try(g, "r"))
		}
	}
	// No system rule: nothing is counted engine-wide, read every second or not.
	enter(3)
	for i := 0; i < 90; i++ {
		in := g.SystemMetrics().Inbound // a scrape
		require.Zero(t, in.TotalPass, "second %d", i)
		require.Zero(t, in.Concurrency)
		enter(2)
		clk.Advance(time.Second)
	}
	early, err := g.Entry("r") // in flight across the rule's load
	require.NoError(t, err)

	// A system rule: counted whatever the readers, and judged on them.
	_, err = loadSystem(g, []rules.System{{Metric: rules.InboundQPS, Threshold: 3}})
	require.NoError(t, err)
	enter(3)
	require.False(t, try(g, "r"), "the system rule sees the counted entries")
	require.True(t, try(g, "o", WithTraffic(core.Outbound)), "outbound is neither judged nor counted")
	p, err := g.Entry("r", WithTraffic(core.Outbound))
	require.NoError(t, err)
	early.Exit() // not counted on entry, so not on exit either
	in := g.SystemMetrics().Inbound
	require.Equal(t, uint64(3), in.TotalPass)
	require.Equal(t, uint64(1), in.TotalBlock)
	require.Equal(t, uint64(3), in.TotalComplete)
	require.Equal(t, 3.0, in.PassQPS)
	require.Zero(t, in.Concurrency)
	p.Exit()

	// The rule in shadow mode: counted, nothing refused.
	_, err = loadSystem(g, []rules.System{{Metric: rules.InboundQPS, Threshold: 3, Shadow: true}})
	require.NoError(t, err)
	clk.Advance(time.Second)
	enter(5)
	held, err := g.Entry("r") // counted, in flight across the rules' removal
	require.NoError(t, err)
	in = g.SystemMetrics().Inbound
	require.Equal(t, uint64(3+6), in.TotalPass)
	require.Equal(t, uint64(1), in.TotalBlock, "a shadow refusal is not a block")
	require.Equal(t, int64(1), in.Concurrency)

	// Rules gone: not counted again; what was counted stays.
	_, err = loadSystem(g, nil)
	require.NoError(t, err)
	enter(7)
	held.Exit()
	clk.Advance(2 * time.Minute)
	enter(4)
	in = g.SystemMetrics().Inbound
	require.Equal(t, uint64(9), in.TotalPass)
	require.Equal(t, uint64(9), in.TotalComplete)
	require.Zero(t, in.Concurrency)
}

// TestInboundCountsConsistentAcrossRuleLoads: goroutines enter and exit
// inbound while a system rule is loaded and removed over and over, and a
// reader calls SystemMetrics throughout. Every counted entry's exit is
// counted and no other: once all have exited, Inbound's concurrency is
// zero and its completions equal its passes.
func TestInboundCountsConsistentAcrossRuleLoads(t *testing.T) {
	g, _ := newTestEngine(t, int64(time.Hour))
	const workers, calls = 4, 2000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var side sync.WaitGroup
	side.Add(1)
	go func() {
		defer side.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var rs []rules.System
			if i%2 == 0 {
				rs = []rules.System{{Metric: rules.InboundQPS, Threshold: 1e12}}
			}
			_, err := loadSystem(g, rs)
			require.NoError(t, err)
			_ = g.SystemMetrics()
		}
	}()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				p, err := g.Entry("r")
				if err != nil {
					t.Error(err)
					return
				}
				p.Exit()
			}
		}()
	}
	wg.Wait()
	close(stop)
	side.Wait()
	in := g.SystemMetrics().Inbound
	require.Zero(t, in.Concurrency)
	require.Equal(t, in.TotalPass, in.TotalComplete)
	require.LessOrEqual(t, in.TotalPass, uint64(workers*calls))
	s, _ := g.Snapshot("r")
	require.Equal(t, uint64(workers*calls), s.TotalPass)
}
