package sluice

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"sync/atomic"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
)

// sysSource is a stat.SystemSource whose readings a test sets.
type sysSource struct{ load, cpu floatVar }

// floatVar is a float64 read and written atomically.
type floatVar struct{ bits atomic.Uint64 }

func (v *floatVar) Load() float64   { return math.Float64frombits(v.bits.Load()) }
func (v *floatVar) Store(f float64) { v.bits.Store(math.Float64bits(f)) }

func (f *sysSource) Load1() (float64, error)    { return f.load.Load(), nil }
func (f *sysSource) CPUUsage() (float64, error) { return f.cpu.Load(), nil }
func (f *sysSource) Memory() (uint64, error)    { return 1 << 20, nil }

// sysEngine returns an engine on a manual clock whose system metrics come
// from the returned source, sampled every second.
func sysEngine(t *testing.T) (*Engine, *sluicetest.ManualClock, *sysSource) {
	t.Helper()
	src := &sysSource{}
	g, clk := newTestEngine(t, int64(time.Hour), WithSystemSampler(SystemSampler{Source: src, Interval: time.Second}))
	return g, clk, src
}

// resample sets the fake readings, moves the clock one interval and waits
// until the sampler has read them.
func resample(t *testing.T, clk *sluicetest.ManualClock, src *sysSource, load, cpu float64) {
	t.Helper()
	src.load.Store(load)
	src.cpu.Store(cpu)
	clk.Advance(time.Second)
	waitSampler(t, clk)
}

func waitSampler(t *testing.T, clk *sluicetest.ManualClock) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, clk.BlockUntil(ctx, 1))
}

func loadSystemSampled(t *testing.T, g *Engine, clk *sluicetest.ManualClock, rs ...rules.System) {
	t.Helper()
	changed, err := loadSystem(g, rs)
	require.NoError(t, err)
	require.True(t, changed)
	for _, r := range rs {
		if r.Metric == rules.Load1 || r.Metric == rules.CPUUsage {
			waitSampler(t, clk)
			return
		}
	}
}

// systemBlock asserts err is a system block of rule with the observed
// value.
func systemBlock(t *testing.T, err error, rule rules.System, observed float64) {
	t.Helper()
	var be *core.BlockError
	require.True(t, errors.As(err, &be), "Entry() error = %v, want a *BlockError", err)
	assert.True(t, errors.Is(err, core.ErrBlocked))
	assert.Equal(t, core.BlockSystem, be.Type)
	assert.Equal(t, "GET /a", be.Resource)
	assert.Equal(t, core.RuleRef{ID: rule.ID, Metric: string(rule.Metric)}, be.Rule)
	assert.Equal(t, rule.Threshold, be.Threshold)
	assert.InDelta(t, observed, be.Observed, 1e-9)
	assert.Contains(t, be.Reason, string(rule.Metric))
}

