package sluice

import (
	"errors"
	"math/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
)

// estimatingEngine is an engine on a manual clock whose Exit estimates its
// instant as it does on the system clock (see exitNeedsClock), so that the
// estimate is tested at exact instants.
func estimatingEngine(t *testing.T) (*Engine, *sluicetest.ManualClock) {
	t.Helper()
	g, clk := newTestEngine(t, int64(time.Hour))
	g.estimateExit = true
	return g, clk
}

// TestExitClockBreakerDifferential drives two engines through one seeded
// timeline: one reads the clock at every Exit (as every engine did before
// exits were estimated), the other estimates the exits nothing times. A
// slow-call breaker (5 ms) on one resource, with response times drawn
// around the threshold (to the nanosecond), and a resource with a QPS rule
// and no RT consumer beside it, must see every entry decided the same way,
// and both engines' statistics must agree (bucket placement of the
// estimated exits aside: totals, passes and blocks per second).
func TestExitClockBreakerDifferential(t *testing.T) {
	var slowPasses, slowBlocks int
	for seed := int64(1); seed <= 6; seed++ {
		rng := rand.New(rand.NewSource(seed))
		exact, clkA := newTestEngine(t, int64(time.Hour))
		est, clkB := estimatingEngine(t)
		set := rules.Set{
			Flow: []rules.Flow{{Resource: "plain", Threshold: 40}},
			CircuitBreaker: []rules.CircuitBreaker{{
				Resource: "slow", MaxAllowedRT: 5 * time.Millisecond, Threshold: 0.35,
				MinRequestAmount: 20, StatInterval: time.Second, RetryTimeout: 300 * time.Millisecond, Probes: 1,
			}},
		}
		require.NoError(t, exact.LoadRules(set))
		require.NoError(t, est.LoadRules(set))
		type held struct {
			a, b Pass
			end  int64
		}
		var open []held
		var decisions int
		// An event-driven timeline: the clocks move to the next arrival or
		// the next exit, whichever is first, so that every response time is
		// exactly the one drawn.
		next := clkA.Nanotime()
		for step := 0; step < 4000; step++ {
			next += rng.Int63n(int64(3 * time.Millisecond))
			for {
				first := -1
				for i, h := range open {
					if h.end <= next && (first < 0 || h.end < open[first].end) {
						first = i
					}
				}
				if first < 0 {
					break
				}
				h := open[first]
				open = append(open[:first], open[first+1:]...)
				clkA.Set(h.end)
				clkB.Set(h.end)
				h.a.Exit()
				h.b.Exit()
			}
			clkA.Set(next)
			clkB.Set(next)
			now := next
			res := "plain"
			if rng.Intn(2) == 0 {
				res = "slow"
			}
			pa, errA := exact.Entry(res)
			pb, errB := est.Entry(res)
			require.Equal(t, errA == nil, errB == nil, "seed %d step %d %s: decisions differ (%v, %v)", seed, step, res, errA, errB)
			decisions++
			if errA != nil {
				if res == "slow" {
					slowBlocks++
				}
				continue
			}
			// Response times around 5 ms, some exactly on it and one
			// nanosecond either side.
			rt := 2*time.Millisecond + time.Duration(rng.Int63n(int64(3600*time.Microsecond)))
			switch rng.Intn(6) {
			case 0:
				rt = 5 * time.Millisecond
			case 1:
				rt = 5*time.Millisecond + 1
			case 2:
				rt = 5*time.Millisecond - 1
			}
			if res == "slow" {
				slowPasses++
			}
			if rng.Intn(10) == 0 {
				pa.SetError(errors.New("x"))
				pb.SetError(errors.New("x"))
			}
			open = append(open, held{pa, pb, now + int64(rt)})
		}
		for _, h := range open {
			h.a.Exit()
			h.b.Exit()
		}
		require.Equal(t, 4000, decisions)
		now := clkA.Nanotime()
		for _, res := range []string{"plain", "slow"} {
			a, _ := exact.Snapshot(res)
			b, _ := est.Snapshot(res)
			assert.Equal(t, a.TotalPass, b.TotalPass, "seed %d %s", seed, res)
			assert.Equal(t, a.TotalBlock, b.TotalBlock, "seed %d %s", seed, res)
			assert.Equal(t, a.TotalComplete, b.TotalComplete, "seed %d %s", seed, res)
			assert.Equal(t, a.TotalError, b.TotalError, "seed %d %s", seed, res)
			assert.Zero(t, b.Concurrency, "seed %d %s", seed, res)
			ha := exact.reg.get(res).node.History(now, time.Minute)
			hb := est.reg.get(res).node.History(now, time.Minute)
			require.Equal(t, len(ha), len(hb))
			for i := range ha {
				assert.Equal(t, ha[i].Pass, hb[i].Pass, "seed %d %s second %d", seed, res, i)
				assert.Equal(t, ha[i].Block, hb[i].Block, "seed %d %s second %d", seed, res, i)
			}
		}
		// The breaker's resource holds tickets: its exits were timed on
		// both engines, so its RT figures agree exactly.
		a, _ := exact.Snapshot("slow")
		b, _ := est.Snapshot("slow")
		assert.Equal(t, a.TotalRT, b.TotalRT, "seed %d", seed)
	}
	require.Greater(t, slowPasses, 1000, "the breaker let too few through to test anything")
	require.Greater(t, slowBlocks, 100, "the breaker hardly opened")
}

