package sluice

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/rulewalk"
	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// fakeStore is a cluster.Store in memory deciding on the clock it is given
// (the engine's ManualClock): an exact sliding-window log and GCRA, as the
// Redis scripts decide, with a switch that makes every call fail.
type fakeStore struct {
	clk core.Clock

	mu    sync.Mutex
	down  bool
	log   map[string][][2]int64 // key -> (grant time ns, permits)
	tat   map[string]float64
	tb    map[string][2]float64 // key -> (tokens, last ns)
	given map[string]int64
	live  int
}

var errStoreDown = errors.New("fake store down")

func newFakeStore(clk core.Clock) *fakeStore {
	return &fakeStore{clk: clk, log: map[string][][2]int64{}, tat: map[string]float64{}, tb: map[string][2]float64{}, given: map[string]int64{}, live: 1}
}

func (s *fakeStore) setDown(d bool) { s.mu.Lock(); s.down = d; s.mu.Unlock() }

// used returns the permits of key's window at the store's now.
func (s *fakeStore) used(key string, iv time.Duration) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usedLocked(key, iv, s.clk.Nanotime())
}

func (s *fakeStore) usedLocked(key string, iv time.Duration, now int64) int64 {
	var n int64
	for _, e := range s.log[key] {
		if e[0] > now-int64(iv) {
			n += e[1]
		}
	}
	return n
}

func (s *fakeStore) Take(ctx context.Context, reqs []cluster.Request, grants []cluster.Grant) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return errStoreDown
	}
	now := s.clk.Nanotime()
	for i, r := range reqs {
		b := r.Budget
		g := cluster.Grant{}
		switch b.Algorithm {
		case cluster.Pacing:
			step := float64(b.Interval) / b.Limit
			tat := math.Max(s.tat[b.Key], float64(now))
			if wait := time.Duration(tat - float64(now)); wait <= b.MaxQueue {
				g = cluster.Grant{N: r.N, Wait: wait}
				s.tat[b.Key] = tat + float64(r.N)*step
			} else {
				g.RetryAfter = wait - b.MaxQueue
			}
		case cluster.TokenBucket: // full at first use, Limit per Interval, at most Burst
			burst := b.Burst
			if burst == 0 {
				burst = b.Limit
			}
			st, ok := s.tb[b.Key]
			if !ok {
				st = [2]float64{burst, float64(now)}
			}
			tok := math.Min(burst, st[0]+(float64(now)-st[1])*b.Limit/float64(b.Interval))
			switch {
			case tok >= float64(r.N):
				g.N = r.N
			case r.Partial && tok >= 1:
				g.N = int64(tok)
			default:
				g.RetryAfter = time.Duration(math.Ceil((float64(r.N) - tok) * float64(b.Interval) / b.Limit))
			}
			s.tb[b.Key] = [2]float64{tok - float64(g.N), float64(now)}
		default: // a sliding window
			free := int64(b.Limit) - s.usedLocked(b.Key, b.Interval, now)
			switch {
			case free >= r.N:
				g.N = r.N
			case r.Partial && free >= 1:
				g.N = free
			}
			if g.N > 0 {
				s.log[b.Key] = append(s.log[b.Key], [2]int64{now, g.N})
			}
		}
		grants[i] = g
	}
	return nil
}

func (s *fakeStore) Give(ctx context.Context, b cluster.Budget, n int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return errStoreDown
	}
	s.given[b.Key] += n
	if st, ok := s.tb[b.Key]; ok {
		st[0] += float64(n) // clamped to the burst at the next take
		s.tb[b.Key] = st
	}
	l := s.log[b.Key]
	for i := len(l) - 1; i >= 0 && n > 0; i-- { // the most recent permits
		d := min(n, l[i][1])
		l[i][1] -= d
		n -= d
	}
	return nil
}

func (s *fakeStore) Beat(ctx context.Context, m cluster.Member, ttl time.Duration) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return 0, errStoreDown
	}
	return s.live, nil
}

func (s *fakeStore) Members(ctx context.Context, app string) ([]cluster.Member, error) {
	return nil, nil
}

// clusterEngine returns an engine on a manual clock with a fakeStore.
func clusterEngine(t *testing.T, cfg ClusterConfig) (*Engine, *fakeStore, *sluicetest.ManualClock) {
	t.Helper()
	clk := sluicetest.NewManualClock(1_000_000_000_000)
	st := newFakeStore(clk)
	if cfg.App == "" {
		cfg.App = "shop"
	}
	g := New(WithClock(clk), WithCluster(st, cfg))
	t.Cleanup(func() { _ = g.Close() })
	return g, st, clk
}

func blockOf(t *testing.T, g *Engine, res string) *core.BlockError {
	t.Helper()
	p, err := g.Entry(res)
	if err == nil {
		p.Exit()
		return nil
	}
	var be *core.BlockError
	require.ErrorAs(t, err, &be)
	return be
}

