package sluiceredis

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
)

// TestGiveCaps: Give returns permits but never lets a budget hold more than
// it could have had.
func TestGiveCaps(t *testing.T) {
	t.Run("token bucket stays at most Burst", func(t *testing.T) {
		s, rc, _ := standalone(t)
		b := cluster.Budget{Key: "g", Algorithm: cluster.TokenBucket, Limit: 10, Interval: time.Hour, Burst: 10}
		key, _ := s.budgetKeys("g", algBucket)
		// A bucket that does not exist is full: Give creates nothing.
		if err := s.Give(ctxT(t), b, 5); err != nil {
			t.Fatal(err)
		}
		if n := rc.Exists(ctxT(t), key).Val(); n != 0 {
			t.Fatalf("Give on a full (absent) bucket created it")
		}
		if g := take1(t, s, cluster.Request{Budget: b, N: 8}); g.N != 8 {
			t.Fatalf("take 8: %+v", g)
		}
		t0 := hfloat(t, rc, key, "ts")
		if err := s.Give(ctxT(t), b, 3); err != nil {
			t.Fatal(err)
		}
		// 2 left, the refill between the two calls on Redis's clock, 3 back.
		want := 2 + (hfloat(t, rc, key, "ts")-t0)*10/float64(time.Hour.Microseconds()) + 3
		if lv := hfloat(t, rc, key, "t"); math.Abs(lv-want) > 1e-9 {
			t.Fatalf("level after taking 8 and giving 3: %v, want %v", lv, want)
		}
		if err := s.Give(ctxT(t), b, 15); err != nil {
			t.Fatal(err)
		}
		if lv := hfloat(t, rc, key, "t"); lv != 10 {
			t.Fatalf("level after giving 15: %v, want Burst 10", lv)
		}
		if g := take1(t, s, cluster.Request{Budget: b, N: 11}); g.N != 0 {
			t.Fatalf("took %d after Give, above Burst", g.N)
		}
	})
	t.Run("sliding window forgets at most the n most recent", func(t *testing.T) {
		s, rc, _ := standalone(t)
		b := cluster.Budget{Key: "g", Algorithm: cluster.SlidingWindow, Limit: 10, Interval: time.Hour}
		hkey, zkey := s.budgetKeys("g", algWindow)
		take1(t, s, cluster.Request{Budget: b, N: 4})
		old := rc.ZRangeWithScores(ctxT(t), zkey, 0, 0).Val()[0].Score
		take1(t, s, cluster.Request{Budget: b, N: 3})
		if err := s.Give(ctxT(t), b, 5); err != nil {
			t.Fatal(err)
		}
		// The newest grant (3) goes whole, 2 of the older one (4) go: 2
		// permits are left, still at the older grant's time.
		zs := rc.ZRangeWithScores(ctxT(t), zkey, 0, -1).Val()
		if len(zs) != 1 || zs[0].Score != old {
			t.Fatalf("log after Give 5: %v", zs)
		}
		if m := zs[0].Member.(string); m[len(m)-2:] != ":2" {
			t.Fatalf("log entry %q, want 2 permits", m)
		}
		if n := hfloat(t, rc, hkey, "n"); n != 2 {
			t.Fatalf("window holds %v, want 2", n)
		}
		if err := s.Give(ctxT(t), b, 100); err != nil {
			t.Fatal(err)
		}
		if n := hfloat(t, rc, hkey, "n"); n != 0 {
			t.Fatalf("window holds %v after giving more than it had", n)
		}
		if g := take1(t, s, cluster.Request{Budget: b, N: 11, Partial: true}); g.N != 10 {
			t.Fatalf("after Give, took %d, want Limit 10", g.N)
		}
	})
	t.Run("pacing unschedules the latest, never before now", func(t *testing.T) {
		s, rc, _ := standalone(t)
		clk := watch(s)
		// T = 1s: the TAT stays seconds ahead of now however busy the host.
		b := cluster.Budget{Key: "g", Algorithm: cluster.Pacing, Limit: 10, Interval: 10 * time.Second, MaxQueue: 10 * time.Second}
		key, _ := s.budgetKeys("g", algPacing)
		take1(t, s, cluster.Request{Budget: b, N: 5})
		tat := float64(clk.now()) + 5*1e6
		if got := rcFloat(t, rc.Get(ctxT(t), key).Val()); got != tat {
			t.Fatalf("TAT %v, want %v", got, tat)
		}
		if err := s.Give(ctxT(t), b, 2); err != nil {
			t.Fatal(err)
		}
		if got := rcFloat(t, rc.Get(ctxT(t), key).Val()); got != tat-2*1e6 {
			t.Fatalf("TAT after Give 2: %v, want %v", got, tat-2*1e6)
		}
		if err := s.Give(ctxT(t), b, 100); err != nil {
			t.Fatal(err)
		}
		after := redisTime(t, rc)
		if got := rcFloat(t, rc.Get(ctxT(t), key).Val()); got < float64(clk.now()) || got > float64(after) {
			t.Fatalf("TAT after Give 100: %v, want within [%d, %d] (now at Give)", got, clk.now(), after)
		}
		if g := take1(t, s, cluster.Request{Budget: b, N: 1}); g.N != 1 || g.Wait != 0 {
			t.Fatalf("after giving everything back: %+v, want no wait", g)
		}
	})
}

func rcFloat(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return f
}