// TestSystemRulesInboundOnly: every metric blocks inbound entries above its
// trigger and passes them below it; outbound entries are never blocked.
func TestSystemRulesInboundOnly(t *testing.T) {
	var held []Pass // entries kept in flight by the concurrency case
	tests := []struct {
		name string
		rule rules.System
		// over drives the engine over the trigger and returns the observed
		// value a block reports; under brings it back.
		over, under func(g *Engine, clk *sluicetest.ManualClock, src *sysSource) float64
	}{
		{
			name: "qps",
			rule: rules.System{Metric: rules.InboundQPS, Threshold: 3},
			over: func(g *Engine, _ *sluicetest.ManualClock, _ *sysSource) float64 {
				for i := 0; i < 3; i++ {
					require.True(t, try(g, "GET /b"))
				}
				return 3
			},
			under: func(_ *Engine, clk *sluicetest.ManualClock, _ *sysSource) float64 {
				clk.Advance(time.Second)
				return 0
			},
		},
		{
			name: "concurrency",
			rule: rules.System{Metric: rules.InboundConcurrency, Threshold: 2},
			over: func(g *Engine, _ *sluicetest.ManualClock, _ *sysSource) float64 {
				for i := 0; i < 2; i++ {
					p, err := g.Entry("GET /b")
					require.NoError(t, err)
					held = append(held, p)
				}
				return 2
			},
			under: func(_ *Engine, _ *sluicetest.ManualClock, _ *sysSource) float64 {
				held[0].Exit()
				return 0
			},
		},
		{
			name: "avg rt",
			rule: rules.System{Metric: rules.InboundAvgRT, Threshold: 10},
			over: func(g *Engine, clk *sluicetest.ManualClock, _ *sysSource) float64 {
				p, err := g.Entry("GET /b")
				require.NoError(t, err)
				clk.Advance(25 * time.Millisecond)
				p.Exit()
				return 25
			},
			under: func(_ *Engine, clk *sluicetest.ManualClock, _ *sysSource) float64 {
				clk.Advance(time.Second)
				return 0
			},
		},
		{
			name: "load1",
			rule: rules.System{Metric: rules.Load1, Threshold: 4},
			over: func(_ *Engine, clk *sluicetest.ManualClock, src *sysSource) float64 {
				resample(t, clk, src, 4.5, 0)
				return 4.5
			},
			under: func(_ *Engine, clk *sluicetest.ManualClock, src *sysSource) float64 {
				resample(t, clk, src, 3.5, 0)
				return 0
			},
		},
		{
			name: "cpu usage",
			rule: rules.System{Metric: rules.CPUUsage, Threshold: 0.7},
			over: func(_ *Engine, clk *sluicetest.ManualClock, src *sysSource) float64 {
				resample(t, clk, src, 0, 0.75)
				return 0.75
			},
			under: func(_ *Engine, clk *sluicetest.ManualClock, src *sysSource) float64 {
				resample(t, clk, src, 0, 0.65)
				return 0
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, clk, src := sysEngine(t)
			loadSystemSampled(t, g, clk, tt.rule)
			require.True(t, try(g, "GET /a"), "below the trigger")
			// Let the probe leave the window (and the sampler take its tick).
			clk.Advance(time.Second)
			if tt.rule.Metric == rules.Load1 || tt.rule.Metric == rules.CPUUsage {
				waitSampler(t, clk)
			}
			held = nil
			observed := tt.over(g, clk, src)

			_, err := g.Entry("GET /a")
			systemBlock(t, err, tt.rule, observed)
			_, err = g.Entry("GET /a", WithTraffic(core.Inbound), WithBatch(1))
			systemBlock(t, err, tt.rule, observed)
			// Outbound traffic is never refused by system rules.
			for i := 0; i < 5; i++ {
				require.True(t, try(g, "GET /a", WithTraffic(core.Outbound)), "outbound entry %d", i)
			}
			snap, ok := g.Snapshot("GET /a")
			require.True(t, ok)
			assert.Equal(t, uint64(2), snap.TotalBlock)

			tt.under(g, clk, src)
			require.True(t, try(g, "GET /a"), "back below the trigger")
			for _, p := range held {
				p.Exit()
			}
		})
	}
}

// TestSystemBBRThroughEngine: with CPU over the threshold, work below what
// the engine has seen complete passes and work above it is cut back.
func TestSystemBBRThroughEngine(t *testing.T) {
	g, clk, src := sysEngine(t)
	rule := rules.System{Metric: rules.CPUUsage, Threshold: 0.8, Strategy: rules.BBR}
	loadSystemSampled(t, g, clk, rule) // samples CPU 0 now; next sample in 1 s

	// While CPU is cool, ten requests of 100 ms complete in one 100 ms
	// bucket: 100/s at best, min RT 0.1 s, so capacity = 100 × 0.1 = 10 in
	// flight.
	var held []Pass
	for i := 0; i < 10; i++ {
		p, err := g.Entry("GET /a")
		require.NoError(t, err, "entry %d (concurrency %d)", i, i)
		held = append(held, p)
	}
	clk.Advance(100 * time.Millisecond)
	for _, p := range held {
		p.Exit()
	}
	held = held[:0]
	// CPU heats up; the next sample (900 ms later) reads it. The
	// completions are still in the one-second window.
	src.cpu.Store(0.95)
	clk.Advance(900 * time.Millisecond)
	waitSampler(t, clk)

	admitted := 0
	for i := 0; i < 20; i++ {
		p, err := g.Entry("GET /a")
		if err == nil {
			held = append(held, p)
			admitted++
			continue
		}
		systemBlock(t, err, rule, 0.95)
	}
	assert.Equal(t, 11, admitted, "admitted while concurrency <= capacity (10)")
	// Outbound still passes.
	require.True(t, try(g, "GET /a", WithTraffic(core.Outbound)))

	// CPU under the threshold: nothing is refused.
	resample(t, clk, src, 0, 0.5)
	for i := 0; i < 20; i++ {
		p, err := g.Entry("GET /a")
		require.NoError(t, err)
		held = append(held, p)
	}
	for _, p := range held {
		p.Exit()
	}
}

