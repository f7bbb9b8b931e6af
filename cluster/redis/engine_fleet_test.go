package sluiceredis

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/fleet"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
	"github.com/sluice-go/sluice/stat"
)

// threshold returns the flow threshold of resource api in force, -1 when
// there is no such rule.
func threshold(eng *sluice.Engine) float64 {
	for _, r := range eng.Rules().Flow {
		if r.Resource == "api" {
			return r.Threshold
		}
	}
	return -1
}

// eventually polls cond until it holds or d has passed.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(time.Millisecond)
	}
	return time.Since(start)
}

func version(m *fleet.Member) int64 { return m.Status().Version }

// join joins eng to its fleet as cfg says, failing the test on an error.
func join(t *testing.T, eng *sluice.Engine, cfg fleet.Config) *fleet.Member {
	t.Helper()
	m, err := fleet.Join(eng, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// subscribers waits until app's channel has n subscribers.
func subscribers(t *testing.T, srv *redistest.Server, s *RuleStore, app string, n int64) {
	t.Helper()
	ch := s.keys(app).channel
	c := srv.Client(t)
	eventually(t, testTimeout, "subscriptions", func() bool {
		m, err := c.PubSubNumSub(ctxT(t), ch).Result()
		return err == nil && m[ch] == n
	})
}

// TestFleetPush: a saved version reaches three engines through pub/sub
// (their CheckInterval is an hour: no read could bring it), an engine made
// later loads the version in force at New, and each reports it.
func TestFleetPush(t *testing.T) {
	srv := redistest.Start(t)
	rs := NewRuleStore(srv.Client(t), RuleStoreConfig{})
	save(t, rs, "shop", 0, docA)
	var engs []*sluice.Engine
	var ms []*fleet.Member
	for i := 0; i < 3; i++ {
		eng := sluice.New()
		defer eng.Close()
		m := join(t, eng, fleet.Config{App: "shop", Rules: NewRuleStore(srv.Client(t), RuleStoreConfig{}), CheckInterval: time.Hour})
		defer m.Close()
		if v, th := version(m), threshold(eng); v != 1 || th != 10 {
			t.Fatalf("engine %d after Join: version %d, threshold %v; want 1, 10", i, v, th)
		}
		engs = append(engs, eng)
		ms = append(ms, m)
	}
	subscribers(t, srv, rs, "shop", 3)
	save(t, rs, "shop", 1, docB)
	took := eventually(t, time.Second, "version 2 on 3 engines", func() bool {
		for _, m := range ms {
			if version(m) != 2 {
				return false
			}
		}
		return true
	})
	t.Logf("version 2 reached 3 engines in %v", took)
	for i, eng := range engs {
		if th := threshold(eng); th != 20 {
			t.Fatalf("engine %d: threshold %v, want 20", i, th)
		}
	}
	late := sluice.New()
	defer late.Close()
	lm := join(t, late, fleet.Config{App: "shop", Rules: rs, CheckInterval: time.Hour})
	defer lm.Close()
	if v, th := version(lm), threshold(late); v != 2 || th != 20 {
		t.Fatalf("engine made later: version %d, threshold %v; want 2, 20", v, th)
	}
	reps, err := rs.Reports(ctxT(t), "shop")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, testTimeout, "4 reports of version 2", func() bool {
		reps, err = rs.Reports(ctxT(t), "shop")
		n := 0
		for _, r := range reps {
			if r.Version == 2 && r.Refused == 0 {
				n++
			}
		}
		return err == nil && n == 4
	})
	for i, eng := range append(engs, late) {
		found := false
		for _, r := range reps {
			found = found || r.Instance == eng.InstanceID()
		}
		if !found {
			t.Fatalf("no report from engine %d, %s, in %+v", i, eng.InstanceID(), reps)
		}
	}
}

// deaf is a RuleStore whose notifications are lost.
type deaf struct{ *RuleStore }

func (d deaf) Watch(ctx context.Context, app string, _ func(int64)) error {
	return d.RuleStore.Watch(ctx, app, func(int64) {})
}

// TestFleetPoll: with every notification lost, a new version reaches the
// engines at their next read, one CheckInterval (on their clock) later,
// and not before.
func TestFleetPoll(t *testing.T) {
	srv := redistest.Start(t)
	rs := NewRuleStore(srv.Client(t), RuleStoreConfig{})
	save(t, rs, "shop", 0, docA)
	clk := sluicetest.NewManualClock(0)
	var engs []*sluice.Engine
	var ms []*fleet.Member
	for i := 0; i < 3; i++ {
		eng := sluice.New(sluice.WithClock(clk))
		defer eng.Close()
		m := join(t, eng, fleet.Config{App: "shop", Rules: deaf{rs}})
		defer m.Close()
		engs = append(engs, eng)
		ms = append(ms, m)
	}
	subscribers(t, srv, rs, "shop", 3)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := clk.BlockUntil(ctx, 3); err != nil { // each engine's read timer
		t.Fatal(err)
	}
	save(t, rs, "shop", 1, docB)
	for i, m := range ms {
		if v := version(m); v != 1 {
			t.Fatalf("engine %d runs version %d before its read", i, v)
		}
	}
	clk.Advance(5 * time.Second) // the default CheckInterval
	eventually(t, testTimeout, "version 2 after one CheckInterval", func() bool {
		for i, eng := range engs {
			if version(ms[i]) != 2 || threshold(eng) != 20 {
				return false
			}
		}
		return true
	})
}

// TestFleetRefused: a version that one engine cannot run (a cluster rule,
// on an engine without WithCluster) is refused there, with the reason in
// its report and its Member's status (the engine's event stream says it
// refused rules), while it keeps its rules; the others run it and their
// heartbeats carry it.
func TestFleetRefused(t *testing.T) {
	srv := redistest.Start(t)
	rs := NewRuleStore(srv.Client(t), RuleStoreConfig{})
	store := New(srv.Client(t))
	save(t, rs, "shop", 0, docA)
	cfg := fleet.Config{App: "shop", Rules: rs, CheckInterval: time.Hour}
	a := sluice.New(sluice.WithCluster(store, sluice.ClusterConfig{App: "shop", InstanceID: "a"}))
	defer a.Close()
	am := join(t, a, cfg)
	defer am.Close()
	b := sluice.New(sluice.WithCluster(store, sluice.ClusterConfig{App: "shop", InstanceID: "b"}))
	defer b.Close()
	bm := join(t, b, cfg)
	defer bm.Close()
	c := sluice.New()
	defer c.Close()
	cfg.Instance = "c"
	cm := join(t, c, cfg)
	defer cm.Close()
	if cm.Status().Instance != "c" || am.Status().Instance != "a" {
		t.Fatalf("instances %q %q, want the ClusterConfig's and the Config's", am.Status().Instance, cm.Status().Instance)
	}
	var mu sync.Mutex
	var refused []stat.Event
	defer c.Subscribe(func(e stat.Event) {
		if e.Kind == stat.EventRulesRefused {
			mu.Lock()
			refused = append(refused, e)
			mu.Unlock()
		}
	})()
	subscribers(t, srv, rs, "shop", 3)
	save(t, rs, "shop", 1, "flow:\n  - resource: api\n    threshold: 50\n    cluster: {}\n")
	eventually(t, testTimeout, "version 2 on a and b, refused by c", func() bool {
		return version(am) == 2 && version(bm) == 2 && cm.Status().Refused == 2
	})
	st := cm.Status()
	if st.Version != 1 || threshold(c) != 10 || !strings.Contains(fmt.Sprint(st.RefusedErr), "WithCluster") {
		t.Fatalf("c: %+v, threshold %v; want version 1 kept, refusal naming WithCluster", st, threshold(c))
	}
	if threshold(a) != 50 || a.Rules().Flow[0].Cluster == nil {
		t.Fatalf("a runs %+v, want the cluster rule", a.Rules().Flow)
	}
	mu.Lock()
	if len(refused) != 1 || refused[0].Err == nil {
		t.Fatalf("c's refusals on the stream: %+v", refused)
	}
	mu.Unlock()
	eventually(t, testTimeout, "reports", func() bool {
		reps, err := rs.Reports(ctxT(t), "shop")
		if err != nil || len(reps) != 3 {
			return false
		}
		want := []cluster.RuleReport{{Instance: "a", Version: 2}, {Instance: "b", Version: 2}, {Instance: "c", Version: 1, Refused: 2}}
		for i, r := range reps {
			w := want[i]
			if r.Instance != w.Instance || r.Version != w.Version || r.Refused != w.Refused || (r.Refused != 0) != strings.Contains(r.Err, "Cluster") {
				return false
			}
		}
		return true
	})
	eventually(t, testTimeout, "heartbeats carry version 2", func() bool {
		ms, err := store.Members(ctxT(t), "shop")
		return err == nil && len(ms) == 2 && ms[0].RuleVersion == "2" && ms[1].RuleVersion == "2"
	})
}

// TestFleetStoreDown: an engine whose rule store is down at Join starts
// without rules within its Timeout, keeps the rules loaded meanwhile, and
// loads the version in force once the store answers.
func TestFleetStoreDown(t *testing.T) {
	srv := redistest.Start(t)
	rs := NewRuleStore(srv.Client(t), RuleStoreConfig{})
	srv.Kill()
	clk := sluicetest.NewManualClock(0)
	var errs sync.Map
	eng := sluice.New(sluice.WithClock(clk))
	defer eng.Close()
	m := join(t, eng, fleet.Config{
		App: "shop", Rules: rs, Timeout: 200 * time.Millisecond, OnError: func(err error) { errs.Store(err.Error(), true) },
	})
	defer m.Close()
	st := m.Status()
	if st.Version != 0 || st.Failures == 0 || st.Err == nil {
		t.Fatalf("status with the store down: %+v", st)
	}
	if err := eng.UpdateRules(func(s *rules.Set) { s.Flow = nil }); err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	save(t, rs, "shop", 0, docC)
	// The watch may have failed and be waiting an interval too: advance
	// one interval at a time until the version is in force.
	eventually(t, testTimeout, "version 1 after the store came back", func() bool {
		if clk.Waiters() > 0 {
			clk.Advance(5 * time.Second) // the default CheckInterval
		}
		return version(m) == 1
	})
	if len(eng.Rules().Flow) != 2 {
		t.Fatalf("rules in force %+v, want docC's", eng.Rules().Flow)
	}
}

// TestFleetTelemetry: an engine publishes, once a second of its clock, the
// frame of the second that just ended: its resources' figures, refusals
// by block type, breakers, rule version; a failing store is counted and
// never blocks an entry.
func TestFleetTelemetry(t *testing.T) {
	srv := redistest.Start(t)
	rs := NewRuleStore(srv.Client(t), RuleStoreConfig{})
	save(t, rs, "shop", 0, "flow:\n  - resource: api\n    threshold: 3\ncircuitBreaker:\n  - resource: db\n    strategy: error-count\n    threshold: 5\n    retryTimeout: 10s\n")
	tm := NewTelemetry(srv.Client(t), TelemetryConfig{MaxResources: 2})
	clk := sluicetest.NewManualClock(0)
	eng := sluice.New(sluice.WithClock(clk))
	defer eng.Close()
	m := join(t, eng, fleet.Config{App: "shop", Rules: rs, CheckInterval: time.Hour, Telemetry: tm, Keep: 10})
	defer m.Close()
	enter := func(res string, n int) {
		for i := 0; i < n; i++ {
			if p, err := eng.Entry(res); err == nil {
				p.Exit()
			}
		}
	}
	enter("api", 5) // 3 pass, 2 refused by the flow rule
	enter("web", 4)
	enter("img", 1) // the least busy: left out of MaxResources 2
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := clk.BlockUntil(ctx, 2); err != nil { // the publisher's and the rule store's timers
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	var frames []cluster.Frame
	eventually(t, testTimeout, "the frame of second 0", func() bool {
		frames, _ = tm.Frames(ctxT(t), "shop", 0)
		return len(frames) == 1
	})
	f := frames[0]
	if f.Instance != eng.InstanceID() || f.RuleVersion != 1 || f.ClusterMode != "" || len(f.Resources) != 2 {
		t.Fatalf("frame %+v", f)
	}
	api, web := f.Resources[0], f.Resources[1]
	if api.Resource != "api" || api.Pass != 3 || api.Block != 2 || api.BlockedBy[1] != 2 || api.Start != 0 {
		t.Fatalf("api in the frame: %+v", api)
	}
	if web.Resource != "web" || web.Pass != 4 || web.Block != 0 {
		t.Fatalf("web in the frame: %+v", web)
	}
	if len(f.Breakers) != 1 || f.Breakers[0].Resource != "db" || f.Breakers[0].State != stat.BreakerClosed {
		t.Fatalf("breakers %+v", f.Breakers)
	}
	wall := time.Now().Unix()
	if f.Second < wall-testTimeout.Milliseconds()/1000-1 || f.Second > wall {
		t.Fatalf("frame second %d, want about the wall clock's %d", f.Second, wall)
	}

	// The next second: nothing happened, no refusal counted again.
	enter("web", 1)
	if err := clk.BlockUntil(ctx, 2); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	eventually(t, testTimeout, "the frame of second 1", func() bool {
		frames, _ = tm.Frames(ctxT(t), "shop", f.Second+1)
		return len(frames) == 1
	})
	for _, r := range frames[0].Resources {
		if r.Block != 0 || r.BlockedBy != [len(stat.Snapshot{}.BlockedBy)]uint64{} || r.Start != int64(time.Second) {
			t.Fatalf("second 1 of %s: %+v", r.Resource, r)
		}
	}

	// Both frames are in Redis, but a publish whose reply came after its
	// 500 ms timeout counts as failed: on a loaded host one did (read
	// tcp: i/o timeout, the frame written). So the counts before the
	// outage are whatever the two publishes ended as.
	var before fleet.Status
	eventually(t, testTimeout, "the two publishes ended", func() bool {
		before = m.Status()
		return before.Published+before.PublishFailures == 2
	})

	// The store down: frames fail, are counted, and entries go on.
	srv.Kill()
	if err := clk.BlockUntil(ctx, 2); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	eventually(t, testTimeout, "a failed publish counted", func() bool {
		st := m.Status()
		return st.PublishFailures == before.PublishFailures+1 && st.PublishErr != nil
	})
	enter("api", 1)
	if st := m.Status(); st.Published != before.Published {
		t.Fatalf("status %+v, want %d published as before the outage", st, before.Published)
	}
}
