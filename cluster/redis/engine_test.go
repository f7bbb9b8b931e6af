package sluiceredis

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
	"github.com/sluice-go/sluice/stat"
)

// These tests run engines (the root module's public API) against a real
// redis-server: the wiring of cluster rules end to end.

// clusterEngine returns an engine on store, closed by the test's cleanup.
func clusterEngine(t *testing.T, store *Store, cfg sluice.ClusterConfig, opts ...sluice.Option) *sluice.Engine {
	t.Helper()
	if cfg.App == "" {
		cfg.App = "shop"
	}
	g := sluice.New(append(opts, sluice.WithCluster(store, cfg))...)
	t.Cleanup(func() { _ = g.Close() })
	return g
}

func loadFlow(t *testing.T, g *sluice.Engine, rs ...rules.Flow) {
	t.Helper()
	if err := g.LoadRules(rules.Set{Flow: rs}); err != nil {
		t.Fatal(err)
	}
}

// enter makes one entry and exits it; it returns the refusal, nil when the
// entry passed. Any other error fails the test.
func enter(t *testing.T, g *sluice.Engine, res string) *sluice.BlockError {
	p, err := g.Entry(res)
	if err == nil {
		p.Exit()
		return nil
	}
	var be *sluice.BlockError
	if !errors.As(err, &be) {
		t.Errorf("entry: %v", err)
		return &sluice.BlockError{}
	}
	return be
}

// windowCount returns the permits Redis counts in the sliding window of
// budget key (the log may hold grants older than the window until the next
// decision trims them; budgets here use long intervals).
func windowCount(t *testing.T, s *Store, key string) int64 {
	t.Helper()
	k, _ := s.budgetKeys(escapeTag(key), algWindow)
	n, err := s.c.HGet(ctxT(t), k, "n").Int64()
	if err != nil && !strings.Contains(err.Error(), "nil") {
		t.Fatal(err)
	}
	return n
}