func TestSystemRulesRefusedWholeKeepOld(t *testing.T) {
	g, clk, _ := sysEngine(t)
	good := []rules.System{{Metric: rules.InboundConcurrency, Threshold: 1}}
	loadSystemSampled(t, g, clk, good...)

	changed, err := loadSystem(g, []rules.System{
		{Metric: rules.Load1, Threshold: 4},
		{Metric: rules.InboundQPS, Threshold: 10, Strategy: rules.BBR},
	})

	assert.False(t, changed)
	var re *rules.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, 1, re.Index)
	assert.Equal(t, "Strategy", re.Field)
	assert.EqualError(t, err, "rules: system rule 1: Strategy: bbr applies to the load1 and cpu-usage metrics only, not qps")
	assert.Equal(t, good, g.Rules().System)
	assert.Equal(t, 0, clk.Waiters(), "a refused set starts no sampler")

	// The old rule is still enforced.
	p, err := g.Entry("GET /a")
	require.NoError(t, err)
	_, err = g.Entry("GET /a")
	systemBlock(t, err, good[0], 1)
	p.Exit()

	changed, err = loadSystem(g, good)
	require.NoError(t, err)
	assert.False(t, changed)
	changed, err = loadSystem(g, nil)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Empty(t, g.Rules().System)
}

// TestCloseStopsSystemSampler: the engine owns the sampler goroutine.
func TestCloseStopsSystemSampler(t *testing.T) {
	defer goleak.VerifyNone(t)
	src := &sysSource{}
	src.load.Store(1.25)
	clk := sluicetest.NewManualClock(0)
	g := New(WithClock(clk), WithSystemSampler(SystemSampler{Source: src, Interval: 100 * time.Millisecond}))
	assert.Equal(t, time.Duration(-1), g.SystemMetrics().Load1Age, "no sampling before a rule needs it")
	_, err := loadSystem(g, []rules.System{{Metric: rules.Load1, Threshold: 8, Strategy: rules.BBR}})
	require.NoError(t, err)
	waitSampler(t, clk)
	clk.Advance(100 * time.Millisecond) // the second sample
	waitSampler(t, clk)
	clk.Advance(50 * time.Millisecond)
	m := g.SystemMetrics()
	assert.Equal(t, 1.25, m.Load1)
	assert.Equal(t, 50*time.Millisecond, m.Load1Age)
	require.NoError(t, g.Close())
	assert.Equal(t, 0, clk.Waiters())
	require.NoError(t, g.Close())
}

// TestSystemRulesPackageLevel uses the default engine with the real host
// source and clock; Close stops its sampler.
func TestSystemRulesPackageLevel(t *testing.T) {
	defer goleak.VerifyNone(t)
	defer func() { _ = SetDefault(nil).Close() }()
	rs := []rules.System{{ID: "cpu", Metric: rules.CPUUsage, Threshold: 1, Strategy: rules.BBR}}
	require.NoError(t, LoadRules(rules.Set{System: rs}))
	assert.Equal(t, rs, Default().Rules().System)
	// CPU usage never exceeds 1: a threshold of 1 never fires.
	for i := 0; i < 10; i++ {
		p, err := Entry("GET /a")
		require.NoError(t, err)
		p.Exit()
	}
	err := LoadRules(rules.Set{System: []rules.System{{Metric: rules.CPUUsage, Threshold: 80}}})
	require.ErrorContains(t, err, "did you mean 0.8?")
	assert.Equal(t, rs, Default().Rules().System)
}

// BenchmarkEntryExitSystemRules is Entry+Exit of an inbound entry with one
// passing system rule per metric.
func BenchmarkEntryExitSystemRules(b *testing.B) {
	src := &sysSource{}
	src.load.Store(1)
	src.cpu.Store(0.5)
	g := New(WithSystemSampler(SystemSampler{Source: src}))
	defer g.Close()
	_, err := loadSystem(g, []rules.System{
		{Metric: rules.InboundQPS, Threshold: 1e11},
		{Metric: rules.InboundConcurrency, Threshold: 1e9},
		{Metric: rules.InboundAvgRT, Threshold: 1e6},
		{Metric: rules.Load1, Threshold: 1000},
		{Metric: rules.CPUUsage, Threshold: 0.99, Strategy: rules.BBR},
	})

	require.NoError(b, err)
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			p, err := g.Entry("GET /a")
			if err != nil {
				b.Fatal(err)
			}
			p.Exit()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p, err := g.Entry("GET /a")
				if err != nil {
					b.Error(err)
					return
				}
				p.Exit()
			}
		})
	})
}
