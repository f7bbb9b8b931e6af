package sluice

import (
	"container/heap"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/conformance"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// arrival is one request of a differential timeline.
type arrival struct {
	at   int64         // ns on the engines' clocks
	hold time.Duration // time in flight when admitted
	fail bool          // exits with an error
	key  string        // the param rule's argument
}

// diffCase is a rule run enforced in one engine and in shadow mode in
// another, over the same arrivals.
type diffCase struct {
	name string
	set  func(shadow bool) rules.Set
	// rate is the mean arrival rate per second: five times what the rule
	// admits.
	rate float64
	// hold and fail draw an arrival's time in flight and outcome at a
	// second of the run.
	hold func(r *rand.Rand, sec int64) time.Duration
	fail func(r *rand.Rand, sec int64) bool
	// cpu, when set, is the CPU usage the system source reads in each
	// second of the run.
	cpu func(sec int64) float64
}

// timeline draws n seconds of arrivals of c from seed.
func (c *diffCase) timeline(seed uint64, secs int64) []arrival {
	r := rand.New(rand.NewPCG(seed, 22))
	keys := []string{"hot", "hot", "hot", "warm", "warm", "cold"}
	var out []arrival
	at := int64(time.Hour) + 1
	end := at + secs*int64(time.Second)
	for {
		at += int64(r.ExpFloat64() / c.rate * 1e9)
		if at >= end {
			return out
		}
		sec := (at - int64(time.Hour)) / int64(time.Second)
		a := arrival{at: at, key: keys[r.IntN(len(keys))]}
		if c.hold != nil {
			a.hold = c.hold(r, sec)
		}
		if c.fail != nil {
			a.fail = c.fail(r, sec)
		}
		out = append(out, a)
	}
}

// exitAt is a pass to exit at a time.
type exitAt struct {
	at   int64
	seq  int
	p    Pass
	fail bool
}

type exitHeap []exitAt

func (h exitHeap) Len() int { return len(h) }
func (h exitHeap) Less(i, j int) bool {
	return h[i].at < h[j].at || (h[i].at == h[j].at && h[i].seq < h[j].seq)
}
func (h exitHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *exitHeap) Push(x any)   { *h = append(*h, x.(exitAt)) }
func (h *exitHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

var errSimulated = errors.New("simulated failure")

// runTimeline drives one engine through the arrivals and returns, for each,
// whether it was refused (err != nil) and whether a shadow rule would have
// refused it (ShadowBlockedBy grew during its Entry).
func runTimeline(t *testing.T, c *diffCase, shadow bool, arrivals []arrival) (refused, wouldRefuse []bool) {
	t.Helper()
	src := &sysSource{}
	opts := []Option{}
	if c.cpu != nil {
		src.cpu.Store(c.cpu(0))
		opts = append(opts, WithSystemSampler(SystemSampler{Source: src, Interval: time.Second}))
	}
	g, clk := newTestEngine(t, int64(time.Hour), opts...)
	require.NoError(t, g.LoadRules(c.set(shadow)))
	if c.cpu != nil {
		waitSampler(t, clk)
	}
	const res = "diff"
	shadowCount := func() (n uint64) {
		x := g.reg.get(res)
		if x == nil {
			return 0
		}
		for t := range len(stat.Snapshot{}.BlockedBy) {
			n += x.node.ShadowBlockedBy(core.BlockType(t))
		}
		return n
	}
	var exits exitHeap
	sec := int64(time.Hour) / int64(time.Second)
	// advance moves the clock to at, exiting what is due first and, for a
	// system case, resampling the CPU at each whole second.
	advance := func(at int64) {
		for {
			next := int64(math.MaxInt64)
			if c.cpu != nil {
				next = (sec + 1) * int64(time.Second)
			}
			if len(exits) > 0 && exits[0].at <= at && exits[0].at < next {
				e := heap.Pop(&exits).(exitAt)
				clk.Set(e.at)
				if e.fail {
					e.p.SetError(errSimulated)
				}
				e.p.Exit()
				continue
			}
			if c.cpu == nil || next > at {
				break
			}
			src.cpu.Store(c.cpu(sec + 1 - int64(time.Hour)/int64(time.Second)))
			clk.Set(next)
			waitSampler(t, clk)
			sec++
		}
		clk.Set(at)
	}
	refused = make([]bool, len(arrivals))
	wouldRefuse = make([]bool, len(arrivals))
	for i, a := range arrivals {
		advance(a.at)
		before := shadowCount()
		p, err := g.Entry(res, WithStringArg(0, a.key))
		if err != nil {
			var be *core.BlockError
			require.True(t, errors.As(err, &be), "arrival %d: %v", i, err)
			require.False(t, be.Shadow)
			refused[i] = true
		} else {
			heap.Push(&exits, exitAt{at: a.at + int64(a.hold), seq: i, p: p, fail: a.fail})
		}
		wouldRefuse[i] = shadowCount() > before
	}
	return refused, wouldRefuse
}

// TestConformanceShadowDifferential: under five times the load a rule
// admits, a rule in shadow mode refuses nothing and would refuse exactly
// the arrivals the same rule refuses when enforced, arrival by arrival, for
// the same seeded timeline, for every kind of rule whose decision depends
// on its own counting (a system rule on a metric the traffic does not move,
// CPU usage read from a source, included).
func TestConformanceShadowDifferential(t *testing.T) {
	flow := func(f rules.Flow) func(bool) rules.Set {
		return func(sh bool) rules.Set {
			f.Resource, f.Shadow = "diff", sh
			return rules.Set{Flow: []rules.Flow{f}}
		}
	}
	short := func(r *rand.Rand, _ int64) time.Duration { return time.Duration(1+r.IntN(20)) * time.Millisecond }
	long := func(r *rand.Rand, _ int64) time.Duration { return time.Duration(10+r.IntN(190)) * time.Millisecond }
	// Failing in bursts: half the calls in seconds 2 and 3 of every eight,
	// few otherwise.
	bursts := func(r *rand.Rand, sec int64) bool {
		if sec%8 == 2 || sec%8 == 3 {
			return r.IntN(2) == 0
		}
		return r.IntN(20) == 0
	}
	cases := []diffCase{
		{name: "qps reject", set: flow(rules.Flow{Threshold: 100}), rate: 500, hold: short},
		{name: "qps reject 250ms interval", set: flow(rules.Flow{Threshold: 30, StatInterval: 250 * time.Millisecond}), rate: 600, hold: short},
		{name: "qps exact window", set: flow(rules.Flow{Threshold: 100, Exact: true}), rate: 500, hold: short},
		{name: "token bucket", set: flow(rules.Flow{Threshold: 100, Bucket: &rules.Bucket{Burst: 40}}), rate: 500, hold: short},
		{name: "warm-up", set: flow(rules.Flow{Threshold: 100, WarmUp: &rules.WarmUp{Period: 2 * time.Second}}), rate: 500, hold: short},
		{name: "concurrency", set: flow(rules.Flow{Metric: rules.Concurrency, Threshold: 10}), rate: 500, hold: long},
		// A tiered rule on a metric the traffic does not move (CPU read
		// from a source): on the resource's own RT or errors, the shadow
		// engine runs the calls the enforced one refuses, which move them.
		{name: "tiered on cpu", set: flow(rules.Flow{Threshold: 200, TierMetric: rules.TierCPU, Tiers: []rules.Tier{{Above: 0.6, Below: 0.4, Threshold: 100}, {Above: 0.85, Threshold: 40}}}),
			rate: 1000, hold: short, cpu: func(sec int64) float64 { return []float64{0.5, 0.7, 0.5, 0.9, 0.3, 0.2, 0.9, 0.1}[sec%8] }},
		{name: "param qps", set: func(sh bool) rules.Set {
			return rules.Set{Param: []rules.Param{{Resource: "diff", Threshold: 20, Burst: 5, Shadow: sh}}}
		}, rate: 300, hold: short},
		{name: "param concurrency", set: func(sh bool) rules.Set {
			return rules.Set{Param: []rules.Param{{Resource: "diff", Metric: rules.Concurrency, Threshold: 3, Shadow: sh}}}
		}, rate: 300, hold: long},
		{name: "breaker error ratio", set: func(sh bool) rules.Set {
			return rules.Set{CircuitBreaker: []rules.CircuitBreaker{{Resource: "diff", Strategy: rules.ErrorRatio, Threshold: 0.3,
				RetryTimeout: 300 * time.Millisecond, Probes: 2, Shadow: sh}}}
		}, rate: 200, hold: short, fail: bursts},
		{name: "breaker slow ratio", set: func(sh bool) rules.Set {
			return rules.Set{CircuitBreaker: []rules.CircuitBreaker{{Resource: "diff", Threshold: 0.3, MaxAllowedRT: 50 * time.Millisecond,
				RetryTimeout: 300 * time.Millisecond, Shadow: sh}}}
		}, rate: 200, hold: func(r *rand.Rand, sec int64) time.Duration {
			if sec%8 == 1 || sec%8 == 4 {
				return long(r, sec)
			}
			return short(r, sec)
		}},
		{name: "system cpu", set: func(sh bool) rules.Set {
			return rules.Set{System: []rules.System{{Metric: rules.CPUUsage, Threshold: 0.8, Shadow: sh}}}
		}, rate: 100, hold: short, cpu: func(sec int64) float64 { return []float64{0.5, 0.9, 0.95, 0.7, 0.85, 0.2, 0.9, 0.1}[sec%8] }},
	}
	secs := int64(conformance.Steps(5))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 2; seed++ {
				arr := c.timeline(seed, secs)
				refused, none := runTimeline(t, &c, false, arr)
				passedAll, would := runTimeline(t, &c, true, arr)
				nRefused, nWould := 0, 0
				for i := range arr {
					require.False(t, passedAll[i], "seed %d arrival %d: the shadow rule refused", seed, i)
					require.False(t, none[i], "seed %d arrival %d: the enforced rule counted a shadow refusal", seed, i)
					if refused[i] {
						nRefused++
					}
					if would[i] {
						nWould++
					}
				}
				for i := range arr {
					require.Equal(t, refused[i], would[i], "seed %d arrival %d at %v: enforced refused %v, shadow would have %v", seed, i, time.Duration(arr[i].at), refused[i], would[i])
				}
				// Overload is real: the rule refuses a large share.
				assert.Greater(t, nRefused, len(arr)/10, "seed %d: %d of %d refused", seed, nRefused, len(arr))
				t.Logf("seed %d: %d arrivals, %d refused enforced, %d would be in shadow mode", seed, len(arr), nRefused, nWould)
			}
		})
	}
}