// TestEngineFleetSharesBudget: four engines share a 1,000/s cluster rule
// under five times that demand for three seconds. Admissions are counted
// per aligned wall-clock second (Redis runs on the same host, so its TIME
// and the wall clock agree), within secondBound, and at least 95% of the
// limit after the first second while every engine made twice its share of
// entries in every second (keptUp).
func TestEngineFleetSharesBudget(t *testing.T) {
	const (
		engines = 4
		limit   = 1000
		demand  = 5 * limit / engines // per engine, per second
		seconds = 3
	)
	srv := redistest.Start(t)
	rule := rules.Flow{Resource: "api", Threshold: limit, Cluster: &rules.Cluster{}}
	gs := make([]*sluice.Engine, engines)
	for i := range gs {
		// A generous Timeout: the test is about sharing, not latency (see
		// TestProcessFleetSharesBudget).
		gs[i] = clusterEngine(t, New(srv.Client(t)), sluice.ClusterConfig{Timeout: 2 * time.Second})
		loadFlow(t, gs[i], rule)
	}
	// Start on a second boundary; the first second warms the leases up.
	start := time.Now().Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(start))
	var (
		counts [seconds + 1][engines]atomic.Int64
		tried  [seconds + 1][engines]atomic.Int64
		fell   atomic.Int64
		wg     sync.WaitGroup
	)
	for e, g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := 0
			for {
				now := time.Now()
				el := now.Sub(start)
				if el >= seconds*time.Second {
					return
				}
				for due := int(el.Seconds() * demand); sent < due; sent++ {
					tried[min(int(time.Since(start)/time.Second), seconds)][e].Add(1)
					be := enter(t, g, "api")
					if be == nil {
						sec := int(time.Since(start) / time.Second)
						counts[min(sec, seconds)][e].Add(1)
					} else if strings.Contains(be.Reason, "fallback") {
						fell.Add(1)
					}
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if n := fell.Load(); n > 0 {
		t.Errorf("%d decisions by the fallback: the store failed or was late", n)
	}
	aligned := true
	for s := 0; s < seconds; s++ {
		var sum int64
		per := make([]string, engines)
		made := make([]int64, engines)
		for e := range per {
			n := counts[s][e].Load()
			sum += n
			per[e] = fmt.Sprint(n)
			made[e] = tried[s][e].Load()
		}
		t.Logf("second %d: admitted %d (%s), tried %v", s, sum, strings.Join(per, " + "), made)
		aligned = aligned && keptUp(made, 2*limit/engines)
		if b := secondBound(limit, engines, aligned); sum > b {
			t.Errorf("second %d: admitted %d > %d (windows aligned on the seconds: %v)", s, sum, b, aligned)
		}
		// The lower bound holds under a demand above each engine's share
		// since the start (keptUp), which a loaded host may not let the
		// test make.
		if s > 0 && sum < limit*95/100 && aligned {
			t.Errorf("second %d: admitted %d < 95%% of %d", s, sum, limit)
		}
	}
	for i, g := range gs {
		st, _ := g.ClusterStatus()
		t.Logf("engine %d: %+v", i, st)
	}
}

// TestEngineClocksDoNotDecide: engines whose clocks disagree by hours, and
// jump, admit what the store's clock allows and nothing more.
func TestEngineClocksDoNotDecide(t *testing.T) {
	srv := redistest.Start(t)
	store := New(srv.Client(t))
	// 100 per minute: Redis's clock does not slide the window during the test.
	rule := rules.Flow{Resource: "api", Threshold: 100, StatInterval: time.Minute, Cluster: &rules.Cluster{}}
	clocks := []*sluicetest.ManualClock{
		sluicetest.NewManualClock(0),
		sluicetest.NewManualClock(int64(5 * time.Hour)),
		sluicetest.NewManualClock(int64(1<<62) - int64(time.Hour)),
	}
	gs := make([]*sluice.Engine, len(clocks))
	for i, c := range clocks {
		gs[i] = clusterEngine(t, store, sluice.ClusterConfig{Timeout: time.Hour}, sluice.WithClock(c))
		loadFlow(t, gs[i], rule)
	}
	drain := func() (admitted int) {
		for refused := 0; refused < len(gs); {
			refused = 0
			for _, g := range gs {
				if enter(t, g, "api") == nil {
					admitted++
				} else {
					refused++
				}
			}
		}
		return admitted
	}
	if n := drain(); n != 100 {
		t.Errorf("admitted %d across skewed clocks, want the budget's 100", n)
	}
	// Every local clock jumps two minutes ahead (a local window would have
	// emptied twice): Redis's window has not moved, so nothing more passes.
	for _, c := range clocks {
		c.Advance(2 * time.Minute)
	}
	if n := drain(); n != 0 {
		t.Errorf("admitted %d after the local clocks jumped, want 0", n)
	}
	if n := windowCount(t, store, "shop/flow/api/reject/60000ms"); n != 100 {
		t.Errorf("Redis counts %d, want 100", n)
	}
}

// TestEngineFallbackAndRecovery: Redis killed under traffic; the next
// decisions are the local share's, within the timeout; Redis restarted;
// the store decides again within the probe interval.
func TestEngineFallbackAndRecovery(t *testing.T) {
	const (
		timeout = 100 * time.Millisecond
		probe   = 200 * time.Millisecond
	)
	srv := redistest.Start(t)
	trs := make(chan transition, 16)
	g := clusterEngine(t, New(srv.Client(t)), sluice.ClusterConfig{
		Timeout: timeout, ProbeInterval: probe,
	})
	onTransition(g, func(tr transition) { trs <- tr })
	// 1,000 per minute in the store, 20 per minute locally.
	loadFlow(t, g, rules.Flow{Resource: "api", Threshold: 1000, StatInterval: time.Minute,
		Cluster: &rules.Cluster{LocalThreshold: 20}},
		rules.Flow{Resource: "pay", Threshold: 1000, StatInterval: time.Minute,
			Cluster: &rules.Cluster{LocalThreshold: 20}})
	for i := 0; i < 50; i++ {
		if be := enter(t, g, "api"); be != nil {
			t.Fatalf("remote: %v", be)
		}
	}

	srv.Kill()
	// Entries go on from the lease until it runs out; the refill fails,
	// and that entry is decided by the fallback, within the timeout.
	admitted, calls := 0, 0 // since the kill
	var slowest time.Duration
	for {
		began := time.Now()
		be := enter(t, g, "api")
		slowest = max(slowest, time.Since(began))
		calls++
		if be == nil {
			admitted++
		}
		if st, _ := g.ClusterStatus(); st.Fallback {
			break
		}
		if calls > 1000 {
			t.Fatal("no fallback after 1,000 entries")
		}
	}
	t.Logf("fallback after %d entries since the kill; slowest entry %v (timeout %v)", calls, slowest, timeout)
	if slowest > timeout+time.Second { // the timeout, with room for a loaded host
		t.Errorf("an entry took %v, timeout %v", slowest, timeout)
	}
	tr := <-trs
	if !tr.Fallback || tr.Err == nil {
		t.Errorf("transition %+v, want to fallback with an error", tr)
	}
	// Which of api's entries the fallback decided cannot be told from
	// outside (the lease's or the local share's); pay has had no traffic,
	// so its local share is whole.
	admitted = 0
	for i := 0; i < 100; i++ {
		be := enter(t, g, "pay")
		if be == nil {
			admitted++
			continue
		}
		if be.Type != sluice.BlockCluster || !strings.Contains(be.Reason, "cluster fallback: local share") {
			t.Fatalf("refusal in fallback: %v", be)
		}
	}
	if admitted != 20 {
		t.Errorf("admitted %d in fallback, want the local threshold, 20", admitted)
	}

	srv.Restart()
	began := time.Now()
	for {
		enter(t, g, "api") // decisions in fallback queue the probes
		if st, _ := g.ClusterStatus(); !st.Fallback {
			break
		}
		if time.Since(began) > 10*time.Second {
			t.Fatal("still in fallback 10 s after Redis came back")
		}
		time.Sleep(5 * time.Millisecond)
	}
	back := time.Since(began)
	t.Logf("back to remote %v after the restart (probe interval %v)", back, probe)
	if back > probe+timeout+2*time.Second {
		t.Errorf("recovery took %v", back)
	}
	if tr := <-trs; tr.Fallback {
		t.Errorf("transition %+v, want back to remote", tr)
	}
	if be := enter(t, g, "api"); be != nil {
		t.Errorf("remote after recovery: %v", be)
	}
}

// TestEngineRemovedRuleGivesBack: the permits a rule's lease holds go back
// to Redis when the rule is removed, and when its threshold changes.
func TestEngineRemovedRuleGivesBack(t *testing.T) {
	srv := redistest.Start(t)
	store := New(srv.Client(t))
	g := clusterEngine(t, store, sluice.ClusterConfig{Timeout: time.Second})
	const key = "shop/flow/api/reject/60000ms"
	rule := rules.Flow{Resource: "api", Threshold: 6000, StatInterval: time.Minute, Cluster: &rules.Cluster{}}
	loadFlow(t, g, rule)
	for i := 0; i < 3; i++ {
		if be := enter(t, g, "api"); be != nil {
			t.Fatal(be)
		}
	}
	leased := windowCount(t, store, key)
	t.Logf("Redis counts %d after 3 admissions (the lease)", leased)
	if leased <= 3 {
		t.Fatalf("Redis counts %d, want a lease of more than the 3 admitted", leased)
	}
	waitCount := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for windowCount(t, store, key) != want {
			if time.Now().After(deadline) {
				t.Fatalf("Redis counts %d, want %d", windowCount(t, store, key), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// An unchanged rule keeps its lease.
	loadFlow(t, g, rules.Flow{Resource: "other", Threshold: 1}, equalCopy(rule))
	if n := windowCount(t, store, key); n != leased {
		t.Errorf("after an equal reload Redis counts %d, want %d", n, leased)
	}
	// A changed one gives it back.
	changed := equalCopy(rule)
	changed.Threshold = 5000
	loadFlow(t, g, changed)
	waitCount(3)
	if be := enter(t, g, "api"); be != nil {
		t.Fatal(be)
	}
	// A removed one too.
	loadFlow(t, g)
	waitCount(4)
	st, _ := g.ClusterStatus()
	if st.Dropped != 0 {
		t.Errorf("dropped %d permits", st.Dropped)
	}
}

// TestEngineThrottleWaitsForItsSlot: a throttle cluster rule paces the
// entries of an engine on Redis's schedule: each waits for its slot (no
// earlier, whatever the host's load), and one whose wait would pass
// MaxQueueing is refused at once.
func TestEngineThrottleWaitsForItsSlot(t *testing.T) {
	srv := redistest.Start(t)
	g := clusterEngine(t, New(srv.Client(t)), sluice.ClusterConfig{Timeout: time.Second})
	loadFlow(t, g, rules.Flow{Resource: "api", Threshold: 10, Throttle: &rules.Throttle{MaxQueueing: 250 * time.Millisecond}, Cluster: &rules.Cluster{}})
	began := time.Now()
	for i := 0; i < 3; i++ { // slots at 0, 100 and 200 ms
		if be := enter(t, g, "api"); be != nil {
			t.Fatalf("entry %d: %v", i, be)
		}
	}
	took := time.Since(began)
	t.Logf("three entries took %v", took)
	if took < 190*time.Millisecond { // 10 ms for rounding between the clocks
		t.Errorf("three paced entries took %v, want at least 200 ms", took)
	}
	// Ten more at once: slots from 300 ms on, 100 ms apart; unless the
	// host spaces their arrivals by about 100 ms, the later ones would
	// wait more than MaxQueueing.
	var wg sync.WaitGroup
	var refused atomic.Int64
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if be := enter(t, g, "api"); be != nil {
				if be.Type != sluice.BlockCluster {
					t.Errorf("refusal %v", be)
				}
				refused.Add(1)
			}
		}()
	}
	wg.Wait()
	if refused.Load() == 0 {
		t.Error("no entry refused, though one's wait exceeds MaxQueueing")
	}
}

// TestEngineSharedTokenBucket: two engines share a token-bucket rule (10
// per minute, a burst of 20) through Redis, with leases and in strict mode.
// Drained from both, the fleet admits the burst and, beyond it, only what
// the bucket refilled on Redis's clock while the test ran.
func TestEngineSharedTokenBucket(t *testing.T) {
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprintf("strict=%v", strict), func(t *testing.T) {
			srv := redistest.Start(t)
			client := srv.Client(t)
			store := New(client)
			rule := rules.Flow{Resource: "api", Threshold: 10, StatInterval: time.Minute, Bucket: &rules.Bucket{Burst: 20}, Cluster: &rules.Cluster{Strict: strict}}
			gs := []*sluice.Engine{
				clusterEngine(t, store, sluice.ClusterConfig{Timeout: time.Hour}),
				clusterEngine(t, store, sluice.ClusterConfig{Timeout: time.Hour}),
			}
			for _, g := range gs {
				loadFlow(t, g, rule)
			}
			from := redisTime(t, client)
			admitted := 0
			for refused := 0; refused < len(gs); {
				refused = 0
				for _, g := range gs {
					if be := enter(t, g, "api"); be == nil {
						admitted++
					} else {
						if be.Type != sluice.BlockCluster {
							t.Fatalf("refused by %v, want the cluster rule", be.Type)
						}
						refused++
					}
				}
			}
			elapsed := time.Duration(redisTime(t, client)-from) * time.Microsecond
			refilled := int(elapsed / (6 * time.Second)) // 10 per minute
			t.Logf("admitted %d in %v of Redis time", admitted, elapsed)
			if admitted < 20 || admitted > 20+refilled+1 {
				t.Errorf("admitted %d, want the burst of 20 plus at most %d refilled", admitted, refilled+1)
			}
		})
	}
}

// transition is a change between the store's decisions and the fallback's,
// as the engine's event stream tells it (stat.EventClusterFallback and
// stat.EventClusterRecovered).
type transition struct {
	Fallback bool // to fallback; else back to remote
	At       int64
	Err      error
	Live     int
}

func (tr transition) String() string {
	if tr.Fallback {
		return "fallback"
	}
	return "remote"
}

// onTransition calls f with every transition of g from now on.
func onTransition(g *sluice.Engine, f func(transition)) {
	g.Subscribe(func(e stat.Event) {
		if e.Kind == stat.EventClusterFallback || e.Kind == stat.EventClusterRecovered {
			f(transition{Fallback: e.Kind == stat.EventClusterFallback, At: e.At, Err: e.Err, Live: int(e.Value)})
		}
	})
}
