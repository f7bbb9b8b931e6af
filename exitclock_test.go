package sluice

import (
	"errors"
	"math/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/internal/window"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/slots"
	"github.com/sluice-go/sluice/stat"
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
// exits were estimated), the other times only the exits a consumer needs
// timed. Beside each other, on resources of their own:
//   - a slow-call breaker (5 ms), with response times drawn around the
//     threshold (to the nanosecond): its exits are always timed;
//   - an error-ratio and an error-count breaker, with error rates that
//     switch between calm and stormy seconds so that they open, probe and
//     close again and again: their failures, their half-open probes and
//     their successes while a failure is in the window are timed, the
//     other successes are not;
//   - a concurrency rule, whose exits are untimed;
//   - a resource with a QPS rule only, untimed;
//   - and a system rule on InboundQPS over all of them (every entry is
//     inbound), which times nothing.
//
// Every entry must be decided the same way by both engines, the breakers
// must have changed state the same number of times, and both engines'
// statistics must agree (bucket placement of the estimated exits aside:
// totals, passes and blocks per second).
func TestExitClockBreakerDifferential(t *testing.T) {
	resources := []string{"plain", "slow", "ratio", "count", "conc"}
	var passes, blocks, untimed [5]int
	var opened [3]uint64
	var sysBlocks uint64
	for seed := int64(1); seed <= 12; seed++ {
		rng := rand.New(rand.NewSource(seed))
		exact, clkA := newTestEngine(t, int64(time.Hour))
		est, clkB := estimatingEngine(t)
		set := rules.Set{
			Flow: []rules.Flow{
				{Resource: "plain", Threshold: 40},
				{Resource: "conc", Metric: rules.Concurrency, Threshold: 2},
			},
			CircuitBreaker: []rules.CircuitBreaker{{
				Resource: "slow", MaxAllowedRT: 5 * time.Millisecond, Threshold: 0.25,
				MinRequestAmount: 20, StatInterval: time.Second, RetryTimeout: 300 * time.Millisecond, Probes: 1,
			}, {
				Resource: "ratio", Strategy: rules.ErrorRatio, Threshold: 0.3,
				MinRequestAmount: 15, StatInterval: time.Second, RetryTimeout: 200 * time.Millisecond, Probes: 2,
			}, {
				Resource: "count", Strategy: rules.ErrorCount, Threshold: 6,
				MinRequestAmount: 10, StatInterval: 500 * time.Millisecond, RetryTimeout: 250 * time.Millisecond, Probes: 1,
			}},
			System: []rules.System{{Metric: rules.InboundQPS, Threshold: 560}},
		}
		require.NoError(t, exact.LoadRules(set))
		require.NoError(t, est.LoadRules(set))
		type held struct {
			a, b Pass
			res  int
			end  int64
		}
		var open []held
		var decisions int
		exit := func(h held) {
			h.a.Exit()
			if !est.exitNeedsClock(h.b.rec, est.inbound) {
				untimed[h.res]++
			}
			h.b.Exit()
		}
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
				exit(h)
			}
			clkA.Set(next)
			clkB.Set(next)
			now := next
			ri := rng.Intn(len(resources))
			res := resources[ri]
			pa, errA := exact.Entry(res)
			pb, errB := est.Entry(res)
			require.Equal(t, errA == nil, errB == nil, "seed %d step %d %s: decisions differ (%v, %v)", seed, step, res, errA, errB)
			decisions++
			if errA != nil {
				blocks[ri]++
				continue
			}
			passes[ri]++
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
			// Errors: one in ten; for the error breakers one in two during
			// every fourth second and one in 300 otherwise.
			failRate := 10
			if ri == 2 || ri == 3 {
				failRate = 300
				if now/int64(time.Second)%4 == 0 {
					failRate = 2
				}
			}
			if rng.Intn(failRate) == 0 {
				pa.SetError(errors.New("x"))
				pb.SetError(errors.New("x"))
			}
			open = append(open, held{pa, pb, ri, now + int64(rt)})
		}
		for _, h := range open {
			exit(h)
		}
		require.Equal(t, 4000, decisions)
		sa, sb := exact.CircuitBreakerStates(), est.CircuitBreakerStates()
		for i := range sa {
			assert.Equal(t, sa[i].Transitions, sb[i].Transitions, "seed %d breaker %s", seed, sa[i].Rule.Resource)
			opened[i] += sa[i].Transitions[stat.BreakerOpen]
		}
		sysBlocks += exact.SystemMetrics().Inbound.TotalBlock
		now := clkA.Nanotime()
		for _, res := range resources {
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
		// The slow-call breaker's exits were timed on both engines, so its
		// RT figures agree exactly.
		a, _ := exact.Snapshot("slow")
		b, _ := est.Snapshot("slow")
		assert.Equal(t, a.TotalRT, b.TotalRT, "seed %d", seed)
	}
	t.Logf("passes %v blocks %v untimed exits %v breakers opened %v", passes, blocks, untimed, opened)
	for i, res := range resources {
		require.Greater(t, passes[i], 1000, "%s: too few passes to test anything", res)
	}
	for i := range opened {
		require.Greater(t, opened[i], uint64(10), "the %s breaker hardly opened", resources[i+1])
	}
	require.Greater(t, blocks[0], 100, "the QPS rule hardly refused")
	require.Greater(t, blocks[1], 100, "the slow-call breaker hardly refused")
	require.Greater(t, blocks[4], 100, "the concurrency rule hardly refused")
	require.Zero(t, untimed[1], "a slow-call breaker's exit went untimed")
	for _, i := range []int{0, 2, 3, 4} {
		require.Greater(t, untimed[i], passes[i]/3, "%s: too few untimed exits to test the estimate", resources[i])
	}
	require.Greater(t, sysBlocks, uint64(100), "the InboundQPS rule hardly refused")
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

// TestExitEstimateInbound: inbound entries are not counted engine-wide
// unless a system rule is in force, read or not (see
// TestInboundCountedWhileRuled); counted under a rule on counts only and
// read, their exits are timed (a sample, see TestReaderSamplesRT).
func TestExitEstimateInbound(t *testing.T) {
	g, clk := estimatingEngine(t)
	p, err := g.Entry("a")
	require.NoError(t, err)
	clk.Advance(3 * time.Millisecond)
	p.Exit()
	in := g.SystemMetrics().Inbound
	assert.Equal(t, uint64(0), in.TotalPass, "not counted without a system rule")
	assert.Equal(t, uint64(0), in.TotalComplete)
	assert.Zero(t, in.AvgRT)
	watchInbound(t, g)
	p, err = g.Entry("b")
	require.NoError(t, err)
	clk.Advance(4 * time.Millisecond)
	p.Exit()
	in = g.SystemMetrics().Inbound
	assert.Equal(t, uint64(1), in.TotalComplete)
	assert.Equal(t, 4*time.Millisecond, in.AvgRT, "timed after the first inbound read")

	// On other engines, a system rule that reads the inbound RT makes
	// inbound exits timed; one that reads counts only does not.
	for _, c := range []struct {
		rule  rules.System
		timed bool
	}{
		{rules.System{Metric: rules.InboundAvgRT, Threshold: 1e6}, true},
		{rules.System{Metric: rules.CPUUsage, Strategy: rules.BBR, Threshold: 0.99}, true},
		{rules.System{Metric: rules.InboundAvgRT, Threshold: 1e6, Shadow: true}, true},
		{rules.System{Metric: rules.InboundQPS, Threshold: 1e6}, false},
		{rules.System{Metric: rules.InboundConcurrency, Threshold: 1e6}, false},
		{rules.System{Metric: rules.Load1, Threshold: 1e6}, false},
	} {
		h, hclk := estimatingEngine(t)
		require.NoError(t, h.LoadRules(rules.Set{System: []rules.System{c.rule}}))
		p, err = h.Entry("a")
		require.NoError(t, err)
		hclk.Advance(2 * time.Millisecond)
		assert.Equal(t, c.timed, h.exitNeedsClock(p.rec, h.inbound), "%+v", c.rule)
		p.Exit()
	}
}

// TestExitNeedsClock lists what makes an exit read the clock, and what
// does not.
func TestExitNeedsClock(t *testing.T) {
	g, clk := estimatingEngine(t)
	require.NoError(t, g.LoadRules(rules.Set{
		Flow: []rules.Flow{{Resource: "qps", Threshold: 1000}, {Resource: "conc", Metric: rules.Concurrency, Threshold: 10},
			{Resource: "tier-rt", Tiers: []rules.Tier{{Above: 100, Threshold: 10}}},
			{Resource: "tier-err", TierMetric: rules.TierErrorRatio, Tiers: []rules.Tier{{Above: 0.5, Threshold: 10}}},
			{Resource: "adaptive", Metric: rules.Concurrency, Adaptive: &rules.Adaptive{Min: 10, Max: 100}}},
		CircuitBreaker: []rules.CircuitBreaker{
			{Resource: "cb", Strategy: rules.ErrorRatio, Threshold: 0.5, RetryTimeout: time.Second},
			{Resource: "cb-count", Strategy: rules.ErrorCount, Threshold: 100, RetryTimeout: time.Second},
			{Resource: "cb-slow", MaxAllowedRT: 5 * time.Millisecond, Threshold: 0.5, RetryTimeout: time.Second},
			{Resource: "cb-open", Strategy: rules.ErrorCount, Threshold: 1, MinRequestAmount: 1, RetryTimeout: time.Second},
		},
		Param: []rules.Param{{Resource: "pqps", Threshold: 1000}, {Resource: "pconc", Metric: rules.Concurrency, Threshold: 10}},
	}))
	needs := func(res string, fail bool, opts ...EntryOption) bool {
		p, err := g.Entry(res, opts...)
		require.NoError(t, err)
		defer p.Exit()
		if fail {
			p.SetError(errors.New("x"))
		}
		var in = g.inbound
		if p.rec.ctx.Traffic != core.Inbound {
			in = nil
		}
		return g.exitNeedsClock(p.rec, in)
	}
	// The estimate lies early in a bucket of the breakers' windows (100 ms).
	clk.Advance(10 * time.Millisecond)
	assert.False(t, needs("qps", false), "a QPS rule consumes no RT")
	assert.False(t, needs("none", false, WithTraffic(core.Outbound)))
	assert.False(t, needs("conc", false), "a concurrency rule gives its slot back, RT or not")
	assert.False(t, needs("pqps", false, WithStringArg(0, "a")), "a param QPS rule holds nothing at Exit")
	assert.False(t, needs("pconc", false, WithStringArg(0, "a")), "a param concurrency rule gives its slot back")
	assert.False(t, needs("tier-err", false), "a tiered rule on the error ratio reads counts only")
	assert.True(t, needs("tier-rt", false), "a tiered rule on the average RT reads it")
	assert.True(t, needs("adaptive", false), "an adaptive rule samples the RT")
	assert.True(t, needs("cb-slow", false), "a slow-call breaker reads the RT")
	assert.False(t, needs("cb", false), "an error breaker's success, no failure in the window")
	assert.False(t, needs("cb-count", false), "an error breaker's success, no failure in the window")
	assert.True(t, needs("cb", true), "an error breaker's failure")
	assert.True(t, needs("cb-count", true), "an error breaker's failure")
	assert.True(t, needs("cb", false), "an error breaker's success with a failure in its window")
	clk.Advance(time.Second + 50*time.Millisecond)
	assert.False(t, needs("cb", false), "the failure has left the window")
	clk.Advance(35 * time.Millisecond) // 95 ms into a bucket
	assert.True(t, needs("cb", false), "the estimate in the last tenth of a bucket")
	clk.Advance(10 * time.Millisecond)
	assert.False(t, needs("cb", false))

	// A half-open probe is timed, whatever its outcome.
	assert.True(t, needs("cb-open", true))
	_, err := g.Entry("cb-open")
	require.Error(t, err, "open")
	clk.Advance(time.Second)
	assert.True(t, needs("cb-open", false), "a half-open probe")

	// Custom slots see the exit's instant.
	require.NoError(t, g.RegisterSlot(&exitRecorder{}, 0))
	assert.True(t, needs("qps", false), "custom slots")

	_, _ = g.Snapshot("conc")
	assert.True(t, needs("conc", false), "a reader of the resource")

	m, _ := newTestEngine(t, 0)
	p, err := m.Entry("x")
	require.NoError(t, err)
	assert.True(t, m.exitNeedsClock(p.rec, m.inbound), "a manual clock: always")
	p.Exit()
}

// exitRecorder is a custom slot that keeps the last exit's instant.
type exitRecorder struct{ end int64 }

func (r *exitRecorder) OnPass(*slots.Entry)                       {}
func (r *exitRecorder) OnBlock(*slots.Entry, *core.BlockError)    {}
func (r *exitRecorder) OnExit(_ *slots.Entry, end int64, _ error) { r.end = end }

// TestExitClockConsumersGetRT checks, on an engine that estimates the exits
// nothing times, that every consumer of an exit's RT or exact instant gets
// it: each case ends calls long after the latest Entry (so that the
// estimate is far from the truth) and checks a decision or a figure that
// only the exact reading gives.
func TestExitClockConsumersGetRT(t *testing.T) {
	ms := time.Millisecond
	enter := func(t *testing.T, g *Engine, res string) Pass {
		t.Helper()
		p, err := g.Entry(res)
		require.NoError(t, err)
		return p
	}
	t.Run("slow-call breaker", func(t *testing.T) {
		g, clk := estimatingEngine(t)
		require.NoError(t, g.LoadRules(rules.Set{CircuitBreaker: []rules.CircuitBreaker{{
			Resource: "r", MaxAllowedRT: 5 * ms, Threshold: 0.5, MinRequestAmount: 2, RetryTimeout: time.Second}}}))
		a, b := enter(t, g, "r"), enter(t, g, "r")
		clk.Advance(6 * ms)
		a.Exit()
		b.Exit()
		_, err := g.Entry("r")
		require.ErrorIs(t, err, core.ErrBlocked, "two slow calls of two open the breaker")
	})
	t.Run("error breaker failure", func(t *testing.T) {
		g, clk := estimatingEngine(t)
		require.NoError(t, g.LoadRules(rules.Set{CircuitBreaker: []rules.CircuitBreaker{{
			Resource: "r", Strategy: rules.ErrorCount, Threshold: 1, MinRequestAmount: 1, RetryTimeout: time.Second}}}))
		p := enter(t, g, "r")
		clk.Advance(200 * ms)
		p.SetError(errors.New("x"))
		p.Exit() // opens until 200 ms + 1 s
		clk.Advance(time.Second - ms)
		_, err := g.Entry("r")
		require.ErrorIs(t, err, core.ErrBlocked, "open for the whole retry timeout from the failure's exit")
	})
	t.Run("error breaker success that opens it", func(t *testing.T) {
		g, clk := estimatingEngine(t)
		require.NoError(t, g.LoadRules(rules.Set{CircuitBreaker: []rules.CircuitBreaker{{
			Resource: "r", Strategy: rules.ErrorCount, Threshold: 2, MinRequestAmount: 3, RetryTimeout: time.Second}}}))
		a, b, c := enter(t, g, "r"), enter(t, g, "r"), enter(t, g, "r")
		clk.Advance(ms)
		a.SetError(errors.New("x"))
		b.SetError(errors.New("x"))
		a.Exit()
		b.Exit()
		clk.Advance(60 * ms)
		c.Exit() // the third call: the minimum request amount, opens at 61 ms
		clk.Advance(time.Second - ms)
		_, err := g.Entry("r")
		require.ErrorIs(t, err, core.ErrBlocked, "open for the whole retry timeout from the success's exit")
	})
	t.Run("half-open probe", func(t *testing.T) {
		g, clk := estimatingEngine(t)
		require.NoError(t, g.LoadRules(rules.Set{CircuitBreaker: []rules.CircuitBreaker{{
			Resource: "r", Strategy: rules.ErrorCount, Threshold: 1, MinRequestAmount: 1,
			StatInterval: time.Second, RetryTimeout: time.Second, Probes: 1}}}))
		p := enter(t, g, "r")
		p.SetError(errors.New("x"))
		p.Exit()
		clk.Advance(time.Second)
		probe := enter(t, g, "r")
		clk.Advance(time.Second) // a probe of StatInterval or longer fails
		probe.Exit()
		_, err := g.Entry("r")
		require.ErrorIs(t, err, core.ErrBlocked, "the slow probe reopened the breaker")
	})
	inbound := func(t *testing.T, sys rules.System) {
		g, clk := estimatingEngine(t)
		require.NoError(t, g.LoadRules(rules.Set{System: []rules.System{sys}}))
		p := enter(t, g, "r")
		clk.Advance(7 * ms)
		p.Exit()
		now := clk.Nanotime()
		v, ok := g.inbound.RecentMinRT(now)
		require.True(t, ok, "the exit was timed")
		assert.Equal(t, int64(7000), v, "µs")
		_, _, rt := window.NewWindowCache(g.inbound).Sums(now)
		assert.Equal(t, uint64(7000), rt)
	}
	t.Run("BBR", func(t *testing.T) { inbound(t, rules.System{Metric: rules.Load1, Strategy: rules.BBR, Threshold: 1e6}) })
	t.Run("inbound average RT", func(t *testing.T) { inbound(t, rules.System{Metric: rules.InboundAvgRT, Threshold: 1e6}) })
	t.Run("tiered on the average RT", func(t *testing.T) {
		g, clk := estimatingEngine(t)
		require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "r", Tiers: []rules.Tier{{Above: 100, Threshold: 10}}}}}))
		p := enter(t, g, "r")
		clk.Advance(7 * ms)
		p.Exit()
		assert.Equal(t, uint64(7000), g.reg.get("r").node.Sum(clk.Nanotime(), window.RT))
	})
	t.Run("custom slot", func(t *testing.T) {
		g, clk := estimatingEngine(t)
		rec := &exitRecorder{}
		require.NoError(t, g.RegisterSlot(rec, 0))
		p := enter(t, g, "r")
		clk.Advance(7 * ms)
		p.Exit()
		assert.Equal(t, clk.Nanotime(), rec.end)
	})
	t.Run("adaptive", func(t *testing.T) {
		g, clk := estimatingEngine(t)
		require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "r", Metric: rules.Concurrency, Adaptive: &rules.Adaptive{Min: 10, Max: 100}}}}))
		p := enter(t, g, "r")
		clk.Advance(7 * ms)
		assert.True(t, g.exitNeedsClock(p.rec, g.inbound))
		p.Exit()
	})
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