// TestExitEstimateExact checks the estimated exits on a manual clock: they
// count (Complete, Error, concurrency) exactly, never into a bucket before
// their entry's, carry no RT, and stop once something reads the resource:
// exits are timed from its first read on, and AvgRT is the mean of the
// timed ones only.
func TestExitEstimateExact(t *testing.T) {
	g, clk := estimatingEngine(t)
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "r", Threshold: 1000}}}))
	start := clk.Nanotime()

	// Untimed: entries at the start of a bucket, exits 250 ms later with
	// no entry between (the estimate is the latest entry's reading).
	p1, err := g.Entry("r")
	require.NoError(t, err)
	p2, err := g.Entry("r")
	require.NoError(t, err)
	clk.Advance(250 * time.Millisecond)
	p1.SetError(errors.New("x"))
	p1.Exit()
	p2.Exit()
	n := &g.reg.get("r").node
	now := clk.Nanotime()
	assert.Equal(t, uint64(2), n.Bucket(start, 2 /* Complete */), "counted in the entries' bucket, the latest reading")
	assert.Zero(t, n.Sum(now, 4 /* RT */))
	assert.Zero(t, n.Concurrency())
	assert.False(t, n.HasMinuteWindow(), "nothing read the resource")

	// A later entry moves the estimate: an exit after it counts in its
	// bucket, not the first entry's.
	p3, err := g.Entry("r")
	require.NoError(t, err)
	clk.Advance(10 * time.Millisecond)
	p3.Exit()
	assert.Equal(t, uint64(1), n.Bucket(start+int64(250*time.Millisecond), 2))

	// A reader: from now on exits are timed, and AvgRT averages them only.
	s, ok := g.Snapshot("r")
	require.True(t, ok)
	assert.Equal(t, uint64(3), s.TotalComplete)
	assert.Equal(t, uint64(1), s.TotalError)
	assert.Zero(t, s.AvgRT, "no exit was timed")
	p4, err := g.Entry("r")
	require.NoError(t, err)
	clk.Advance(7 * time.Millisecond)
	p4.Exit()
	s, _ = g.Snapshot("r")
	assert.Equal(t, uint64(4), s.TotalComplete)
	assert.Equal(t, 7*time.Millisecond, s.AvgRT, "the mean of the timed exit alone")
	assert.Equal(t, 7*time.Millisecond, s.MinRT)
}

