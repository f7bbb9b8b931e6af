package sluiceredis

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/rules"
)

// TestCluster runs on a 3-primary Redis Cluster on loopback ports: keys of
// a budget share a slot, batches spanning slots are one pipeline, and the
// shared-limit, SCRIPT FLUSH and heartbeat tests pass as on one server.
func TestCluster(t *testing.T) {
	rc := redistest.StartCluster(t, 3)
	admin := rc.Client(t)
	newStore := func() *Store { return New(rc.Client(t)) }

	t.Run("hash tags", func(t *testing.T) {
		s := newStore()
		if s.group != groupSlot {
			t.Fatal("a ClusterClient should group by slot")
		}
		nodes := map[string]bool{}
		for _, k := range []string{"a", "api:/v1/orders", "{x}", "}x{", "100%", "%7B", "user:42:posts", "é"} {
			tag := escapeTag(k)
			var keys []string
			for _, alg := range []byte{algBucket, algWindow, algPacing} {
				k1, k2 := s.budgetKeys(tag, alg)
				keys = append(keys, k1)
				if k2 != "" {
					keys = append(keys, k2)
				}
			}
			base := s.appBase(k)
			keys = append(keys, base+sufMembers, base+sufMember+"id-1")
			want := int64(slot(tag))
			for _, key := range keys[:len(keys)-2] {
				if got := admin.ClusterKeySlot(ctxT(t), key).Val(); got != want {
					t.Fatalf("budget %q: key %q in slot %d, want %d", k, key, got, want)
				}
			}
			ms := admin.ClusterKeySlot(ctxT(t), keys[len(keys)-2]).Val()
			if got := admin.ClusterKeySlot(ctxT(t), keys[len(keys)-1]).Val(); got != ms {
				t.Fatalf("app %q: member key in slot %d, index in %d", k, got, ms)
			}
		}
		// Budgets spread over the primaries.
		for i := 0; i < 32; i++ {
			k1, _ := s.budgetKeys(fmt.Sprint("budget-", i), algBucket)
			addr, err := admin.MasterForKey(ctxT(t), k1)
			if err != nil {
				t.Fatal(err)
			}
			nodes[addr.Options().Addr] = true
		}
		if len(nodes) != 3 {
			t.Fatalf("32 budgets on %d primaries", len(nodes))
		}
	})

	t.Run("load", func(t *testing.T) {
		if err := newStore().Load(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		err := admin.ForEachMaster(ctxT(t), func(ctx context.Context, c *redis.Client) error {
			ex, err := c.ScriptExists(ctx, takeScript.Hash(), takeOneScript.Hash(), giveScript.Hash(), beatScript.Hash(), membersScript.Hash()).Result()
			if err != nil {
				return err
			}
			for i, ok := range ex {
				if !ok {
					return fmt.Errorf("%s: script %d not loaded", c.Options().Addr, i)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("batch across slots decides in order", func(t *testing.T) {
		s := newStore()
		var reqs []cluster.Request
		for i := 0; i < 12; i++ {
			b := cluster.Budget{Key: fmt.Sprint("ord-", i%4), Algorithm: cluster.TokenBucket, Limit: 5, Interval: time.Hour}
			reqs = append(reqs, cluster.Request{Budget: b, N: 2})
		}
		g := make([]cluster.Grant, len(reqs))
		if err := s.Take(ctxT(t), reqs, g); err != nil {
			t.Fatal(err)
		}
		for i := range g {
			want := int64(2) // 2, 2, then 0 for each of the 4 budgets
			if i >= 8 {
				want = 0
			}
			if g[i].N != want {
				t.Fatalf("request %d (budget %s): %+v, want %d", i, reqs[i].Budget.Key, g[i], want)
			}
		}
	})

	t.Run("token bucket shared limit", func(t *testing.T) {
		b := cluster.Budget{Key: "shared", Algorithm: cluster.TokenBucket, Limit: 500, Interval: time.Second, Burst: 50}
		batch := []cluster.Request{{Budget: b, N: 3}, {Budget: b, N: 5, Partial: true}}
		for i := 0; i < 6; i++ { // other budgets in other slots: a pipeline
			batch = append(batch, cluster.Request{Budget: cluster.Budget{Key: fmt.Sprint("o", i), Algorithm: cluster.Algorithm(1 + i%3), Limit: 100, Interval: time.Second, MaxQueue: time.Millisecond}, N: 1})
		}
		res := runShared(t, 4, 100, newStore, batch, "shared")
		span := float64(res.last-res.first) / 1e6
		bound := 50 + 500*span
		t.Logf("granted %d over %.3fs on Redis's clock (bound %.1f)", res.total, span, bound)
		if float64(res.total) > bound+1e-6 || res.total < 45 {
			t.Fatalf("granted %d, bound %.3f", res.total, bound)
		}
	})

	t.Run("sliding window shared limit", func(t *testing.T) {
		b := cluster.Budget{Key: "sw", Algorithm: cluster.SlidingWindow, Limit: 25, Interval: 20 * time.Millisecond}
		batch := []cluster.Request{{Budget: b, N: 2}, {Budget: b, N: 3, Partial: true}}
		for i := 0; i < 6; i++ {
			batch = append(batch, cluster.Request{Budget: cluster.Budget{Key: fmt.Sprint("w", i), Algorithm: cluster.SlidingWindow, Limit: 100, Interval: time.Second}, N: 1})
		}
		res := runShared(t, 4, 150, newStore, batch, "sw")
		checkWindow(t, admin, newStore(), "sw", res, 25, b.Interval)
	})

	t.Run("script flush", func(t *testing.T) {
		flushDuringTakes(t, admin, newStore)
	})

	t.Run("members", func(t *testing.T) {
		membersOK(t, newStore(), admin)
	})
}

// TestClusterEngineFleet: three engines share four 200/s cluster rules
// through a 3-primary Redis Cluster, reached as docs/design/cluster.md wires it
// (redis.NewUniversalClient with several addresses, which builds a
// ClusterClient), under five times each rule's demand for three seconds.
// The rules' budgets sit in slots of different primaries, so each lease
// refill carrying several of them is a pipeline of one script per slot.
// Every rule admits at most 200 in each aligned second (plus one entry
// per engine, and more once a loaded host kept the test from making its
// demand: see secondBound), and at least 190 after the first while each
// engine made twice its share of entries in every second (keptUp).
func TestClusterEngineFleet(t *testing.T) {
	const (
		engines = 3
		limit   = 200
		seconds = 3
	)
	// Names whose budgets hash to slots of all three primaries (slots are
	// split evenly at creation: these are in 14489, 5733, 7100 and 3543).
	resources := []string{"api-0", "api-1", "api-3", "api-5"}
	rc := redistest.StartCluster(t, 3)
	newClient := func() redis.UniversalClient {
		c := redis.NewUniversalClient(&redis.UniversalOptions{
			Addrs: rc.Addrs(), MaxRetries: -1, MaxRedirects: -1, DialerRetries: 1,
			DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
			ContextTimeoutEnabled: true,
		})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	if _, ok := newClient().(*redis.ClusterClient); !ok {
		t.Fatal("UniversalClient with several addresses is not a ClusterClient")
	}
	var rs []rules.Flow
	primaries := map[string]bool{}
	admin := rc.Client(t)
	s := New(admin)
	for _, r := range resources {
		rs = append(rs, rules.Flow{Resource: r, Threshold: limit, Cluster: &rules.Cluster{}})
		k, _ := s.budgetKeys(escapeTag("shop/flow/"+r+"/reject/1000ms"), algWindow)
		node, err := admin.MasterForKey(ctxT(t), k)
		if err != nil {
			t.Fatal(err)
		}
		primaries[node.Options().Addr] = true
	}
	t.Logf("%d rules on %d primaries", len(resources), len(primaries))
	if len(primaries) != 3 {
		t.Fatalf("the rules' budgets sit on %d primaries, want them spread over 3", len(primaries))
	}
	gs := make([]*sluice.Engine, engines)
	for i := range gs {
		// A generous Timeout: the test is about sharing, not latency (see
		// TestProcessFleetSharesBudget).
		gs[i] = clusterEngine(t, New(newClient()), sluice.ClusterConfig{Timeout: 2 * time.Second, HeartbeatInterval: 100 * time.Millisecond})
		loadFlow(t, gs[i], rs...)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ok := true
		for _, g := range gs {
			st, _ := g.ClusterStatus()
			ok = ok && st.Live == engines
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the heartbeats did not count the fleet")
		}
	}
	counts, tried, fell := runFleet(t, gs, resources, 5*limit/engines, seconds)
	if fell > 0 {
		t.Errorf("%d decisions by the fallback: the store failed or was late", fell)
	}
	for r, res := range resources {
		aligned := true
		for sec := 0; sec < seconds; sec++ {
			aligned = aligned && keptUp(tried[sec], 2*limit/engines)
			sum := int64(0)
			per := make([]string, engines)
			for e := range per {
				sum += counts[sec][r][e]
				per[e] = fmt.Sprint(counts[sec][r][e])
			}
			t.Logf("%s second %d: admitted %d (%s), tried %v", res, sec, sum, strings.Join(per, " + "), tried[sec])
			if b := secondBound(limit, engines, aligned); sum > b {
				t.Errorf("%s second %d: admitted %d > %d (windows aligned on the seconds: %v)", res, sec, sum, b, aligned)
			}
			if sec > 0 && sum < limit*95/100 && aligned {
				t.Errorf("%s second %d: admitted %d < 95%% of %d", res, sec, sum, limit)
			}
		}
	}
}

// secondBound is the most a leased reject rule of limit may admit in an
// aligned second, counted as the tests count (an entry in the second it
// ended). While every engine made its demand since the start, Redis's
// window stays on the seconds (it starts empty on a boundary and, kept
// saturated, admits again as its oldest grants leave, one second later):
// the limit, plus one entry per engine whose permit came from the second
// before. Once the demand fell short (a loaded host starves the test's
// goroutines) the window is off the seconds, and the bound is the
// design's (docs/design/cluster.md, Accuracy): the limit plus the permits
// held in leases at the second's start, at most three quarters of it.
func secondBound(limit, engines int, aligned bool) int64 {
	if aligned {
		return int64(limit + engines)
	}
	return int64(limit + limit*3/4)
}

// keptUp reports whether every engine tried at least least entries in a
// second. The lower bound of a shared limit holds only under a demand
// above each engine's share in that second and every one before: on a
// loaded host the test's own goroutines may make a small part of their
// demand (one run under a load of 25 made 2 entries in second 0 and 206
// in second 1 where 600 were due, then caught up with 1,551 in second 2),
// a window that was not saturated from the start is off the seconds (the
// 200 admitted late in second 1 leave it late in second 2, which then
// admits 23, as a sliding window must), and leases held by an engine that
// makes few entries are permits the others cannot have.
func keptUp(tried []int64, least int) bool {
	for _, n := range tried {
		if n < int64(least) {
			return false
		}
	}
	return true
}

// runFleet has every engine of gs make demand entries per second on every
// resource, from the next aligned wall-clock second for seconds, and
// returns the admissions by second, resource and engine, the entries each
// engine tried on each resource by second (by the second they began in),
// and the number of decisions by the fallback.
func runFleet(t *testing.T, gs []*sluice.Engine, resources []string, demand, seconds int) ([][][]int64, [][]int64, int64) {
	t.Helper()
	counts := make([][][]int64, seconds)
	tried := make([][]int64, seconds)
	for s := range counts {
		counts[s] = make([][]int64, len(resources))
		for r := range counts[s] {
			counts[s][r] = make([]int64, len(gs))
		}
		tried[s] = make([]int64, len(gs))
	}
	var (
		fell atomic.Int64
		mu   sync.Mutex
		wg   sync.WaitGroup
	)
	start := time.Now().Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(start))
	for e, g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([][]int64, seconds)
			for s := range mine {
				mine[s] = make([]int64, len(resources))
			}
			myTries := make([]int64, seconds)
			sent := 0
			for {
				el := time.Since(start)
				if el >= time.Duration(seconds)*time.Second {
					break
				}
				for due := int(el.Seconds() * float64(demand)); sent < due; sent++ {
					if sec := int(time.Since(start) / time.Second); sec < seconds {
						myTries[sec]++
					}
					for r, res := range resources {
						be := enter(t, g, res)
						if be == nil {
							if sec := int(time.Since(start) / time.Second); sec < seconds {
								mine[sec][r]++
							}
						} else if strings.Contains(be.Reason, "fallback") {
							fell.Add(1)
						}
					}
				}
				time.Sleep(time.Millisecond)
			}
			mu.Lock()
			for s := range mine {
				for r := range mine[s] {
					counts[s][r][e] = mine[s][r]
				}
				tried[s][e] = myTries[s]
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return counts, tried, fell.Load()
}
