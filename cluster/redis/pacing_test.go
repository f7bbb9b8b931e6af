package sluiceredis

import (
	"sort"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
)

// TestPacingWaits replays arrivals against a GCRA model driven by the
// scripts' Redis times: each grant's Wait is TAT - now (TAT the theoretical
// arrival time, never before now), the TAT advances by N·Interval/Limit, and
// a request whose Wait would exceed MaxQueue gets nothing and RetryAfter =
// Wait - MaxQueue.
func TestPacingWaits(t *testing.T) {
	s, _, _ := standalone(t)
	clk := watch(s)
	// T = 100ms: the queue outgrows MaxQueue unless a round trip takes
	// longer than T.
	b := cluster.Budget{Key: "pace", Algorithm: cluster.Pacing, Limit: 10, Interval: time.Second, MaxQueue: 350 * time.Millisecond}
	const T, maxQ = 100e3, 350e3 // µs
	var tat float64
	var granted, refused int
	for i := 0; i < 40; i++ {
		n := int64(1 + i%3)
		g := take1(t, s, cluster.Request{Budget: b, N: n, Partial: i%2 == 0})
		now := float64(clk.now())
		if tat < now {
			tat = now
		}
		wait := tat - now
		if wait > maxQ {
			refused++
			if g.N != 0 || g.Wait != 0 || !near(g.RetryAfter, us(wait-maxQ)) {
				t.Fatalf("arrival %d: %+v, want refusal with RetryAfter %v", i, g, us(wait-maxQ))
			}
			continue
		}
		granted++
		if g.N != n || !near(g.Wait, us(wait)) || g.RetryAfter != 0 {
			t.Fatalf("arrival %d: %+v, want %d after %v", i, g, n, us(wait))
		}
		tat += float64(n) * T
	}
	if granted == 0 || refused == 0 {
		t.Fatalf("granted %d, refused %d: sequence did not queue past MaxQueue", granted, refused)
	}
}

// TestPacingSpacing: four instances take from one pacing budget; the due
// times of all permits granted (script time + Wait + i·T for the i-th
// permit of a grant) are at least T apart and no grant waits longer than
// MaxQueue.
func TestPacingSpacing(t *testing.T) {
	_, _, srv := standalone(t)
	b := cluster.Budget{Key: "space", Algorithm: cluster.Pacing, Limit: 1000, Interval: time.Second, MaxQueue: 5 * time.Millisecond}
	var (
		dues []float64
		maxW time.Duration
	)
	stores := make([]*Store, 4)
	for i := range stores {
		stores[i] = New(srv.Client(t))
	}
	type rec struct {
		at int64
		g  cluster.Grant
	}
	out := make(chan []rec, len(stores))
	for _, s := range stores {
		go func(s *Store) {
			clk := watch(s)
			var mine []rec
			gs := make([]cluster.Grant, 1)
			for r := 0; r < 100; r++ {
				if err := s.Take(ctxT(t), []cluster.Request{{Budget: b, N: 2}}, gs); err != nil {
					t.Error(err)
					break
				}
				if gs[0].N > 0 {
					mine = append(mine, rec{clk.now(), gs[0]})
				}
			}
			out <- mine
		}(s)
	}
	for range stores {
		for _, r := range <-out {
			if r.g.Wait > maxW {
				maxW = r.g.Wait
			}
			for i := int64(0); i < r.g.N; i++ {
				dues = append(dues, float64(r.at)+float64(r.g.Wait.Nanoseconds())/1e3+float64(i)*1e3)
			}
		}
	}
	if maxW > b.MaxQueue {
		t.Fatalf("a grant waits %v, MaxQueue %v", maxW, b.MaxQueue)
	}
	sort.Float64s(dues)
	for i := 1; i < len(dues); i++ {
		// Waits are rounded up to the ns: allow that much.
		if gap := dues[i] - dues[i-1]; gap < 1e3-1e-3 {
			t.Fatalf("permits %d and %d due %.3fµs apart, T = 1000µs", i-1, i, gap)
		}
	}
	t.Logf("%d permits paced over %.1fms", len(dues), (dues[len(dues)-1]-dues[0])/1e3)
	if len(dues) < 10 {
		t.Fatalf("only %d permits granted", len(dues))
	}
}