func TestClusterRuleNeedsWithCluster(t *testing.T) {
	r := rules.Flow{Resource: "api", Threshold: 10, Cluster: &rules.Cluster{}}
	g, _ := newTestEngine(t, 0)
	_, err := loadFlow(g, []rules.Flow{{Resource: "x", Threshold: 1}, r})
	var re *rules.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, 1, re.Index)
	assert.Equal(t, "Cluster", re.Field)
	assert.Contains(t, err.Error(), "cluster rules need sluice.WithCluster")
	_, ok := g.ClusterStatus()
	assert.False(t, ok)
	err = g.LoadRules(rules.Set{Flow: []rules.Flow{r}})
	assert.ErrorContains(t, err, "cluster rules need sluice.WithCluster")

	clk := sluicetest.NewManualClock(0)
	bad := New(WithClock(clk), WithCluster(newFakeStore(clk), ClusterConfig{}))
	defer bad.Close()
	_, err = loadFlow(bad, []rules.Flow{r})
	assert.ErrorContains(t, err, "ClusterConfig.App is required")
	_, ok = bad.ClusterStatus()
	assert.False(t, ok)
}

func TestClusterRejectCountsInTheStore(t *testing.T) {
	g, st, clk := clusterEngine(t, ClusterConfig{})
	mustLoadFlow(t, g, rules.Flow{Resource: "api", Threshold: 10, Cluster: &rules.Cluster{}})
	for round := 0; round < 3; round++ {
		admitted := 0
		var last *core.BlockError
		for i := 0; i < 25; i++ {
			if be := blockOf(t, g, "api"); be == nil {
				admitted++
			} else {
				last = be
			}
		}
		assert.Equal(t, 10, admitted, "round %d", round)
		require.NotNil(t, last)
		assert.Equal(t, core.BlockCluster, last.Type)
		assert.Equal(t, 10.0, last.Threshold)
		assert.Contains(t, last.Reason, "cluster budget")
		assert.Greater(t, last.RetryAfter, time.Duration(0))
		assert.LessOrEqual(t, last.RetryAfter, 100*time.Millisecond)
		assert.Equal(t, int64(10), st.used("shop/flow/api/reject/1000ms", time.Second))
		clk.Advance(time.Second) // the store's window slides by a whole interval
	}
	s, ok := g.ClusterStatus()
	require.True(t, ok)
	assert.False(t, s.Fallback)
	// Before the first beat's answer the shares divide by the expected
	// fleet (10); the beat counts one.
	require.Eventually(t, func() bool { s, _ = g.ClusterStatus(); return s.Live == 1 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, "counted", s.LiveSource)
	assert.Positive(t, s.Takes)
	assert.Zero(t, s.TakeErrors)
}

func TestClusterReloadKeepsOrGivesBackLeases(t *testing.T) {
	g, st, _ := clusterEngine(t, ClusterConfig{})
	const key = "shop/flow/api/reject/1000ms"
	rule := rules.Flow{Resource: "api", Threshold: 100, Cluster: &rules.Cluster{}}
	mustLoadFlow(t, g, rule)
	require.Nil(t, blockOf(t, g, "api"))
	held := st.used(key, time.Second) // the lease: one admitted, the rest held
	require.Greater(t, held, int64(1))

	// The same rule (a fresh copy) and an unrelated one: the lease stays.
	same := rulewalk.Clone(rule)
	mustLoadFlow(t, g, rules.Flow{Resource: "other", Threshold: 5}, same)
	require.Nil(t, blockOf(t, g, "api"))
	assert.Equal(t, held, st.used(key, time.Second), "the kept lease served the entry")
	s, _ := g.ClusterStatus()
	assert.Zero(t, s.Given)

	// A changed threshold: the old Limiter gives its unused permits back.
	changed := rulewalk.Clone(rule)
	changed.Threshold = 50
	mustLoadFlow(t, g, changed)
	given := func() int64 { s, _ := g.ClusterStatus(); return s.Given }
	// The store goroutine gives back, soon after the load.
	require.Eventually(t, func() bool { return given() == held-2 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, int64(2), st.used(key, time.Second), "only the two admitted stay counted")

	// Removal gives the new Limiter's lease back too.
	require.Nil(t, blockOf(t, g, "api"))
	require.Greater(t, st.used(key, time.Second), int64(3))
	mustLoadFlow(t, g)
	require.Eventually(t, func() bool { return st.used(key, time.Second) == 3 }, 5*time.Second, time.Millisecond)
	s, _ = g.ClusterStatus()
	assert.Zero(t, s.Dropped)
}

func TestClusterFallbackAndRecovery(t *testing.T) {
	var mu sync.Mutex
	g, st, clk := clusterEngine(t, ClusterConfig{ProbeInterval: time.Second})
	mustLoadFlow(t, g, rules.Flow{Resource: "api", Threshold: 10, Cluster: &rules.Cluster{LocalThreshold: 4}},
		rules.Flow{Resource: "pay", Threshold: 10, Cluster: &rules.Cluster{Fallback: rules.FallbackBlock}})
	var evs []stat.Event
	cancel := g.Subscribe(func(e stat.Event) {
		if e.Kind == stat.EventClusterFallback || e.Kind == stat.EventClusterRecovered {
			mu.Lock()
			evs = append(evs, e)
			mu.Unlock()
		}
	})
	defer cancel()
	st.setDown(true)
	admitted := 0
	var last *core.BlockError
	for i := 0; i < 10; i++ {
		if be := blockOf(t, g, "api"); be == nil {
			admitted++
		} else {
			last = be
		}
	}
	assert.Equal(t, 4, admitted, "the local threshold")
	require.NotNil(t, last)
	assert.Equal(t, core.BlockCluster, last.Type)
	assert.Contains(t, last.Reason, "cluster fallback: local share")
	be := blockOf(t, g, "pay")
	require.NotNil(t, be)
	assert.Equal(t, "cluster fallback: block", be.Reason)
	s, _ := g.ClusterStatus()
	assert.True(t, s.Fallback)
	assert.Positive(t, s.TakeErrors)

	// Back up: the first decision a probe interval later probes, and the
	// probe's success returns to the store's decisions.
	st.setDown(false)
	clk.Advance(2 * time.Second) // past the probe interval and the local window
	require.Nil(t, blockOf(t, g, "api"), "decided by the fallback, which queued a probe")
	require.Eventually(t, func() bool { s, _ := g.ClusterStatus(); return !s.Fallback },
		5*time.Second, time.Millisecond)
	// The mode changes before the event stream is told.
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(evs) >= 2 },
		5*time.Second, time.Millisecond, "both transitions reported")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, evs, 2)
	assert.Equal(t, stat.EventClusterFallback, evs[0].Kind)
	assert.ErrorIs(t, evs[0].Err, errStoreDown)
	assert.Equal(t, stat.EventClusterRecovered, evs[1].Kind)
	assert.NoError(t, evs[1].Err)
}

