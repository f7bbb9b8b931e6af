package sluice

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
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
	_, err := g.LoadFlowRules(rs)
	require.NoError(t, err)
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