// TestAllocExitUntimedAllKinds: an entry on a resource with a rule of every
// kind whose exit goes untimed, tickets released with the estimate,
// allocates nothing.
func TestAllocExitUntimedAllKinds(t *testing.T) {
	g, clk := estimatingEngine(t)
	require.NoError(t, g.LoadRules(rules.Set{
		Flow: []rules.Flow{
			{Resource: "all", Threshold: rules.MaxThreshold},
			{Metric: rules.Concurrency, Resource: "all", Threshold: 1 << 20},
		},
		CircuitBreaker: []rules.CircuitBreaker{{Resource: "all", Strategy: rules.ErrorRatio, Threshold: 0.5, RetryTimeout: time.Second}},
		Param:          []rules.Param{{Resource: "all", Index: 0, Threshold: rules.MaxThreshold}},
		System:         []rules.System{{Metric: rules.InboundQPS, Threshold: rules.MaxThreshold}},
	}))
	clk.Advance(10 * time.Millisecond) // early in a bucket: no exit is timed
	p, err := g.Entry("all", WithStringArg(0, "user-1"))
	require.NoError(t, err)
	require.False(t, g.exitNeedsClock(p.rec, g.inbound))
	p.Exit()
	assert.Zero(t, testing.AllocsPerRun(200, func() {
		p, _ := g.Entry("all", WithStringArg(0, "user-1"))
		p.Exit()
	}))
	assert.Zero(t, g.reg.get("all").node.Concurrency())
}
