package sluice

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
)

// callerAdmitted counts how many of n entries of caller into res pass (each
// exits at once), and checks every refusal is a flow refusal.
func callerAdmitted(t *testing.T, g *Engine, res, caller string, n int) int {
	t.Helper()
	ok := 0
	for range n {
		p, err := g.Entry(res, WithCaller(caller))
		if err == nil {
			ok++
			p.Exit()
			continue
		}
		require.True(t, blockedBy(err, core.BlockFlow), "%v", err)
	}
	return ok
}

// TestCallerFlowSentinelCases are the limitApp cases of Alibaba Sentinel's
// FlowRuleCheckerTest (sentinel-core, slots/block/flow), in this project's
// terms: a rule without Caller (limitApp default) counts every caller
// together; a rule naming a caller counts that caller only, and any other
// caller passes it (testCustomOriginFlowSelectNode, testPassCheckSelect
// EmptyNodeSuccess); an "other" rule counts each caller that has no rule
// of its own, and not one that has (testOtherOriginFlowSelectNode). An
// entry without a caller is counted only by rules without Caller (Sentinel
// selects no origin node for an empty origin).
func TestCallerFlowSentinelCases(t *testing.T) {
	type want struct {
		caller string
		n, ok  int
	}
	tests := []struct {
		source string
		rules  []rules.Flow
		seq    []want // in order, on one engine, within one second
	}{
		{"testDefaultLimitAppFlowSelectNode: default counts everyone together",
			[]rules.Flow{{Threshold: 2}},
			[]want{{"appA", 1, 1}, {"appB", 3, 1}, {"", 1, 0}}},
		{"testCustomOriginFlowSelectNode: a named rule counts its caller",
			[]rules.Flow{{Threshold: 1, Caller: "appA"}},
			[]want{{"appA", 3, 1}, {"appB", 5, 5}, {"", 5, 5}}},
		{"testPassCheckSelectEmptyNodeSuccess: another caller passes a named rule",
			[]rules.Flow{{Threshold: 1, Caller: "abc"}},
			[]want{{"def", 10, 10}}},
		{"testOtherOriginFlowSelectNode: other counts callers without a rule, each apart",
			[]rules.Flow{{Threshold: 1, Caller: "appA"}, {Threshold: 2, Caller: "other"}},
			[]want{{"appB", 3, 2}, {"appC", 3, 2}, {"appA", 3, 1}, {"", 4, 4}}},
		{"default and per-caller rules together: both count",
			[]rules.Flow{{Threshold: 5}, {Threshold: 2, Caller: "other"}, {Threshold: 10, Caller: "partner"}},
			[]want{{"a", 3, 2}, {"partner", 5, 3}, {"b", 1, 0}}},
	}
	for _, tc := range tests {
		t.Run(tc.source, func(t *testing.T) {
			g, _ := newTestEngine(t, 0)
			rs := tc.rules
			for i := range rs {
				rs[i].Resource = "res"
			}
			require.NoError(t, g.LoadRules(rules.Set{Flow: rs}))
			for _, w := range tc.seq {
				assert.Equal(t, w.ok, callerAdmitted(t, g, "res", w.caller, w.n), "caller %q", w.caller)
			}
		})
	}
}

// TestCallerFlowConcurrent: 64 goroutines enter for 1,000 callers at once
// under an "other" rule of 3 per second on a manual clock: each caller
// passes exactly 3 per second, in the first second and after the clock
// moves on (its window emptied), and a named partner its own 7.
func TestCallerFlowConcurrent(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{
		{Resource: "api", Threshold: 3, Caller: "other"},
		{Resource: "api", Threshold: 7, Caller: "partner"},
	}}))
	const callers, workers, tries = 1000, 64, 5
	names := make([]string, callers+1)
	for i := range callers {
		names[i] = fmt.Sprintf("svc-%d", i)
	}
	names[callers] = "partner"
	for round := range 2 {
		passed := make([]atomic.Int64, len(names))
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range tries * 2 {
					for i := w; i < len(names); i += workers / 4 {
						if p, err := g.Entry("api", WithCaller(names[i])); err == nil {
							passed[i].Add(1)
							p.Exit()
						}
						_ = k
					}
				}
			}()
		}
		wg.Wait()
		for i, n := range names {
			want := int64(3)
			if n == "partner" {
				want = 7
			}
			require.Equal(t, want, passed[i].Load(), "round %d, caller %s", round, n)
		}
		clk.Advance(time.Second)
	}
}