// TestShadowRefusesNothingAndReports: a shadow rule lets every request
// through, and its would-be refusals appear in Snapshot, History and the
// block log, marked shadow; Entry never returns them.
func TestShadowRefusesNothingAndReports(t *testing.T) {
	log := &captureHandler{}
	g, clk := newTestEngine(t, int64(time.Hour), WithBlockLog(slog.New(log)), WithHistory(time.Minute))
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{{ID: "try", Resource: "r", Threshold: 10, Shadow: true}}}))
	for i := 0; i < 50; i++ {
		p, err := g.Entry("r")
		require.NoError(t, err)
		p.Exit()
	}
	s, ok := g.Snapshot("r")
	require.True(t, ok)
	assert.Equal(t, uint64(40), s.ShadowBlockedBy[core.BlockFlow])
	assert.Equal(t, uint64(50), s.TotalPass)
	assert.Zero(t, s.TotalBlock)
	clk.Advance(time.Second)
	h := g.History("r", time.Minute)
	require.NotEmpty(t, h)
	assert.Equal(t, uint64(40), h[len(h)-1].ShadowBlock)
	assert.Equal(t, uint64(50), h[len(h)-1].Pass)
	g.Snapshot("r") // flushes the block log's second
	recs := log.take()
	require.Len(t, recs, 1, "%v", recs)
	assert.Contains(t, recs[0].Message, "r would have refused 40 by flow shadow rule \"try\"")
	assert.Equal(t, "true", attrs(recs[0])["shadow"])
	assert.Equal(t, "40", attrs(recs[0])["count"])
}

