package fleet_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/filestore"
	"github.com/sluice-go/sluice/fleet"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
	"github.com/sluice-go/sluice/stat"
)

// waitFor polls cond until it holds, failing after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func blockUntil(t *testing.T, clk *sluicetest.ManualClock, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := clk.BlockUntil(ctx, n); err != nil {
		t.Fatalf("waiting for %d timers: %v (have %d)", n, err, clk.Waiters())
	}
}

// TestFollowRuleStore: an engine follows a file store on a manual clock:
// the version in force at Join, a new one at the store's next poll, a
// refused one reported with its error while the rules in force stay.
func TestFollowRuleStore(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	fs, err := filestore.Open(t.TempDir(), filestore.Config{Clock: clk, PollInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	save := func(base int64, doc string) {
		t.Helper()
		if _, err := fs.Save(ctx, "shop", base, cluster.RuleVersion{Doc: []byte(doc), Author: "ann"}); err != nil {
			t.Fatal(err)
		}
	}
	save(0, "flow:\n  - resource: api\n    threshold: 10\n")
	eng := sluice.New(sluice.WithClock(clk))
	defer eng.Close()
	var mu sync.Mutex
	var evs []stat.Event
	defer eng.Subscribe(func(e stat.Event) {
		mu.Lock()
		evs = append(evs, e)
		mu.Unlock()
	})()
	m, err := fleet.Join(eng, fleet.Config{App: "shop", Instance: "i1", Rules: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	st := m.Status()
	if st.Version != 1 || st.App != "shop" || st.Instance != "i1" || len(eng.Rules().Flow) != 1 || eng.Rules().Flow[0].Threshold != 10 {
		t.Fatalf("after Join: %+v, rules %+v", st, eng.Rules())
	}
	blockUntil(t, clk, 2) // the store's poll and the follower's check
	save(1, "flow:\n  - resource: api\n    threshold: 20\n")
	clk.Advance(time.Second) // the poll sees version 2: the follower loads it
	waitFor(t, "version 2", func() bool { return m.Status().Version == 2 })
	if th := eng.Rules().Flow[0].Threshold; th != 20 {
		t.Fatalf("threshold %v, want 20", th)
	}
	blockUntil(t, clk, 2)
	save(2, "flow:\n  - resource: api\n    threshold: 30\n    cluster: {}\n")
	clk.Advance(time.Second)
	waitFor(t, "version 3 refused", func() bool { return m.Status().Refused == 3 })
	st = m.Status()
	if st.Version != 2 || !strings.Contains(st.RefusedErr.Error(), "WithCluster") || eng.Rules().Flow[0].Threshold != 20 {
		t.Fatalf("after the refusal: %+v, rules %+v", st, eng.Rules())
	}
	waitFor(t, "the refusal reported", func() bool {
		reps, _ := fs.Reports(ctx, "shop")
		return len(reps) == 1 && reps[0].Instance == "i1" && reps[0].Version == 2 && reps[0].Refused == 3 && strings.Contains(reps[0].Err, "WithCluster")
	})
	mu.Lock()
	var loaded, refused int
	for _, e := range evs {
		switch e.Kind {
		case stat.EventRulesLoaded:
			loaded++
		case stat.EventRulesRefused:
			refused++
		}
	}
	mu.Unlock()
	if loaded != 2 || refused != 1 { // versions 1 and 2; 3
		t.Fatalf("events: %d loads, %d refusals; want 2, 1", loaded, refused)
	}
	// The periodic check finds the refused version current and does not
	// retry it.
	blockUntil(t, clk, 2)
	before := m.Status()
	clk.Advance(5 * time.Second) // the default CheckInterval
	// The check runs on the follower's goroutine after the clock moved.
	waitFor(t, "the periodic check", func() bool { return m.Status().Checks > before.Checks })
	if st := m.Status(); st.Version != 2 || st.Refused != 3 {
		t.Fatalf("after the check: %+v", st)
	}
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for _, e := range evs {
		if e.Kind == stat.EventRulesRefused {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("version 3 refused %d times, want once", n)
	}
}

// TestJoinConfigErrors: an invalid configuration is refused, naming the
// field; the instance defaults to the engine's.
func TestJoinConfigErrors(t *testing.T) {
	fs, err := filestore.Open(t.TempDir(), filestore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	eng := sluice.New(sluice.WithCluster(nil, sluice.ClusterConfig{InstanceID: "from-cluster"}))
	for _, tt := range []struct {
		cfg  fleet.Config
		want string
	}{
		{fleet.Config{Rules: fs}, "Config.App is required"},
		{fleet.Config{App: "shop"}, "Rules or Telemetry"},
		{fleet.Config{App: "shop", Rules: fs, CheckInterval: -1}, "negative"},
		{fleet.Config{App: "shop", Telemetry: &sink{}, Keep: -1}, "negative"},
	} {
		if _, err := fleet.Join(eng, tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Fatalf("Join(%+v) = %v, want an error naming %s", tt.cfg, err, tt.want)
		}
	}
	if _, err := fleet.Join(nil, fleet.Config{App: "shop", Rules: fs}); err == nil {
		t.Fatal("nil engine accepted")
	}
	m, err := fleet.Join(eng, fleet.Config{App: "shop", Rules: fs})
	if err != nil {
		t.Fatal(err)
	}
	if id := m.Status().Instance; id != eng.InstanceID() || id != "from-cluster" {
		t.Fatalf("instance %q, engine %q", id, eng.InstanceID())
	}
	m.Close()
	eng.Close()
	if _, err := fleet.Join(eng, fleet.Config{App: "shop", Rules: fs}); !errors.Is(err, sluice.ErrClosed) {
		t.Fatalf("Join of a closed engine: %v", err)
	}
}

// hanging is a RuleStore whose reads wait for their context to end.
type hanging struct{ *filestore.Store }

func (h hanging) Current(ctx context.Context, _ string) (cluster.RuleVersion, error) {
	<-ctx.Done()
	return cluster.RuleVersion{}, ctx.Err()
}

// TestFollowHangingStore: Join gives up on a store that does not answer
// at its Timeout, keeps the engine's rules and says why; Close cuts the
// following reads short.
func TestFollowHangingStore(t *testing.T) {
	fs, err := filestore.Open(t.TempDir(), filestore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	eng := sluice.New()
	defer eng.Close()
	if err := eng.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "api", Threshold: 1}}}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var errs []error
	m, err := fleet.Join(eng, fleet.Config{
		App: "shop", Rules: hanging{fs}, Timeout: 10 * time.Millisecond,
		OnError: func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	st := m.Status()
	if st.Version != 0 || st.Failures != 1 || !errors.Is(st.Err, context.DeadlineExceeded) {
		t.Fatalf("status %+v, want one failure, deadline exceeded", st)
	}
	if len(eng.Rules().Flow) != 1 {
		t.Fatalf("rules %+v, want those loaded before", eng.Rules())
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) == 0 || !strings.Contains(errs[0].Error(), `rule store "shop"`) {
		t.Fatalf("OnError saw %v", errs)
	}
}

// lateWatch is a RuleStore whose Watch starts listening only once release
// is closed, as a Watch whose first read or subscription is slow does.
type lateWatch struct {
	*filestore.Store
	release chan struct{}
}

func (l lateWatch) Watch(ctx context.Context, app string, changed func(int64)) error {
	select {
	case <-l.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return l.Store.Watch(ctx, app, changed)
}

// TestFollowSaveBeforeWatchListens: a version saved after Join read the
// store but before the store's Watch listened is loaded once the Watch
// listens, without waiting for the next check (neither the engine's clock
// nor the store's poll moves here).
func TestFollowSaveBeforeWatchListens(t *testing.T) {
	fs, err := filestore.Open(t.TempDir(), filestore.Config{Clock: sluicetest.NewManualClock(0), PollInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := fs.Save(ctx, "shop", 0, cluster.RuleVersion{Doc: []byte("flow:\n  - resource: api\n    threshold: 10\n"), Author: "ann"}); err != nil {
		t.Fatal(err)
	}
	eng := sluice.New(sluice.WithClock(sluicetest.NewManualClock(0)))
	defer eng.Close()
	store := lateWatch{Store: fs, release: make(chan struct{})}
	m, err := fleet.Join(eng, fleet.Config{App: "shop", Instance: "i1", Rules: store})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if st := m.Status(); st.Version != 1 {
		t.Fatalf("after Join: %+v", st)
	}
	if _, err := fs.Save(ctx, "shop", 1, cluster.RuleVersion{Doc: []byte("flow:\n  - resource: api\n    threshold: 20\n"), Author: "ann"}); err != nil {
		t.Fatal(err)
	}
	close(store.release)
	waitFor(t, "version 2, saved before the Watch listened", func() bool { return m.Status().Version == 2 })
	if th := eng.Rules().Flow[0].Threshold; th != 20 {
		t.Fatalf("threshold %v, want 20", th)
	}
}