// TestCallerFlowWindowConcurrent: 64 goroutines enter for 1,000 callers
// and a named partner at instants just before and after the edges of the
// window's buckets (half a second of a one-second StatInterval): at 0,
// 1s-1ns, 1s, 1.5s-1ns, 1.5s, 2.5s-1ns and 2.5s. Each caller passes at most
// its threshold in every two consecutive buckets, exactly what Sentinel's
// origin node admits (a token bucket passed 2 more of 3 at 1s-1ns, and 6
// more of 7 for the partner).
func TestCallerFlowWindowConcurrent(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{
		{Resource: "api", Threshold: 3, Caller: "other"},
		{Resource: "api", Threshold: 7, Caller: "partner"},
	}}))
	const callers, workers, tries = 1000, 64, 4 // 16 tries per caller and instant
	names := make([]string, callers+1)
	for i := range callers {
		names[i] = fmt.Sprintf("svc-%d", i)
	}
	names[callers] = "partner"
	const ms = int64(time.Millisecond)
	at := []int64{0, 1000*ms - 1, 1000 * ms, 1500*ms - 1, 1500 * ms, 2500*ms - 1, 2500 * ms}
	// What each instant passes for a threshold of 3 and of 7: the window
	// is the bucket of the instant and the one before.
	want := map[int64][]int64{3: {3, 0, 3, 0, 0, 3, 0}, 7: {7, 0, 7, 0, 0, 7, 0}}
	passed := make([][]int64, len(names)) // by caller, by instant
	for i := range passed {
		passed[i] = make([]int64, len(at))
	}
	for k, now := range at {
		clk.Set(now)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range tries {
					for i := w; i < len(names); i += workers / 4 {
						if p, err := g.Entry("api", WithCaller(names[i])); err == nil {
							atomic.AddInt64(&passed[i][k], 1)
							p.Exit()
						}
					}
				}
			}()
		}
		wg.Wait()
	}
	for i, n := range names {
		limit := int64(3)
		if n == "partner" {
			limit = 7
		}
		// Every window of two consecutive half-second buckets.
		for b := int64(0); b < 3000*ms; b += 500 * ms {
			sum := int64(0)
			for k, now := range at {
				if now >= b && now < b+1000*ms {
					sum += passed[i][k]
				}
			}
			require.LessOrEqual(t, sum, limit, "caller %s in [%v, %v)", n, time.Duration(b), time.Duration(b+1000*ms))
		}
		require.Equal(t, want[limit], passed[i], "caller %s at %v", n, at)
	}
}

// TestCallerFlowReload: a reload that keeps an "other" rule counting the
// same way keeps each caller's count, whatever else changes (a named rule
// added, the threshold raised); a caller given a rule of its own leaves the
// "other" count.
func TestCallerFlowReload(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	set := rules.Set{Flow: []rules.Flow{{Resource: "api", Threshold: 3, Caller: "other"}}}
	require.NoError(t, g.LoadRules(set))
	assert.Equal(t, 2, callerAdmitted(t, g, "api", "a", 2))
	assert.Equal(t, 3, callerAdmitted(t, g, "api", "b", 4))
	set.Flow = append(set.Flow, rules.Flow{Resource: "api", Threshold: 1, Caller: "b"})
	require.NoError(t, g.LoadRules(set))
	assert.Equal(t, 1, callerAdmitted(t, g, "api", "a", 5), "a keeps its count of 2 of 3")
	assert.Equal(t, 1, callerAdmitted(t, g, "api", "b", 5), "b has a rule of its own now, counted afresh")
	set.Flow[0].Threshold = 4
	require.NoError(t, g.LoadRules(set))
	assert.Equal(t, 1, callerAdmitted(t, g, "api", "a", 5), "the window keeps its count of 3, now of 4")
	clk.Advance(time.Second)
	assert.Equal(t, 4, callerAdmitted(t, g, "api", "a", 6))
	// An invalid load changes nothing.
	bad := set
	bad.Flow = append(append([]rules.Flow(nil), set.Flow...), rules.Flow{Resource: "api", Threshold: 1.5, Caller: "c"})
	err := g.LoadRules(bad)
	var re *rules.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "Threshold", re.Field)
	assert.Equal(t, 2, re.Index)
	assert.Equal(t, set, g.Rules())
	assert.Equal(t, 0, callerAdmitted(t, g, "api", "a", 1))
}

