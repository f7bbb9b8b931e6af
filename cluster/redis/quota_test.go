package sluiceredis

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the tests' zones, whatever the host has

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

func unixAt(t testing.TB, s string) int64 {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v.UnixNano()
}

// enterN makes one entry of batch n and exits it; it returns the refusal,
// nil when the entry passed.
func enterN(t *testing.T, g *sluice.Engine, res string, n int, opts ...sluice.EntryOption) *sluice.BlockError {
	t.Helper()
	p, err := g.Entry(res, append(opts, sluice.WithBatch(n))...)
	if err == nil {
		p.Exit()
		return nil
	}
	var be *sluice.BlockError
	if !errors.As(err, &be) {
		t.Fatalf("entry: %v", err)
	}
	return be
}

// quotaKey is the Redis key of a flow quota's period.
func quotaKey(s *Store, app, res, spec, label string) string {
	k, _ := s.budgetKeys(escapeTag(app+"/quota/"+res+"/"+spec+"/"+label), algCalendar)
	return k
}

var monthly = rules.Flow{Resource: "api", Threshold: 3, Quota: &rules.Quota{Period: "month"}, Cluster: &rules.Cluster{}}

// TestQuotaClusterMonthBoundary: the plan's example on a cluster quota: 3
// per month; at 2026-01-31 23:59:59 the 4th call is refused with
// RetryAfter 1 s; at 2026-02-01 00:00:00 a call passes. Each month is one
// small key in Redis, expiring a month after its first grant.
func TestQuotaClusterMonthBoundary(t *testing.T) {
	store, rdb, _ := standalone(t)
	clk := sluicetest.NewManualClock(unixAt(t, "2026-01-31T23:59:57Z"))
	g := clusterEngine(t, store, sluice.ClusterConfig{Timeout: time.Hour}, sluice.WithClock(clk))
	loadFlow(t, g, monthly)
	for i := 0; i < 3; i++ {
		if be := enterN(t, g, "api", 1); be != nil {
			t.Fatalf("call %d refused: %v", i+1, be)
		}
	}
	clk.Set(unixAt(t, "2026-01-31T23:59:59Z"))
	be := enterN(t, g, "api", 1)
	if be == nil || be.RetryAfter != time.Second || be.Type != sluice.BlockCluster {
		t.Fatalf("the 4th call of January: %+v, want a cluster refusal with RetryAfter 1s", be)
	}
	jan := quotaKey(store, "shop", "api", "month@UTC", "2026-01-01T00:00Z")
	if n, err := rdb.Get(ctxT(t), jan).Int64(); err != nil || n != 3 {
		t.Fatalf("%s holds %d (%v), want 3", jan, n, err)
	}
	if ttl := rdb.PTTL(ctxT(t), jan).Val(); ttl <= 30*24*time.Hour || ttl > 31*24*time.Hour {
		t.Fatalf("%s expires in %v, want January's length (31 days) after its first grant", jan, ttl)
	}
	clk.Set(unixAt(t, "2026-02-01T00:00:00Z"))
	if be := enterN(t, g, "api", 1); be != nil {
		t.Fatalf("the first call of February: %v", be)
	}
	feb := quotaKey(store, "shop", "api", "month@UTC", "2026-02-01T00:00Z")
	if n := rdb.Get(ctxT(t), feb).Val(); n != "1" {
		t.Fatalf("%s holds %q, want 1", feb, n)
	}
}

// TestQuotaClusterBoundaries: a cluster quota at boundaries that break
// naive code: each period is its own key, used up at the period's last
// nanosecond, a whole quota at the next one's first instant.
func TestQuotaClusterBoundaries(t *testing.T) {
	store, _, _ := standalone(t)
	for _, c := range []struct {
		q           rules.Quota
		start, next string
	}{
		{rules.Quota{Period: "month"}, "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z"},
		{rules.Quota{Period: "day", Zone: "Europe/Berlin"}, "2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"},
		{rules.Quota{Period: "day", Zone: "Europe/Berlin"}, "2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z"},
		{rules.Quota{Period: "year", Zone: "Asia/Tokyo"}, "2025-12-31T15:00:00Z", "2026-12-31T15:00:00Z"},
		{rules.Quota{Period: "day", Zone: "Pacific/Apia"}, "2011-12-29T10:00:00Z", "2011-12-30T10:00:00Z"},
	} {
		t.Run(c.q.Zone+"/"+c.start, func(t *testing.T) {
			start, next := unixAt(t, c.start), unixAt(t, c.next)
			clk := sluicetest.NewManualClock(start)
			g := clusterEngine(t, store, sluice.ClusterConfig{App: "b" + fmt.Sprint(start), Timeout: time.Hour}, sluice.WithClock(clk))
			q := c.q
			loadFlow(t, g, rules.Flow{Resource: "api", Threshold: 5, Quota: &q, Cluster: &rules.Cluster{}})
			if be := enterN(t, g, "api", 2); be != nil {
				t.Fatal(be)
			}
			clk.Set(next - 1)
			if be := enterN(t, g, "api", 3); be != nil {
				t.Fatal(be)
			}
			if be := enterN(t, g, "api", 1); be == nil || be.RetryAfter != 1 {
				t.Fatalf("at the last nanosecond: %+v, want a refusal 1ns before the reset", be)
			}
			clk.Set(next)
			if be := enterN(t, g, "api", 5); be != nil {
				t.Fatalf("a whole quota at the reset: %v", be)
			}
		})
	}
}

