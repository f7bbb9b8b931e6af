package sluiceredis

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/sluicetest"
)

// TestInMemoryStoreDecidesAsTheScripts sends the same random batches to
// this Store and to sluicetest's store in memory, which tests use in its
// place, and requires the same grants. Every request of one Take is decided
// at one instant of Redis's clock and each round's keys are fresh, so the
// two see the same times; waits and retries may differ by the
// microsecond Redis counts in.
func TestInMemoryStoreDecidesAsTheScripts(t *testing.T) {
	s, _, _ := standalone(t)
	rng := rand.New(rand.NewPCG(21, 0))
	for round := 0; round < 40; round++ {
		mem, _ := sluicetest.NewStore(sluicetest.NewManualClock(int64(time.Hour)))
		var budgets []cluster.Budget
		for k := 0; k < 6; k++ {
			budgets = append(budgets, cluster.Budget{
				Key:       fmt.Sprintf("r%d-k%d", round, k),
				Algorithm: []cluster.Algorithm{cluster.TokenBucket, cluster.SlidingWindow, cluster.Pacing, cluster.Calendar}[k%4],
				Limit:     []float64{4, 5, 10}[rng.IntN(3)],
				Interval:  time.Second,
				Burst:     []float64{0, 2, 7}[rng.IntN(3)],
				MaxQueue:  []time.Duration{0, 250 * time.Millisecond, time.Second}[rng.IntN(3)],
			})
		}
		reqs := make([]cluster.Request, 1+rng.IntN(30))
		for i := range reqs {
			reqs[i] = cluster.Request{Budget: budgets[rng.IntN(len(budgets))], N: 1 + rng.Int64N(6), Partial: rng.IntN(2) == 0}
		}
		want, got := make([]cluster.Grant, len(reqs)), make([]cluster.Grant, len(reqs))
		if err := s.Take(ctxT(t), reqs, want); err != nil {
			t.Fatal(err)
		}
		if err := mem.Take(ctxT(t), reqs, got); err != nil {
			t.Fatal(err)
		}
		near := func(a, b time.Duration) bool { return a-b <= time.Microsecond && b-a <= time.Microsecond }
		for i := range reqs {
			if got[i].N != want[i].N || !near(got[i].Wait, want[i].Wait) || !near(got[i].RetryAfter, want[i].RetryAfter) {
				t.Fatalf("round %d request %d %+v: in memory %+v, Redis %+v", round, i, reqs[i], got[i], want[i])
			}
		}
	}
}
