package sluice

import (
	"container/heap"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// tierRun offers one request per millisecond to resource "api" under rule,
// each holding for rt(t) (t in ms since the start) when admitted, for ms
// milliseconds from an hour on the engine's manual clock. It returns the
// admissions of each second and the tier events, with their times
// relative to the start.
func tierRun(t *testing.T, rule rules.Flow, ms int64, rt func(t int64) time.Duration, check func(g *Engine, at int64)) (perSec []int, events []stat.Event) {
	t.Helper()
	const start = int64(time.Hour)
	g, clk := newTestEngine(t, start)
	var mu sync.Mutex
	cancel := g.Subscribe(func(e stat.Event) {
		if e.Kind == stat.EventTier {
			mu.Lock()
			e.At -= start
			events = append(events, e)
			mu.Unlock()
		}
	})
	defer cancel()
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{rule}}))
	var exits exitHeap
	perSec = make([]int, (ms+999)/1000)
	for i := int64(0); i < ms; i++ {
		now := start + i*int64(time.Millisecond)
		for len(exits) > 0 && exits[0].at <= now {
			e := heap.Pop(&exits).(exitAt)
			clk.Set(e.at)
			e.p.Exit()
		}
		clk.Set(now)
		if p, err := g.Entry("api"); err == nil {
			perSec[i/1000]++
			heap.Push(&exits, exitAt{at: now + int64(rt(i)), seq: int(i), p: p})
		}
		if check != nil {
			check(g, i)
		}
	}
	g.Subscribe(func(stat.Event) {})() // events are delivered in order; wait for none
	mu.Lock()
	defer mu.Unlock()
	return perSec, append([]stat.Event(nil), events...)
}

// tierDelay is the longest a tiered rule on the average RT takes to move
// after a step change of RT to rt: the calls admitted after the step exit
// rt later, the last second's average crosses the bound within the second
// after that, and the first entry of the next TierEvery period reads it.
func tierDelay(rt time.Duration) int64 {
	return int64(time.Second+rt+100*time.Millisecond) / int64(time.Millisecond)
}

// TestTieredFollowsRT: RT stepped 50 → 150 → 250 → 70 ms gives admissions
// per second unlimited → 500 → 200 → unlimited, each move within
// tierDelay of the step (one event each), and in every whole second after
// a move has settled exactly the tier's threshold.
func TestTieredFollowsRT(t *testing.T) {
	rule := rules.Flow{Resource: "api", Tiers: []rules.Tier{
		{Above: 100, Below: 80, Threshold: 500},
		{Above: 200, Below: 180, Threshold: 200},
	}}
	steps := []struct {
		rt    time.Duration
		tier  int
		limit int // per second, 1000 (every offered request) for none
	}{{50 * time.Millisecond, 0, 1000}, {150 * time.Millisecond, 1, 500}, {250 * time.Millisecond, 2, 200}, {70 * time.Millisecond, 0, 1000}}
	const phase = 5000 // ms
	tiers := map[int64]int{}
	perSec, events := tierRun(t, rule, phase*int64(len(steps)), func(i int64) time.Duration { return steps[i/phase].rt },
		func(g *Engine, i int64) {
			if i%phase == phase-1 {
				s, _ := g.Snapshot("api")
				tiers[i/phase] = s.Tier
			}
		})
	// Each step's moves fall within tierDelay of it and end on its tier;
	// on the way down the average RT passes through the tier between, and
	// the rule with it (250 -> 70 ms: 2 -> 1 -> 0).
	settled := make([]int64, len(steps)) // ms of each step's last move
	j := 0
	for k := 1; k < len(steps); k++ {
		step := int64(k) * phase
		last := -1
		for ; j < len(events) && events[j].At/int64(time.Millisecond) < step+phase; j++ {
			e := events[j]
			at := e.At / int64(time.Millisecond)
			require.GreaterOrEqual(t, at, step, "a move before step %d: %v", k, e)
			assert.LessOrEqual(t, at-step, tierDelay(steps[k].rt), "step %d: move from %s to %s took %d ms", k, e.From, e.To, at-step)
			assert.Equal(t, "api", e.Resource)
			if last >= 0 {
				assert.Equal(t, last, atoi(e.From))
			}
			last = atoi(e.To)
			settled[k] = at
			t.Logf("RT %v -> %v: tier %s -> %s after %d ms (avg RT read %.1f ms)", steps[k-1].rt, steps[k].rt, e.From, e.To, at-step, e.Value)
		}
		require.Equal(t, steps[k].tier, last, "step %d ends on its tier", k)
	}
	require.Equal(t, len(events), j)
	for k, s := range steps {
		assert.Equal(t, s.tier, tiers[int64(k)], "Snapshot.Tier at the end of step %d", k)
		// The seconds of the step from two seconds after the move: the
		// window has slid past the admissions of the tier before.
		from := settled[k]/1000 + 2
		if k == 0 {
			from = 0
		}
		for sec := from; sec < int64(k+1)*phase/1000; sec++ {
			assert.Equal(t, s.limit, perSec[sec], "second %d of step %d (RT %v)", sec, k, s.rt)
		}
	}
	t.Logf("admissions per second: %v", perSec)
}