// TestQuotaClusterSurvivesRestart: an engine uses 2 of the month's 3 and
// closes; a new engine on the same Redis (a restarted instance, a new one
// of a rolling deploy) reads the count so far: one more passes, no more.
func TestQuotaClusterSurvivesRestart(t *testing.T) {
	store, _, srv := standalone(t)
	now := unixAt(t, "2026-07-14T09:00:00Z")
	first := sluice.New(sluice.WithClock(sluicetest.NewManualClock(now)), sluice.WithCluster(store, sluice.ClusterConfig{App: "shop", Timeout: time.Hour}))
	loadFlow(t, first, monthly)
	for i := 0; i < 2; i++ {
		if be := enterN(t, first, "api", 1); be != nil {
			t.Fatal(be)
		}
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	// A new engine, a new client: nothing shared but the Redis server.
	later := clusterEngine(t, New(srv.Client(t)), sluice.ClusterConfig{Timeout: time.Hour}, sluice.WithClock(sluicetest.NewManualClock(now+int64(10*24*time.Hour))))
	loadFlow(t, later, monthly)
	if be := enterN(t, later, "api", 1); be != nil {
		t.Fatalf("the month's 3rd call: %v", be)
	}
	if be := enterN(t, later, "api", 1); be == nil {
		t.Fatal("the month's 4th call passed after a restart: the count was lost")
	}
}

// TestQuotaClusterFallbackBound: with Redis killed, each engine admits its
// local share of the quota a period (LocalThreshold here; by default the
// quota divided by the instances counted, rounded up), refusing with a
// message saying so; over the period, the fleet admits at most the quota
// plus the sum of the local shares: twice the quota with the default
// shares.
func TestQuotaClusterFallbackBound(t *testing.T) {
	store, _, srv := standalone(t)
	const quota, engines = 100, 2
	now := unixAt(t, "2026-07-14T09:00:00Z")
	rule := rules.Flow{Resource: "api", Threshold: quota, Quota: &rules.Quota{Period: "month"}, Cluster: &rules.Cluster{LocalThreshold: quota / engines}}
	gs := make([]*sluice.Engine, engines)
	for i := range gs {
		gs[i] = clusterEngine(t, store, sluice.ClusterConfig{Timeout: 200 * time.Millisecond, ProbeInterval: time.Hour, ExpectedInstances: engines},
			sluice.WithClock(sluicetest.NewManualClock(now)))
		loadFlow(t, gs[i], rule)
	}
	admitted := 0
	for i := 0; i < 60; i++ {
		if enterN(t, gs[i%engines], "api", 1) == nil {
			admitted++
		}
	}
	if admitted != 60 {
		t.Fatalf("admitted %d of 60 with Redis up", admitted)
	}
	srv.Kill()
	for i, g := range gs {
		local := 0
		var last *sluice.BlockError
		for j := 0; j < 3*quota; j++ {
			if be := enterN(t, g, "api", 1); be == nil {
				local++
			} else {
				last = be
			}
		}
		if local != quota/engines {
			t.Errorf("engine %d admitted %d with Redis down, want its share %d", i, local, quota/engines)
		}
		if last == nil || !strings.Contains(last.Reason, "cluster fallback: local share of the quota (50 per month@UTC) used") {
			t.Errorf("engine %d's refusal: %+v", i, last)
		}
		admitted += local
	}
	if admitted > 2*quota {
		t.Fatalf("the fleet admitted %d in the month, more than the stated bound %d", admitted, 2*quota)
	}
	t.Logf("admitted %d in the month: 60 through Redis, %d by the local shares with Redis down (bound: %d)", admitted, admitted-60, 2*quota)
}

// TestQuotaClusterParamPerUser: a per-user monthly cluster quota is one key
// per user and month, expiring; its memory per key is measured with MEMORY
// USAGE (go test -v -run TestQuotaClusterParamPerUser ./cluster/redis/
// logs it).
func TestQuotaClusterParamPerUser(t *testing.T) {
	store, rdb, _ := standalone(t)
	clk := sluicetest.NewManualClock(unixAt(t, "2026-07-14T09:00:00Z"))
	g := clusterEngine(t, store, sluice.ClusterConfig{Timeout: time.Hour}, sluice.WithClock(clk))
	if err := g.LoadRules(rules.Set{Param: []rules.Param{{Resource: "api", Threshold: 2, Quota: &rules.Quota{Period: "month"}, Cluster: &rules.Cluster{}}}}); err != nil {
		t.Fatal(err)
	}
	const users = 2000
	used := func() int64 {
		var v int64
		for _, l := range strings.Split(rdb.Info(ctxT(t), "memory").Val(), "\r\n") {
			if strings.HasPrefix(l, "used_memory:") {
				_, _ = fmt.Sscan(strings.TrimPrefix(l, "used_memory:"), &v)
			}
		}
		return v
	}
	before := used()
	for u := 0; u < users; u++ {
		if be := enterN(t, g, "api", 1, sluice.WithStringArg(0, fmt.Sprint("user-", u))); be != nil {
			t.Fatal(be)
		}
	}
	if be := enterN(t, g, "api", 2, sluice.WithStringArg(0, "user-7")); be == nil || be.Type != sluice.BlockCluster {
		t.Fatalf("user-7's 2nd and 3rd units: %+v, want refused", be)
	}
	var sum, n int64
	example := ""
	iter := rdb.Scan(ctxT(t), 0, "*pquota*", 500).Iterator()
	for iter.Next(ctxT(t)) {
		k := iter.Val()
		example = k
		if ttl := rdb.PTTL(ctxT(t), k).Val(); ttl <= 0 || ttl > 31*24*time.Hour {
			t.Fatalf("%s expires in %v", k, ttl)
		}
		sum += rdb.MemoryUsage(ctxT(t), k).Val()
		n++
	}
	if n != users {
		t.Fatalf("%d quota keys for %d users, want one each", n, users)
	}
	per := sum / n
	t.Logf("per-user monthly quota key: %d bytes by MEMORY USAGE (mean of %d keys, such as %s); used_memory grew by %d bytes a user",
		per, n, example, (used()-before)/users)
	if per > 200 {
		t.Errorf("a quota key takes %d bytes, more than the 200 the docs state", per)
	}
}

// TestCalendarBudgetTakeGive: the store's calendar budget grants within
// its limit (all or nothing, or partial), gives back without going below
// zero, and keeps the key's expiry through both.
func TestCalendarBudgetTakeGive(t *testing.T) {
	store, rdb, _ := standalone(t)
	b := cluster.Budget{Key: "q", Algorithm: cluster.Calendar, Limit: 5, Interval: time.Hour}
	if g := take1(t, store, cluster.Request{Budget: b, N: 3}); g.N != 3 {
		t.Fatalf("granted %d of 3", g.N)
	}
	if g := take1(t, store, cluster.Request{Budget: b, N: 3}); g.N != 0 {
		t.Fatalf("granted %d of 3 with 2 left, all or nothing", g.N)
	}
	if g := take1(t, store, cluster.Request{Budget: b, N: 3, Partial: true}); g.N != 2 {
		t.Fatalf("granted %d of 3 partial with 2 left", g.N)
	}
	k, _ := store.budgetKeys("q", algCalendar)
	if err := store.Give(ctxT(t), b, 7); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Get(ctxT(t), k).Val(); n != "0" {
		t.Fatalf("after giving back more than granted the key holds %q, want 0", n)
	}
	if ttl := rdb.PTTL(ctxT(t), k).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
		t.Fatalf("the key expires in %v, want the hour set by its first grant", ttl)
	}
}

