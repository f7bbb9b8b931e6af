package sluice_test

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

// TestRuleStoreFollow: an engine follows a file store on a fake clock:
// the version in force at New, a new one at the store's next poll, a
// refused one reported with its error while the rules in force stay.
func TestRuleStoreFollow(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	fs, err := filestore.Open(t.TempDir(), filestore.WithClock(clk), filestore.WithPollInterval(time.Second))
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
	eng := sluice.New(sluice.WithClock(clk), sluice.WithInstanceID("i1"),
		sluice.WithRuleStore(fs, sluice.RuleStoreConfig{App: "shop"}))
	defer eng.Close()
	var mu sync.Mutex
	var evs []stat.Event
	defer eng.Subscribe(func(e stat.Event) {
		mu.Lock()
		evs = append(evs, e)
		mu.Unlock()
	})()
	st, ok := eng.RuleStoreStatus()
	if !ok || st.Version != 1 || st.App != "shop" || len(eng.Rules().Flow) != 1 || eng.Rules().Flow[0].Threshold != 10 {
		t.Fatalf("after New: %+v, rules %+v", st, eng.Rules().Flow)
	}
	blockUntil(t, clk, 2) // the store's poll and the engine's check
	save(1, "flow:\n  - resource: api\n    threshold: 20\n")
	clk.Advance(time.Second) // the poll sees version 2: the engine loads it
	waitFor(t, "version 2", func() bool { st, _ := eng.RuleStoreStatus(); return st.Version == 2 })
	if th := eng.Rules().Flow[0].Threshold; th != 20 {
		t.Fatalf("threshold %v, want 20", th)
	}
	blockUntil(t, clk, 2)
	save(2, "flow:\n  - resource: api\n    threshold: 30\n    cluster: {}\n")
	clk.Advance(time.Second)
	waitFor(t, "version 3 refused", func() bool { st, _ := eng.RuleStoreStatus(); return st.Refused == 3 })
	st, _ = eng.RuleStoreStatus()
	if st.Version != 2 || !strings.Contains(st.RefusedErr.Error(), "WithCluster") || eng.Rules().Flow[0].Threshold != 20 {
		t.Fatalf("after the refusal: %+v, rules %+v", st, eng.Rules().Flow)
	}
	waitFor(t, "the refusal reported", func() bool {
		reps, _ := fs.Reports(ctx, "shop")
		return len(reps) == 1 && reps[0].Instance == "i1" && reps[0].Version == 2 && reps[0].Refused == 3 && strings.Contains(reps[0].Err, "WithCluster")
	})
	mu.Lock()
	var loaded, refused []int64
	for _, e := range evs {
		switch e.Kind {
		case stat.EventRulesLoaded:
			loaded = append(loaded, e.RuleVersion)
		case stat.EventRulesRefused:
			refused = append(refused, e.RuleVersion)
		}
	}
	mu.Unlock()
	if len(loaded) != 1 || loaded[0] != 2 || len(refused) != 1 || refused[0] != 3 {
		t.Fatalf("events: loaded versions %v, refused %v; want [2], [3]", loaded, refused)
	}
	// The periodic check finds the refused version current and does not
	// retry it.
	blockUntil(t, clk, 2)
	before, _ := eng.RuleStoreStatus()
	clk.Advance(sluice.DefaultCheckInterval)
	// The check runs on the engine's goroutine after the clock moved.
	waitFor(t, "the periodic check", func() bool { st, _ := eng.RuleStoreStatus(); return st.Checks > before.Checks })
	if st, _ := eng.RuleStoreStatus(); st.Version != 2 || st.Refused != 3 {
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

// TestRuleStoreConfigErrors: an invalid configuration leaves the engine
// without a rule store, saying why.
func TestRuleStoreConfigErrors(t *testing.T) {
	fs, err := filestore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		cfg  sluice.RuleStoreConfig
		want string
	}{
		{sluice.RuleStoreConfig{}, "App"},
		{sluice.RuleStoreConfig{App: "shop", CheckInterval: -1}, "negative"},
	} {
		eng := sluice.New(sluice.WithRuleStore(fs, tt.cfg))
		st, ok := eng.RuleStoreStatus()
		if !ok || st.Err == nil || !strings.Contains(st.Err.Error(), tt.want) {
			t.Fatalf("RuleStoreStatus for %+v = %+v, want an error naming %s", tt.cfg, st, tt.want)
		}
		eng.Close()
	}
	eng := sluice.New()
	defer eng.Close()
	if _, ok := eng.RuleStoreStatus(); ok {
		t.Fatal("an engine without WithRuleStore has a rule store status")
	}
	if eng.InstanceID() == "" {
		t.Fatal("no instance id")
	}
}

// hanging is a RuleStore whose reads wait for their context to end.
type hanging struct{ *filestore.Store }

func (h hanging) Current(ctx context.Context, _ string) (cluster.RuleVersion, error) {
	<-ctx.Done()
	return cluster.RuleVersion{}, ctx.Err()
}

// TestRuleStoreHangingAtNew: New gives up on a store that does not answer
// at its Timeout, starts without rules and says why; Close cuts the
// following reads short.
func TestRuleStoreHangingAtNew(t *testing.T) {
	fs, err := filestore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var errs []error
	eng := sluice.New(sluice.WithRuleStore(hanging{fs}, sluice.RuleStoreConfig{
		App: "shop", Timeout: 10 * time.Millisecond,
		OnError: func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() },
	}))
	st, _ := eng.RuleStoreStatus()
	if st.Version != 0 || st.Failures != 1 || !errors.Is(st.Err, context.DeadlineExceeded) {
		t.Fatalf("status %+v, want one failure, deadline exceeded", st)
	}
	if err := eng.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "api", Threshold: 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) == 0 || !strings.Contains(errs[0].Error(), `rule store "shop"`) {
		t.Fatalf("OnError saw %v", errs)
	}
}