// TestShadowFlipKeepsState: flipping Shadow by a reload keeps what the rule
// counted: a rule that admitted its threshold in shadow mode refuses the
// next request of the same second once enforced, and the other way round.
func TestShadowFlipKeepsState(t *testing.T) {
	g, clk := newTestEngine(t, int64(time.Hour))
	load := func(sh bool) {
		require.NoError(t, g.LoadRules(rules.Set{
			Flow:  []rules.Flow{{Resource: "q", Threshold: 5, Shadow: sh}, {Resource: "c", Metric: rules.Concurrency, Threshold: 2, Shadow: sh}},
			Param: []rules.Param{{Resource: "p", Threshold: 3, Shadow: sh}},
		}))
	}
	load(true)
	for i := 0; i < 7; i++ {
		require.True(t, try(g, "q"))
		require.True(t, try(g, "p", WithStringArg(0, "k")))
	}
	held := []Pass{}
	for i := 0; i < 3; i++ {
		p, err := g.Entry("c")
		require.NoError(t, err)
		held = append(held, p)
	}
	load(false)
	assert.False(t, try(g, "q"), "the window counted 5 in shadow mode")
	assert.False(t, try(g, "p", WithStringArg(0, "k")), "the bucket was emptied in shadow mode")
	_, err := g.Entry("c")
	assert.Error(t, err, "two in flight counted in shadow mode (the third was a would-be refusal)")
	held[0].Exit()
	held[1].Exit()
	p, err := g.Entry("c")
	require.NoError(t, err, "the two counted slots came back")
	p.Exit()
	held[2].Exit()
	// Back to shadow: nothing refused, the count goes on.
	load(true)
	before, _ := g.Snapshot("q")
	assert.True(t, try(g, "q"))
	after, _ := g.Snapshot("q")
	assert.Equal(t, before.ShadowBlockedBy[core.BlockFlow]+1, after.ShadowBlockedBy[core.BlockFlow])
	clk.Advance(time.Second)
	assert.True(t, try(g, "q"))
	after2, _ := g.Snapshot("q")
	assert.Equal(t, after.ShadowBlockedBy, after2.ShadowBlockedBy, "a new second admits again")
}

