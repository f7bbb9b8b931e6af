package sluiceredis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
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
			ex, err := c.ScriptExists(ctx, takeScript.Hash(), giveScript.Hash(), beatScript.Hash(), membersScript.Hash()).Result()
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