// TestExitEstimateInbound: inbound exits are untimed until the inbound
// figures are read or a system rule is in force; the inbound totals stay
// exact either way.
func TestExitEstimateInbound(t *testing.T) {
	g, clk := estimatingEngine(t)
	p, err := g.Entry("a")
	require.NoError(t, err)
	clk.Advance(3 * time.Millisecond)
	p.Exit()
	in := g.SystemMetrics().Inbound
	assert.Equal(t, uint64(1), in.TotalPass)
	assert.Equal(t, uint64(1), in.TotalComplete)
	assert.Zero(t, in.AvgRT)
	p, err = g.Entry("b")
	require.NoError(t, err)
	clk.Advance(4 * time.Millisecond)
	p.Exit()
	in = g.SystemMetrics().Inbound
	assert.Equal(t, uint64(2), in.TotalComplete)
	assert.Equal(t, 4*time.Millisecond, in.AvgRT, "timed after the first inbound read")

	// On another engine, a system rule makes inbound exits timed.
	h, hclk := estimatingEngine(t)
	require.NoError(t, h.LoadRules(rules.Set{System: []rules.System{{Metric: rules.InboundQPS, Threshold: 1e6}}}))
	p, err = h.Entry("a")
	require.NoError(t, err)
	hclk.Advance(2 * time.Millisecond)
	assert.True(t, h.exitNeedsClock(p.rec, h.inbound))
	p.Exit()
}

// TestExitNeedsClock lists what makes an exit read the clock.
func TestExitNeedsClock(t *testing.T) {
	g, _ := estimatingEngine(t)
	require.NoError(t, g.LoadRules(rules.Set{
		Flow: []rules.Flow{{Resource: "qps", Threshold: 1000}, {Resource: "conc", Metric: rules.Concurrency, Threshold: 10},
			{Resource: "tier-rt", Tiers: []rules.Tier{{Above: 100, Threshold: 10}}},
			{Resource: "tier-err", TierMetric: rules.TierErrorRatio, Tiers: []rules.Tier{{Above: 0.5, Threshold: 10}}}},
		CircuitBreaker: []rules.CircuitBreaker{{
			Resource: "cb", Strategy: rules.ErrorRatio, Threshold: 0.5, RetryTimeout: time.Second,
		}},
	}))
	needs := func(res string, opts ...EntryOption) bool {
		p, err := g.Entry(res, opts...)
		require.NoError(t, err)
		defer p.Exit()
		var in = g.inbound
		if p.rec.ctx.Traffic != core.Inbound {
			in = nil
		}
		return g.exitNeedsClock(p.rec, in)
	}
	assert.False(t, needs("qps"), "a QPS rule consumes no RT")
	assert.False(t, needs("none", WithTraffic(core.Outbound)))
	assert.True(t, needs("conc"), "a concurrency rule holds a ticket")
	assert.True(t, needs("cb"), "a breaker holds a ticket")
	assert.True(t, needs("tier-rt"), "a tiered rule on the average RT reads it")
	assert.False(t, needs("tier-err"), "a tiered rule on the error ratio reads counts only")
	_, _ = g.Snapshot("qps")
	assert.True(t, needs("qps"), "a reader of the resource")

	m, _ := newTestEngine(t, 0)
	p, err := m.Entry("x")
	require.NoError(t, err)
	assert.True(t, m.exitNeedsClock(p.rec, m.inbound), "a manual clock: always")
	p.Exit()
}

// TestNoteRecentOnlyRaises: the estimate an untimed exit uses never goes
// back, even when an Entry held up after its clock read stores late.
func TestNoteRecentOnlyRaises(t *testing.T) {
	g, _ := estimatingEngine(t)
	ms := int64(time.Millisecond)
	g.recent.Store(10 * ms)
	g.noteRecent(5 * ms)
	assert.Equal(t, 10*ms, g.recent.Load(), "an older reading")
	g.noteRecent(10*ms + ms/2)
	assert.Equal(t, 10*ms, g.recent.Load(), "within a millisecond: not stored")
	g.noteRecent(12 * ms)
	assert.Equal(t, 12*ms, g.recent.Load())
}