// TestQuotaClusterParamFallback: with Redis killed, a per-user cluster
// quota admits each user's local share a period (LocalThreshold), a new
// user included, and refuses the rest with a message saying so.
func TestQuotaClusterParamFallback(t *testing.T) {
	store, _, srv := standalone(t)
	clk := sluicetest.NewManualClock(unixAt(t, "2026-07-14T09:00:00Z"))
	g := clusterEngine(t, store, sluice.ClusterConfig{Timeout: 200 * time.Millisecond, ProbeInterval: time.Hour}, sluice.WithClock(clk))
	if err := g.LoadRules(rules.Set{Param: []rules.Param{{Resource: "api", Threshold: 10, Quota: &rules.Quota{Period: "day"},
		Cluster: &rules.Cluster{LocalThreshold: 2}}}}); err != nil {
		t.Fatal(err)
	}
	ann := sluice.WithStringArg(0, "ann")
	for i := 0; i < 5; i++ {
		if be := enterN(t, g, "api", 1, ann); be != nil {
			t.Fatalf("ann's call %d with Redis up: %v", i+1, be)
		}
	}
	srv.Kill()
	for _, user := range []string{"ann", "bob"} {
		arg := sluice.WithStringArg(0, user)
		for i := 0; i < 2; i++ {
			if be := enterN(t, g, "api", 1, arg); be != nil {
				t.Fatalf("%s's local call %d: %v", user, i+1, be)
			}
		}
		be := enterN(t, g, "api", 1, arg)
		if be == nil || !strings.Contains(be.Reason, "cluster fallback: local share of the quota (2 per day@UTC) used") {
			t.Fatalf("%s's 3rd local call: %+v", user, be)
		}
	}
}