// TestCallerFlowMemoryBound: a million distinct callers (a hundred
// thousand under the race detector) through an "other" rule leave at most
// its 10,000 callers tracked and the heap within a few MiB of where it
// started, and a caller that stays tracked keeps an exact count: one
// entering once per thousand others, frequent enough to be kept
// (internal/param evicts the quietest first), passes exactly its 50 of
// 1,000 tries (100 under the race detector) on a clock that stands
// still.
func TestCallerFlowMemoryBound(t *testing.T) {
	n := 1_000_000
	if raceEnabled || testing.Short() {
		n = 100_000
	}
	g, _ := newTestEngine(t, 0)
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "api", Threshold: 50, Caller: "other"}}}))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	steady := 0
	buf := make([]byte, 0, 32)
	for i := range n {
		buf = fmt.Appendf(buf[:0], "caller-%d", i)
		if p, err := g.Entry("api", WithCaller(string(buf))); err == nil {
			p.Exit()
		}
		if i%1000 == 0 {
			steady += callerAdmitted(t, g, "api", "steady", 1)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	assert.Equal(t, 50, steady, "the steady caller got exactly its 50")
	tracked := g.callers.byRes["api"].other[0].Tracked()
	assert.LessOrEqual(t, tracked, 10_000)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d callers: %d tracked, heap grew %d bytes", n, tracked, grew)
	assert.Less(t, grew, int64(16<<20), "the heap grew by more than 16 MiB")
}

// TestCallerFlowClusterWindow: a cluster per-caller rule asks the store
// for a sliding window per caller (under a key of its own), so a caller
// that spent its 5 at the start of a minute gets none a nanosecond before
// the minute ends, where a token bucket had earned it 4 more.
func TestCallerFlowClusterWindow(t *testing.T) {
	clk := sluicetest.NewManualClock(1_000_000_000_000)
	st := newFakeStore(clk)
	g := New(WithClock(clk), WithCluster(st, ClusterConfig{App: "shop", Timeout: time.Hour}))
	t.Cleanup(func() { _ = g.Close() })
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{
		{Resource: "post", Threshold: 5, StatInterval: time.Minute, Caller: "other", Cluster: &rules.Cluster{}},
	}}))
	enter := func(n int) int {
		ok := 0
		for range n {
			if p, err := g.Entry("post", WithCaller("svc")); err == nil {
				ok++
				p.Exit()
			}
		}
		return ok
	}
	require.Equal(t, 5, enter(8))
	clk.Advance(time.Minute - 1)
	require.Equal(t, 0, enter(8), "within the minute")
	clk.Advance(1)
	require.Equal(t, 5, enter(8), "the first 5 have left the window")
	st.mu.Lock()
	defer st.mu.Unlock()
	require.Len(t, st.log, 1, "one sliding window: the caller's")
	for k := range st.log {
		require.Contains(t, k, "/window/60000ms/")
	}
	require.Empty(t, st.tb, "no token bucket")
}

