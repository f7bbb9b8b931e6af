package sluiceredis

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/rules"
)

// inUse samples the live slots of budget key.
func inUse(t testing.TB, s *Store, key string) int64 {
	t.Helper()
	n, err := s.SlotsInUse(ctxT(t), key)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func acquire(t testing.TB, s *Store, key, holder string, n, limit int64) bool {
	t.Helper()
	ok, _, err := s.AcquireSlot(ctxT(t), key, holder, n, limit, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestSlotsExactAtTheLimit: a limit of 3 admits 3 slots, batches count
// whole, a release makes room for exactly its slots.
func TestSlotsExactAtTheLimit(t *testing.T) {
	s, _, _ := standalone(t)
	if !acquire(t, s, "k", "a", 1, 3) || !acquire(t, s, "k", "b", 2, 3) {
		t.Fatal("refused below the limit")
	}
	if acquire(t, s, "k", "c", 1, 3) {
		t.Fatal("admitted a 4th slot of 3")
	}
	if got := inUse(t, s, "k"); got != 3 {
		t.Fatalf("in use %d, want 3", got)
	}
	if err := s.ReleaseSlot(ctxT(t), "k", "b", 2); err != nil {
		t.Fatal(err)
	}
	if acquire(t, s, "k", "c", 3, 3) {
		t.Fatal("admitted 3 slots beside 1 of 3")
	}
	if !acquire(t, s, "k", "c", 2, 3) {
		t.Fatal("refused 2 slots beside 1 of 3")
	}
	if _, _, err := s.AcquireSlot(ctxT(t), "k", "d", 0, 3, time.Second); err == nil {
		t.Error("0 slots accepted")
	}
}

// TestSlotsLostLeaseFreesNobodyElse: a holder whose lease ran out (its
// deadline set in the past, as the server's clock would make it) loses its
// slot to the next holder; its late release frees nothing of the new
// holder's, its renewal reports the lease lost, and a reconciliation adds
// it back, counted.
func TestSlotsLostLeaseFreesNobodyElse(t *testing.T) {
	s, raw, _ := standalone(t)
	if !acquire(t, s, "k", "a", 1, 1) {
		t.Fatal("refused")
	}
	if acquire(t, s, "k", "b", 1, 1) {
		t.Fatal("admitted b while a holds the only slot")
	}
	// a's lease runs out: its deadline, on the server's clock, is past.
	raw.ZAdd(ctxT(t), s.slotsKey("k"), redis.Z{Score: float64(redisTime(t, raw) - 1), Member: "a"})
	if got := inUse(t, s, "k"); got != 0 {
		t.Fatalf("in use %d after a's lease ran out, want 0", got)
	}
	if !acquire(t, s, "k", "b", 1, 1) {
		t.Fatal("b refused after a's lease ran out")
	}
	if err := s.ReleaseSlot(ctxT(t), "k", "a", 1); err != nil {
		t.Fatal(err)
	}
	if got := inUse(t, s, "k"); got != 1 {
		t.Fatalf("in use %d after a's late release, want b's 1", got)
	}
	if acquire(t, s, "k", "c", 1, 1) {
		t.Fatal("a's late release freed b's slot")
	}
	missing, err := s.RenewSlots(ctxT(t), []string{"k", "k"}, []string{"a", "b"}, []int64{1, 1}, time.Minute, false)
	if err != nil || missing != 1 {
		t.Fatalf("renew: missing %d, %v; want a's 1", missing, err)
	}
	if got := inUse(t, s, "k"); got != 1 {
		t.Fatalf("in use %d after renewing, want 1 (a not added back)", got)
	}
	missing, err = s.RenewSlots(ctxT(t), []string{"k", "k"}, []string{"a", "b"}, []int64{1, 1}, time.Minute, true)
	if err != nil || missing != 1 {
		t.Fatalf("reconcile: missing %d, %v", missing, err)
	}
	if got := inUse(t, s, "k"); got != 2 {
		t.Fatalf("in use %d after reconciling, want 2 (a and b in flight, above the limit)", got)
	}
}

// TestSlotsLeaseOnServerClock: a lease's deadline is the server's TIME
// plus the TTL, and the key outlives it.
func TestSlotsLeaseOnServerClock(t *testing.T) {
	s, raw, _ := standalone(t)
	before := redisTime(t, raw)
	if !acquire(t, s, "k", "a", 2, 5) {
		t.Fatal("refused")
	}
	after := redisTime(t, raw)
	for _, m := range []string{"a", "a#2"} {
		sc, err := raw.ZScore(ctxT(t), s.slotsKey("k"), m).Result()
		if err != nil {
			t.Fatal(err)
		}
		if dl := int64(sc); dl < before+time.Minute.Microseconds() || dl > after+time.Minute.Microseconds() {
			t.Errorf("%s: deadline %d, want TIME+60s in [%d, %d]", m, dl, before+60e6, after+60e6)
		}
	}
	if ttl := raw.PTTL(ctxT(t), s.slotsKey("k")).Val(); ttl < time.Minute {
		t.Errorf("key expires in %v, before its slots' deadline", ttl)
	}
}

// slotEngine is an engine of app "conc" on srv with heartbeats every hb
// (slot leases last three of them).
func slotEngine(t *testing.T, srv *redistest.Server, id string, hb time.Duration) *sluice.Engine {
	return clusterEngine(t, New(srv.Client(t)), sluice.ClusterConfig{App: "conc", InstanceID: id,
		HeartbeatInterval: hb, Timeout: time.Second, ProbeInterval: 50 * time.Millisecond})
}

func concRule(n float64, cl rules.Cluster) rules.Flow {
	return rules.Flow{Resource: "export", Metric: rules.Concurrency, Threshold: n, Cluster: &cl}
}

// TestEngineFleetConcurrency: two engines share "at most 3 in flight";
// exits give slots back; a reload to 1 with 3 in flight refuses until the
// fleet is under 1, and back to 3 admits again.
func TestEngineFleetConcurrency(t *testing.T) {
	srv := redistest.Start(t)
	a, b := slotEngine(t, srv, "a", time.Second), slotEngine(t, srv, "b", time.Second)
	s := New(srv.Client(t))
	for _, g := range []*sluice.Engine{a, b} {
		loadFlow(t, g, concRule(3, rules.Cluster{}))
	}
	var held []sluice.Pass
	for i, g := range []*sluice.Engine{a, b, a} {
		p, err := g.Entry("export")
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		held = append(held, p)
	}
	for _, g := range []*sluice.Engine{a, b} {
		_, err := g.Entry("export")
		var be *sluice.BlockError
		if !errors.As(err, &be) || be.Type != sluice.BlockCluster || be.Threshold != 3 {
			t.Fatalf("4th entry: %v, want a cluster refusal at 3", err)
		}
	}
	if got := inUse(t, s, "conc/conc/export"); got != 3 {
		t.Fatalf("in use %d, want 3", got)
	}
	held[1].Exit()
	p, err := a.Entry("export")
	if err != nil {
		t.Fatalf("entry after an exit: %v", err)
	}
	held[1] = p
	// Reload: at most 1 in flight; the 3 held keep their slots.
	for _, g := range []*sluice.Engine{a, b} {
		loadFlow(t, g, concRule(1, rules.Cluster{}))
	}
	for i := 0; i < 3; i++ {
		if _, err := b.Entry("export"); err == nil {
			t.Fatal("admitted with 3 in flight of 1")
		}
		held[i].Exit()
	}
	p, err = b.Entry("export")
	if err != nil {
		t.Fatalf("entry with none in flight of 1: %v", err)
	}
	if _, err := a.Entry("export"); err == nil {
		t.Fatal("admitted a 2nd of 1")
	}
	for _, g := range []*sluice.Engine{a, b} {
		loadFlow(t, g, concRule(3, rules.Cluster{}))
	}
	q, err := a.Entry("export")
	if err != nil {
		t.Fatalf("after the reload back to 3: %v", err)
	}
	p.Exit()
	q.Exit()
	if got := inUse(t, s, "conc/conc/export"); got != 0 {
		t.Fatalf("in use %d after every exit, want 0", got)
	}
}

// TestEngineConcurrencyFallbackAndReconcile: with Redis down the engine
// admits its local share (LocalThreshold 2 here) counting the entries
// it held before; when Redis returns empty, every entry still in flight
// is registered again before the first remote admission.
func TestEngineConcurrencyFallbackAndReconcile(t *testing.T) {
	srv := redistest.Start(t)
	g := slotEngine(t, srv, "a", 100*time.Millisecond)
	s := New(srv.Client(t))
	loadFlow(t, g, concRule(5, rules.Cluster{LocalThreshold: 2}))
	p1, err := g.Entry("export")
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	var held []sluice.Pass
	refusals := 0
	for i := 0; i < 10; i++ {
		p, err := g.Entry("export")
		if err != nil {
			refusals++
			if !strings.Contains(err.Error(), "fallback") {
				t.Fatalf("refusal in fallback: %v", err)
			}
			continue
		}
		held = append(held, p)
	}
	// The share is 2 in flight, p1 included.
	if len(held) != 1 || refusals != 9 {
		t.Fatalf("admitted %d in fallback beside the one held, want 1", len(held))
	}
	srv.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if st, _ := g.ClusterStatus(); !st.Fallback {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still in fallback 10 s after Redis came back")
		}
		_, _ = g.Entry("export") // decisions in fallback queue the probes
		time.Sleep(10 * time.Millisecond)
	}
	// Reconciled before the first remote decision: both entries count.
	if got := inUse(t, s, "conc/conc/export"); got != 2 {
		t.Fatalf("in use %d after recovery, want the 2 in flight", got)
	}
	// For a grace period after recovery admissions keep within the local
	// share too (the other instances may not have reconciled); after it
	// the store admits up to the limit, 3 more, and no more.
	var more []sluice.Pass
	deadline = time.Now().Add(10 * time.Second)
	for len(more) < 3 {
		if p, err := g.Entry("export"); err == nil {
			more = append(more, p)
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("admitted %d after recovery beside 2 in 10 s, want 3", len(more))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if p, err := g.Entry("export"); err == nil {
		p.Exit()
		t.Fatal("admitted a 6th of 5")
	}
	for _, p := range append(append(more, held...), p1) {
		p.Exit()
	}
	if got := inUse(t, s, "conc/conc/export"); got != 0 {
		t.Fatalf("in use %d after every exit, want 0", got)
	}
}

// TestEngineFleetParamConcurrency: "at most 2 reports in flight per
// tenant, fleet-wide" on two engines: each tenant's limit is its own, an
// exit frees a slot of its tenant only.
func TestEngineFleetParamConcurrency(t *testing.T) {
	srv := redistest.Start(t)
	a, b := slotEngine(t, srv, "a", time.Second), slotEngine(t, srv, "b", time.Second)
	for _, g := range []*sluice.Engine{a, b} {
		if err := g.LoadRules(rules.Set{Param: []rules.Param{{Resource: "report", Key: "tenant",
			Metric: rules.Concurrency, Threshold: 2, Cluster: &rules.Cluster{}}}}); err != nil {
			t.Fatal(err)
		}
	}
	enter := func(g *sluice.Engine, tenant string) (sluice.Pass, error) {
		return g.Entry("report", sluice.WithStringAttachment("tenant", tenant))
	}
	p1, err1 := enter(a, "acme")
	p2, err2 := enter(b, "acme")
	if err1 != nil || err2 != nil {
		t.Fatalf("acme's 2: %v, %v", err1, err2)
	}
	_, err := enter(a, "acme")
	var be *sluice.BlockError
	if !errors.As(err, &be) || be.Type != sluice.BlockCluster {
		t.Fatalf("acme's 3rd: %v, want a cluster refusal", err)
	}
	q1, err1 := enter(a, "globex")
	q2, err2 := enter(b, "globex")
	if err1 != nil || err2 != nil {
		t.Fatalf("globex's 2 beside acme's: %v, %v", err1, err2)
	}
	if _, err := enter(b, "globex"); err == nil {
		t.Fatal("globex's 3rd admitted")
	}
	p1.Exit()
	if _, err := enter(b, "globex"); err == nil {
		t.Fatal("acme's exit freed a slot of globex")
	}
	p3, err := enter(b, "acme")
	if err != nil {
		t.Fatalf("acme after an exit: %v", err)
	}
	for _, p := range []sluice.Pass{p2, p3, q1, q2} {
		p.Exit()
	}
}
