package sluice

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// newTestEngine returns an engine on a manual clock that reads start, closed
// at the end of the test.
func newTestEngine(t testing.TB, start int64, opts ...Option) (*Engine, *sluicetest.ManualClock) {
	t.Helper()
	clk := sluicetest.NewManualClock(start)
	g := New(append([]Option{WithClock(clk)}, opts...)...)
	t.Cleanup(func() { _ = g.Close() })
	return g, clk
}

func mustLoadFlow(t testing.TB, g *Engine, rs ...rules.Flow) {
	t.Helper()
	require.NoError(t, g.UpdateRules(func(s *rules.Set) { s.Flow = rs }))
}

// loadFlow, loadSystem, loadBreakers and loadParams replace the engine's
// rules of one kind and keep the others, through UpdateRules. changed
// reports whether the load published an EventRulesLoaded: the event stream
// is how a caller learns that a load changed the rules in force.
func loadFlow(g *Engine, rs []rules.Flow) (changed bool, err error) {
	return update(g, func(s *rules.Set) { s.Flow = rs })
}

func loadSystem(g *Engine, rs []rules.System) (changed bool, err error) {
	return update(g, func(s *rules.Set) { s.System = rs })
}

func loadBreakers(g *Engine, rs []rules.CircuitBreaker) (changed bool, err error) {
	return update(g, func(s *rules.Set) { s.CircuitBreaker = rs })
}

func loadParams(g *Engine, rs []rules.Param) (changed bool, err error) {
	return update(g, func(s *rules.Set) { s.Param = rs })
}

func update(g *Engine, f func(*rules.Set)) (changed bool, err error) {
	var loaded atomic.Bool
	cancel := g.Subscribe(func(e stat.Event) {
		if e.Kind == stat.EventRulesLoaded {
			loaded.Store(true)
		}
	})
	defer cancel()
	err = g.UpdateRules(f)
	return loaded.Load(), err
}

// try makes one entry and exits it at once; it reports whether it passed.
func try(g *Engine, res string, opts ...EntryOption) bool {
	p, err := g.Entry(res, opts...)
	if err != nil {
		return false
	}
	p.Exit()
	return true
}

// behaviorName names a rule's behavior, by its throttle section, in a
// subtest's name.
func behaviorName(th *rules.Throttle) string {
	if th != nil {
		return "throttle"
	}
	return "reject"
}

// watchInbound loads a shadow InboundQPS system rule that nothing reaches,
// the documented way to have the inbound figures counted without
// protecting anything (see Engine.SystemMetrics), keeping the other rules.
func watchInbound(t testing.TB, g *Engine) {
	t.Helper()
	_, err := loadSystem(g, []rules.System{{Metric: rules.InboundQPS, Threshold: 1e12, Shadow: true}})
	require.NoError(t, err)
}