func TestClusterThrottlePaces(t *testing.T) {
	g, _, clk := clusterEngine(t, ClusterConfig{})
	mustLoadFlow(t, g, rules.Flow{Resource: "api", Threshold: 10, Throttle: &rules.Throttle{}, Cluster: &rules.Cluster{}})
	require.Nil(t, blockOf(t, g, "api"))
	be := blockOf(t, g, "api")
	require.NotNil(t, be, "the next slot is 100 ms away and nothing may queue")
	assert.Equal(t, core.BlockCluster, be.Type)
	// The store's 100 ms, within the lease horizon (50 ms at 1/s): the
	// limiter asks again no sooner.
	assert.Equal(t, 50*time.Millisecond, be.RetryAfter)
	clk.Advance(50 * time.Millisecond)
	require.NotNil(t, blockOf(t, g, "api"), "the slot is 50 ms away")
	clk.Advance(50 * time.Millisecond)
	require.Nil(t, blockOf(t, g, "api"), "its slot")

	// A batch larger than the threshold never passes.
	_, err := g.Entry("api", WithBatch(11))
	var tooBig *core.BlockError
	require.ErrorAs(t, err, &tooBig)
	assert.Equal(t, core.BlockCluster, tooBig.Type)
	assert.Equal(t, "batch larger than threshold", tooBig.Reason)
}

func TestClusterPerInstanceFollowsTheFleet(t *testing.T) {
	clk := sluicetest.NewManualClock(1_000_000_000_000)
	st := newFakeStore(clk)
	st.live = 3
	g := New(WithClock(clk), WithCluster(st, ClusterConfig{App: "shop", HeartbeatInterval: 10 * time.Millisecond}))
	t.Cleanup(func() { _ = g.Close() })
	live := func(n int) func() bool {
		return func() bool { s, _ := g.ClusterStatus(); return s.Live == n }
	}
	require.Eventually(t, live(3), 5*time.Second, time.Millisecond, "the first beat")
	mustLoadFlow(t, g, rules.Flow{Resource: "api", Threshold: 10,
		Cluster: &rules.Cluster{Mode: rules.ClusterPerInstance}})
	drain := func() (n int) {
		for i := 0; i < 100; i++ {
			if blockOf(t, g, "api") == nil {
				n++
			}
		}
		return n
	}
	assert.Equal(t, 30, drain(), "10 per instance, 3 instances")

	st.mu.Lock()
	st.live = 2
	st.mu.Unlock()
	// The next beat: the heartbeat arms its timer a moment after its
	// beat, so the clock moves by one interval until a beat has counted
	// two (a few 10 ms steps at most, far from the 1 s window).
	require.Eventually(t, func() bool {
		if live(2)() {
			return true
		}
		clk.Advance(10 * time.Millisecond)
		return false
	}, 5*time.Second, time.Millisecond)
	assert.Equal(t, 0, drain(), "the store's window still holds 30")
	clk.Advance(time.Second) // the window slides past them
	assert.Equal(t, 20, drain(), "10 per instance, 2 instances")
}