// TestShadowPacingNeverWaits: a throttling rule in shadow mode takes its
// turns as the enforced rule would but never waits (Entry returns at once,
// on a clock that never moves); a turn beyond MaxQueueing is a would-be
// refusal.
func TestShadowPacingNeverWaits(t *testing.T) {
	for _, f := range []rules.Flow{
		{Resource: "t", Threshold: 10, Throttle: &rules.Throttle{MaxQueueing: 250 * time.Millisecond}},
		{Resource: "t", Threshold: 10, Bucket: &rules.Bucket{Burst: 1}, Throttle: &rules.Throttle{MaxQueueing: 250 * time.Millisecond}},
	} {
		t.Run(fmt.Sprint(f.Bucket != nil), func(t *testing.T) {
			g, _ := newTestEngine(t, int64(time.Hour))
			f.Shadow = true
			require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{f}}))
			for i := 0; i < 10; i++ {
				require.True(t, try(g, "t"))
			}
			s, _ := g.Snapshot("t")
			// Turns at 0, 100 and 200 ms fit 250 ms of queueing; the
			// other seven would have been refused.
			assert.Equal(t, uint64(7), s.ShadowBlockedBy[core.BlockFlow])
		})
	}
	t.Run("param", func(t *testing.T) {
		g, _ := newTestEngine(t, int64(time.Hour))
		require.NoError(t, g.LoadRules(rules.Set{Param: []rules.Param{{Resource: "t", Threshold: 10, Throttle: &rules.Throttle{MaxQueueing: 250 * time.Millisecond}, Shadow: true}}}))
		for i := 0; i < 10; i++ {
			require.True(t, try(g, "t", WithStringArg(0, "v")))
		}
		s, _ := g.Snapshot("t")
		assert.Equal(t, uint64(7), s.ShadowBlockedBy[core.BlockParam])
	})
}

// TestShadowHistorySeconds: each second of the history holds that
// second's would-be refusals, past the minute window too, and none of a
// second without them.
func TestShadowHistorySeconds(t *testing.T) {
	g, clk := newTestEngine(t, 0, WithHistory(5*time.Minute))
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "r", Threshold: 2, Shadow: true}}}))
	g.History("r", 5*time.Minute) // the history is kept from the first read on
	for sec := 0; sec < 90; sec++ {
		clk.Set(int64(sec) * int64(time.Second))
		for i := 0; i < 2+sec%5; i++ { // sec%5 would-be refusals
			require.True(t, try(g, "r"))
		}
	}
	clk.Set(90 * int64(time.Second))
	h := g.History("r", 5*time.Minute)
	require.Len(t, h, 90)
	for sec, s := range h {
		assert.Equal(t, uint64(sec%5), s.ShadowBlock, "second %d", sec)
		assert.Equal(t, uint64(2+sec%5), s.Pass, "second %d", sec)
		assert.Zero(t, s.Block)
	}
}

// TestShadowBreakerFlipKeepsState: a breaker in shadow mode opens as the
// enforced one would (its would-be refusals counted, nothing refused), and
// enforced by a reload it is still open: it refuses until its retry
// timeout, then probes.
func TestShadowBreakerFlipKeepsState(t *testing.T) {
	g, clk := newTestEngine(t, int64(time.Hour))
	cb := rules.CircuitBreaker{Resource: "db", Strategy: rules.ErrorCount, Threshold: 2, MinRequestAmount: 1, RetryTimeout: time.Second, Shadow: true}
	require.NoError(t, g.LoadRules(rules.Set{CircuitBreaker: []rules.CircuitBreaker{cb}}))
	for i := 0; i < 2; i++ {
		p, err := g.Entry("db")
		require.NoError(t, err)
		p.SetError(errSimulated)
		p.Exit()
	}
	require.True(t, try(g, "db"), "open, in shadow mode")
	s, _ := g.Snapshot("db")
	assert.Equal(t, uint64(1), s.ShadowBlockedBy[core.BlockDegrade])
	cb.Shadow = false
	require.NoError(t, g.LoadRules(rules.Set{CircuitBreaker: []rules.CircuitBreaker{cb}}))
	_, err := g.Entry("db")
	var be *core.BlockError
	require.True(t, errors.As(err, &be), "still open once enforced: %v", err)
	assert.Equal(t, core.BlockDegrade, be.Type)
	clk.Advance(time.Second)
	assert.True(t, try(g, "db"), "the probe after the retry timeout")
}
