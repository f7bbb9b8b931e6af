package sluice

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// kneeRun drives the service of TestAdaptiveRuleFindsTheKnee (20 at once
// without queueing, 10 ms each) under rule for rounds rounds, from clock 0,
// and returns the limit in force after each round, with the round's end.
func kneeRun(t *testing.T, g *Engine, clk interface{ Advance(time.Duration) }, rounds int) (at, lims []int64) {
	t.Helper()
	for range rounds {
		held, _ := fill(t, g, "r")
		clk.Advance(10 * time.Millisecond * time.Duration(max(len(held), 20)) / 20)
		for _, p := range held {
			p.Exit()
		}
		s, _ := g.Snapshot("r")
		at = append(at, g.Clock().Nanotime())
		lims = append(lims, s.AdaptiveLimit)
	}
	return at, lims
}

// TestAdaptiveLimitEvents: a limit that climbs from 4 to the knee of 20
// and then moves around it by small steps and probes publishes
// EventAdaptive exactly for the material moves (a reference model over the
// limits each round read: a tenth or more since the last reported limit,
// or onto Min or Max), at most one per window decision, and far fewer
// events than moves.
func TestAdaptiveLimitEvents(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	rule := rules.Flow{Resource: "r", Metric: rules.Concurrency, Adaptive: &rules.Adaptive{Min: 2, Max: 22, Initial: 4, Tolerance: 0.1}}
	var got []stat.Event
	cancel := g.Subscribe(func(e stat.Event) {
		if e.Kind == stat.EventAdaptive {
			got = append(got, e)
		}
	})
	defer cancel()
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{rule}}))
	at, lims := kneeRun(t, g, clk, 600)

	// The model. A round ends at most one window (a window lasts at least
	// twice the no-load RT, 20 ms, and a round 10 ms or more), so the limits
	// read after each round are every limit the rule had.
	var want []stat.Event
	reported, prev, moves, onBound := int64(4), int64(4), 0, 0
	for i, l := range lims {
		if l == prev {
			continue
		}
		moves++
		prev = l
		d := l - reported
		if d < 0 {
			d = -d
		}
		bound := l == rule.Adaptive.Min || l == rule.Adaptive.Max
		if l != reported && (bound || 10*d >= reported) {
			if bound && 10*d < reported {
				onBound++
			}
			want = append(want, stat.Event{
				Kind: stat.EventAdaptive, At: at[i], Resource: "r", Rule: rule,
				From: strconv.FormatInt(reported, 10), To: strconv.FormatInt(l, 10), Value: float64(l),
			})
			reported = l
		}
	}
	require.Equal(t, want, got)
	t.Logf("%d moves of the limit, %d events (%d onto a bound by less than a tenth)", moves, len(got), onBound)
	assert.Less(t, len(got), moves, "the events do not thin out the moves")
	assert.Positive(t, onBound, "the run never reaches a bound by a small step: the bound case is untested")
}

// TestAdaptiveLimitHistory: Engine.History gives each second the limit in
// force at its end (a reference model over the limits read after each
// round), the Initial from the second of the load, 0 once the rule is
// removed; a resource without an adaptive rule shows 0 and has no ring.
func TestAdaptiveLimitHistory(t *testing.T) {
	g, clk := newTestEngine(t, 0, WithHistory(time.Minute))
	rule := rules.Flow{Resource: "r", Metric: rules.Concurrency, Adaptive: &rules.Adaptive{Min: 2, Max: 22, Initial: 4, Tolerance: 0.1}}
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{rule, {Resource: "q", Threshold: 1000}}}))
	at, lims := kneeRun(t, g, clk, 600)
	p, err := g.Entry("q")
	require.NoError(t, err)
	p.Exit()

	h := g.History("r", time.Minute)
	require.NotEmpty(t, h)
	require.Equal(t, int64(0), h[0].Start)
	for _, s := range h {
		want, sec := int64(4), s.Start/int64(time.Second)
		for i := range at {
			if at[i]/int64(time.Second) <= sec {
				want = lims[i]
			}
		}
		require.Equal(t, want, s.AdaptiveLimit, "second %d", sec)
	}
	assert.Less(t, h[0].AdaptiveLimit, h[len(h)-1].AdaptiveLimit, "the limit did not climb: the history shows one value")
	assert.Equal(t, int64(22), h[len(h)-1].AdaptiveLimit)

	for _, s := range g.History("q", time.Minute) {
		require.Zero(t, s.AdaptiveLimit)
	}
	q := g.reg.get("q")
	require.NotNil(t, q)
	assert.False(t, q.node.HasLimitHistory(), "a resource without adaptive rules has a ring of limits")

	// Removed: 0 from the second of the load on.
	removed := clk.Nanotime() / int64(time.Second)
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "q", Threshold: 1000}}}))
	clk.Advance(3 * time.Second)
	for _, s := range g.History("r", time.Minute) {
		if sec := s.Start / int64(time.Second); sec >= removed {
			require.Zero(t, s.AdaptiveLimit, "second %d after the rule's removal", sec)
		} else {
			require.Positive(t, s.AdaptiveLimit, "second %d", sec)
		}
	}
}