// TestCallerFlowClusterWindowFallback: while the store fails, a
// per-caller cluster rule's local share admits the caller's 5 of the
// minute; once the store answers again, what the share admitted is
// charged to the caller's window first, so the minute holds 5, not 10.
func TestCallerFlowClusterWindowFallback(t *testing.T) {
	clk := sluicetest.NewManualClock(1_000_000_000_000)
	st := newFakeStore(clk)
	g := New(WithClock(clk), WithCluster(st, ClusterConfig{App: "shop", Timeout: time.Hour, ExpectedInstances: 1}))
	t.Cleanup(func() { _ = g.Close() })
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{
		{Resource: "post", Threshold: 5, StatInterval: time.Minute, Caller: "other", Cluster: &rules.Cluster{}},
	}}))
	enter := func(n int) int {
		ok := 0
		for range n {
			if p, err := g.Entry("post", WithCaller("svc")); err == nil {
				ok++
				p.Exit()
			}
		}
		return ok
	}
	require.Equal(t, 5, enter(8), "the store's window")
	clk.Advance(time.Minute)
	st.setDown(true)
	require.Equal(t, 5, enter(8), "the local share, refilled over the minute")
	st.setDown(false)
	clk.Advance(2 * time.Second) // past the probe interval
	require.Equal(t, 0, enter(1), "decided by the share, which queued a probe")
	require.Eventually(t, func() bool { s, _ := g.ClusterStatus(); return !s.Fallback }, 5*time.Second, time.Millisecond)
	require.Equal(t, 0, enter(8), "the share's 5 were charged to the window")
	clk.Advance(time.Minute)
	require.Equal(t, 5, enter(8))
}

// TestCallerFlowCluster: a cluster "other" rule of 5 per minute gives each
// caller a budget shared by two instances: whichever instance a caller's
// requests reach, it passes exactly 5 per minute, minute after minute; a
// caller without a rule (none) and the named partner's own local rule are
// apart from it.
func TestCallerFlowCluster(t *testing.T) {
	clk := sluicetest.NewManualClock(1_000_000_000_000)
	st := newFakeStore(clk)
	st.mu.Lock()
	st.live = 2
	st.mu.Unlock()
	gs := make([]*Engine, 2)
	for i := range gs {
		gs[i] = New(WithClock(clk), WithCluster(st, ClusterConfig{App: "shop", Timeout: time.Hour}))
		t.Cleanup(func() { _ = gs[i].Close() })
		require.NoError(t, gs[i].LoadRules(rules.Set{Flow: []rules.Flow{
			{Resource: "post", Threshold: 5, StatInterval: time.Minute, Caller: "other", Cluster: &rules.Cluster{}},
			{Resource: "post", Threshold: 1, StatInterval: time.Minute, Caller: "partner"},
		}}))
	}
	for minute := range 3 {
		for u := range 20 {
			caller := fmt.Sprint("svc-", u)
			ok := 0
			for i := range 12 {
				p, err := gs[(i+u)%2].Entry("post", WithCaller(caller))
				if err == nil {
					ok++
					p.Exit()
					continue
				}
				require.True(t, blockedBy(err, core.BlockCluster), "%v", err)
			}
			require.Equal(t, 5, ok, "minute %d, %s", minute, caller)
		}
		assert.Equal(t, 1, callerAdmitted(t, gs[0], "post", "partner", 3), "the partner's local rule: 1 per instance")
		assert.Equal(t, 1, callerAdmitted(t, gs[1], "post", "partner", 3))
		assert.Equal(t, 10, callerAdmitted(t, gs[0], "post", "", 10), "no caller: no per-caller rule")
		clk.Advance(time.Minute)
	}
}

// TestCallerFlowWindowAllocs: the check of a tracked caller by a per-caller
// QPS rule's window allocates nothing.
func TestCallerFlowWindowAllocs(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "api", Threshold: 1e9, Caller: "other"}}}))
	enter := func() {
		clk.Advance(time.Millisecond) // the window's buckets roll too
		p, err := g.Entry("api", WithCaller("orders-service"))
		if err != nil {
			t.Fatal(err)
		}
		p.Exit()
	}
	enter() // tracked from now on
	require.Zero(t, testing.AllocsPerRun(1000, enter))
}
