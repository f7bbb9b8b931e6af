package lease

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/sluicetest"
)

// TestFleet runs a fleet of five instances, each a Manager with a lease on
// one budget of one Store, through 6 s of skewed, changing demand on a
// manual clock (overload, light load, idle), and checks the accounting at
// every millisecond:
//
//   - conservation: every permit the Store granted is admitted, held in a
//     lease, given back, or dropped; so the fleet never admits more than
//     the Store granted, and what it did not admit (the under-admission)
//     is what the leases hold plus what went back;
//   - held <= the sum of lease sizes: at most cap + cap/2 per instance
//     (the current lease down to its low-water mark plus a parked one);
//   - the algorithm's bound, loosened only by what the leases held when a
//     window began: a window of Interval admits at most Limit + H(start)
//     (sliding window), and any span D at most Burst + D·rate + H(start)
//     (token bucket).
func TestFleet(t *testing.T) {
	for _, b := range []cluster.Budget{bucket("fleet", 1000), window("fleet", 1000)} {
		t.Run(b.Algorithm.String(), func(t *testing.T) {
			clk := sluicetest.NewManualClock(0)
			st := newMemStore(clk)
			const n = 5
			var ms []*Manager
			var ls []*Limiter
			for i := 0; i < n; i++ {
				m, err := New(Config{Store: st, Clock: clk})
				if err != nil {
					t.Fatal(err)
				}
				m.SetLive(n)
				l, err := m.NewLimiter(Spec{Budget: b})
				if err != nil {
					t.Fatal(err)
				}
				ms = append(ms, m)
				ls = append(ls, l)
			}
			capN := int64(b.Limit) / (2 * n)
			rng := rand.New(rand.NewPCG(3, 5))
			const steps = 6000 // ms
			var admitted, dropped int64
			perMs := make([]int64, steps)
			heldAt := make([]int64, steps)
			for step := 0; step < steps; step++ {
				clk.Advance(time.Millisecond)
				var held int64
				for _, l := range ls {
					held += l.held()
				}
				heldAt[step] = held
				if held > n*(capN+capN/2) {
					t.Fatalf("at %v the fleet holds %d, over %d", clk.Elapsed(), held, n*(capN+capN/2))
				}
				phase := step / 1000 % 3 // overload, light, idle
				for i, l := range ls {
					var demand int
					switch {
					case phase == 0 && i == 0:
						demand = rng.IntN(6) // 2.5/ms on one instance
					case phase == 0:
						demand = rng.IntN(2)
					case phase == 1:
						demand = rng.IntN(100) / 80 // 0.2/ms each
					}
					for d := 0; d < demand; d++ {
						r := l.acq(bg, 1)
						if r.Fallback() {
							t.Fatalf("%+v", r)
						}
						if r.Admitted {
							perMs[step]++
						}
					}
				}
				admitted += perMs[step]
				for _, m := range ms {
					m.waitIdle()
				}
				held = 0
				dropped = 0
				for i, l := range ls {
					held += l.held()
					dropped += ms[i].Stats().Dropped
				}
				_, granted, given := st.counts(b.Key)
				if granted != admitted+held+given+dropped {
					t.Fatalf("at %v: granted %d != admitted %d + held %d + given %d + dropped %d",
						clk.Elapsed(), granted, admitted, held, given, dropped)
				}
			}
			// The algorithm's bound, loosened by what was held.
			limit := int64(b.Limit)
			for s := 0; s < steps; s++ {
				if b.Algorithm == cluster.SlidingWindow {
					var in int64
					for j := s; j < min(s+1000, steps); j++ {
						in += perMs[j]
					}
					if in > limit+heldAt[s] {
						t.Fatalf("%d admitted in the second from step %d, over %d + %d held", in, s, limit, heldAt[s])
					}
					continue
				}
				for _, d := range []int{1, 10, 100, 1000} {
					var in int64
					for j := s; j < min(s+d, steps); j++ {
						in += perMs[j]
					}
					// Admissions at steps s..s+d-1 span d-1 ms.
					if bound := limit + int64(d-1) + heldAt[s]; in > bound {
						t.Fatalf("%d admitted in %d ms from step %d, over %d", in, d, s, bound)
					}
				}
			}
			for _, m := range ms {
				if err := m.Close(); err != nil {
					t.Fatal(err)
				}
			}
			dropped = 0
			for _, m := range ms {
				dropped += m.Stats().Dropped
			}
			_, granted, given := st.counts(b.Key)
			if granted != admitted+given+dropped {
				t.Fatalf("after Close: granted %d != admitted %d + given %d + dropped %d", granted, admitted, given, dropped)
			}
			// Under overload the fleet got most of the budget: 1000/s over
			// two overloaded seconds plus the first burst.
			var refills int64
			for _, l := range ls {
				refills += l.Stats().Refills
			}
			t.Logf("granted %d, admitted %d, given back %d, dropped %d; refills %.1f per second per instance",
				granted, admitted, given, dropped, float64(refills)/(steps/1000.0)/n)
			if admitted < 2500 {
				t.Fatalf("admitted only %d", admitted)
			}
		})
	}
}