// TestTieredNoFlapping: an RT that oscillates around a tier's bound inside
// its hysteresis band moves the rule once, however long it goes on.
func TestTieredNoFlapping(t *testing.T) {
	rule := rules.Flow{Resource: "api", Threshold: 800, Tiers: []rules.Tier{
		{Above: 100, Below: 80, Threshold: 500},
		{Above: 200, Below: 180, Threshold: 200},
	}}
	// 2 s at 150 ms (into tier 1), then 6 s alternating 85 and 115 ms every
	// 300 ms (around 100, above 80), then 2 s at 250 ms (into tier 2),
	// then 6 s alternating 185 and 215 ms (around 200, above 180).
	rt := func(i int64) time.Duration {
		hi := i/300%2 == 0
		switch {
		case i < 2000:
			return 150 * time.Millisecond
		case i < 8000:
			return map[bool]time.Duration{true: 115, false: 85}[hi] * time.Millisecond
		case i < 10000:
			return 250 * time.Millisecond
		default:
			return map[bool]time.Duration{true: 215, false: 185}[hi] * time.Millisecond
		}
	}
	_, events := tierRun(t, rule, 16000, rt, nil)
	require.Len(t, events, 2, "%v", events)
	assert.Equal(t, []string{"0", "1"}, []string{events[0].From, events[0].To})
	assert.Equal(t, []string{"1", "2"}, []string{events[1].From, events[1].To})
	assert.Less(t, events[0].At, int64(2*time.Second))
	assert.Less(t, events[1].At, int64(10*time.Second))
}

// TestTieredReloadKeepsTier: reloading a tiered rule (its shadow flag
// flipped, a step's threshold changed) keeps its step and its window.
func TestTieredReloadKeepsTier(t *testing.T) {
	g, clk := newTestEngine(t, int64(time.Hour))
	rule := rules.Flow{Resource: "api", Threshold: 100, Tiers: []rules.Tier{{Above: 10, Threshold: 5}}}
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{rule}}))
	p, err := g.Entry("api")
	require.NoError(t, err)
	clk.Advance(50 * time.Millisecond)
	p.Exit() // RT 50 ms > 10
	clk.Advance(100 * time.Millisecond)
	for i := 0; i < 4; i++ {
		require.True(t, try(g, "api"))
	}
	s, _ := g.Snapshot("api")
	require.Equal(t, 1, s.Tier)
	assert.False(t, try(g, "api"), "tier 1 admits 5 a second")
	rule.Shadow = true
	rule.Tiers = []rules.Tier{{Above: 10, Threshold: 6}}
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{rule}}))
	s, _ = g.Snapshot("api")
	assert.Equal(t, 1, s.Tier)
	assert.True(t, try(g, "api"))
	s, _ = g.Snapshot("api")
	assert.Zero(t, s.ShadowBlockedBy[1], "6 within 6")
	assert.True(t, try(g, "api"))
	s, _ = g.Snapshot("api")
	assert.Equal(t, uint64(1), s.ShadowBlockedBy[1], "the 7th would be refused")
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// TestTieredErrorRatio: a tiered rule on the error ratio moves up once the
// last second's errors pass its bound, at the next 100 ms period, and back
// when they fall under its Below.
func TestTieredErrorRatio(t *testing.T) {
	g, clk := newTestEngine(t, int64(time.Hour))
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "api", Threshold: 100,
		TierMetric: rules.TierErrorRatio, Tiers: []rules.Tier{{Above: 0.5, Below: 0.2, Threshold: 3}}}}}))
	call := func(fail bool) bool {
		p, err := g.Entry("api")
		if err != nil {
			return false
		}
		if fail {
			p.SetError(errSimulated)
		}
		p.Exit()
		return true
	}
	for i := 0; i < 10; i++ {
		require.True(t, call(i < 6)) // 6 of 10 fail
	}
	s, _ := g.Snapshot("api")
	assert.Zero(t, s.Tier, "read at the period's first entry, before the errors")
	clk.Advance(100 * time.Millisecond)
	require.False(t, call(false), "reads 0.6: tier 1, 3 a second, and 10 are in the window")
	s, _ = g.Snapshot("api")
	require.Equal(t, 1, s.Tier)
	clk.Advance(time.Second) // the window empties
	assert.True(t, call(false), "reads no exit in the last second: stays")
	s, _ = g.Snapshot("api")
	assert.Equal(t, 1, s.Tier)
	assert.True(t, call(false))
	assert.True(t, call(false))
	assert.False(t, call(false), "3 a second on tier 1")
	clk.Advance(100 * time.Millisecond)
	assert.True(t, call(false), "reads 0 errors of 3: below 0.2, back to 100 a second")
	s, _ = g.Snapshot("api")
	assert.Zero(t, s.Tier)
}
