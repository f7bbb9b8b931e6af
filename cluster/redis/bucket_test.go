package sluiceredis

import (
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"golang.org/x/time/rate"
)

// The rate is chosen so that refills never land a level on an integer
// except after whole seconds: refill(Δ) = 173·Δ/10^6 tokens for Δ in µs,
// whose fraction is at least 10^-6 away from an integer unless Δ is a
// multiple of 10^6. The script and x/time/rate compute the level with
// different roundings (~10^-12), so a decision could only differ at an
// integer level; this rate keeps every level far from one, except a full
// bucket, which both cap to exactly Burst.
const (
	tbLimit = 173
	tbBurst = 7
)

func tbBudget(key string) cluster.Budget {
	return cluster.Budget{Key: key, Algorithm: cluster.TokenBucket, Limit: tbLimit, Interval: time.Second, Burst: tbBurst}
}

// TestTokenBucketMatchesXRate replays one arrival sequence on the Store and
// on golang.org/x/time/rate, each arrival at the Redis time the script
// used: every decision and every level must agree, and a refusal's
// RetryAfter must be x/time/rate's reservation delay for the same request.
func TestTokenBucketMatchesXRate(t *testing.T) {
	for _, partial := range []bool{false, true} {
		name := "all-or-nothing"
		if partial {
			name = "partial"
		}
		t.Run(name, func(t *testing.T) {
			s, rc, _ := standalone(t)
			clk := watch(s)
			b := tbBudget("tb")
			key, _ := s.budgetKeys("tb", algBucket)
			ref := rate.NewLimiter(tbLimit, tbBurst)
			rng := rand.New(rand.NewSource(1))
			var granted, refused, partly int
			for i := 0; i < 200; i++ {
				if rng.Intn(3) == 0 {
					// Spacing only shapes the arrivals; what is checked
					// depends on the times Redis reports, not on this.
					time.Sleep(time.Duration(rng.Intn(15)) * time.Millisecond)
				}
				n := int64(1 + rng.Intn(4))
				g := take1(t, s, cluster.Request{Budget: b, N: n, Partial: partial})
				at := time.UnixMicro(clk.now())
				level := ref.TokensAt(at)
				if frac := level - math.Floor(level); level != tbBurst && (frac < 1e-9 || frac > 1-1e-9) {
					t.Fatalf("arrival %d: reference level %.12f too close to an integer for an exact comparison", i, level)
				}
				want := int64(0)
				switch {
				case ref.AllowN(at, int(n)):
					want = n
				case partial && level >= 1:
					want = int64(math.Floor(level))
					if !ref.AllowN(at, int(want)) {
						t.Fatalf("arrival %d: reference refused %d of level %.6f", i, want, level)
					}
				}
				if g.N != want {
					t.Fatalf("arrival %d at %d: asked %d, granted %d, x/time/rate %d (level %.6f)", i, at.UnixMicro(), n, g.N, want, level)
				}
				if got, ref := hfloat(t, rc, key, "t"), ref.TokensAt(at); math.Abs(got-ref) > 1e-9 {
					t.Fatalf("arrival %d: stored level %.12f, x/time/rate %.12f", i, got, ref)
				}
				if got := int64(hfloat(t, rc, key, "ts")); got != at.UnixMicro() {
					t.Fatalf("arrival %d: stored time %d, script's %d", i, got, at.UnixMicro())
				}
				switch {
				case g.N == n:
					granted++
					if g.RetryAfter != 0 || g.Wait != 0 {
						t.Fatalf("arrival %d: full grant with %+v", i, g)
					}
				default:
					if g.N > 0 {
						partly++
					} else {
						refused++
					}
					// x/time/rate's reservation delay for the request:
					// (n - level)/limit seconds.
					wantDelay := time.Duration((float64(n) - level) / tbLimit * float64(time.Second))
					if !near(g.RetryAfter, wantDelay) {
						t.Fatalf("arrival %d: RetryAfter %v, reservation delay %v", i, g.RetryAfter, wantDelay)
					}
				}
			}
			t.Logf("granted %d, partly %d, refused %d", granted, partly, refused)
			if granted == 0 || refused+partly == 0 || (partial && partly == 0) {
				t.Fatalf("sequence did not exercise grants and refusals: %d/%d/%d", granted, partly, refused)
			}
		})
	}
}

// TestTokenBucketBurstAndRefill: a fresh bucket holds Burst; taking it all
// leaves a level that grows by elapsed·rate on Redis's clock; a request
// above Burst is never granted whole and says it cannot tell when.
func TestTokenBucketBurstAndRefill(t *testing.T) {
	s, rc, _ := standalone(t)
	clk := watch(s)
	b := cluster.Budget{Key: "burst", Algorithm: cluster.TokenBucket, Limit: 10, Interval: 100 * time.Millisecond, Burst: 25}
	key, _ := s.budgetKeys("burst", algBucket)

	if g := take1(t, s, cluster.Request{Budget: b, N: 26}); g.N != 0 || g.RetryAfter != 0 {
		t.Fatalf("N above burst: %+v, want nothing and no RetryAfter", g)
	}
	if g := take1(t, s, cluster.Request{Budget: b, N: 25}); g.N != 25 {
		t.Fatalf("fresh bucket: granted %d of burst 25", g.N)
	}
	t0 := clk.now()
	if lv := hfloat(t, rc, key, "t"); lv != 0 {
		t.Fatalf("level after taking the burst: %v", lv)
	}
	// Partial: whatever whole tokens have refilled since t0.
	g := take1(t, s, cluster.Request{Budget: b, N: 25, Partial: true})
	t1 := clk.now()
	level := math.Min(25, float64(t1-t0)*10/100e3)
	if want := int64(math.Floor(level)); g.N != want {
		t.Fatalf("partial after %dµs: granted %d, want floor(%.4f)", t1-t0, g.N, level)
	}
	left := level - float64(g.N)
	if got := hfloat(t, rc, key, "t"); math.Abs(got-left) > 1e-9 {
		t.Fatalf("level %.9f, want %.9f", got, left)
	}
	// The rest of the 25 comes when the level reaches 25-g: (25-g-left)/rate.
	want := us((25 - float64(g.N) - left) / (10 / 100e3))
	if !near(g.RetryAfter, want) {
		t.Fatalf("RetryAfter %v, want %v", g.RetryAfter, want)
	}
}

// TestTokenBucketNeverOverGrants: four goroutines, each its own Store and
// connection like separate instances, take from one budget in batches
// (with repeated budgets and partial requests) as fast as they can. Total
// granted never exceeds Burst + rate·(last - first), both instants read
// from the scripts' Redis clock.
func TestTokenBucketNeverOverGrants(t *testing.T) {
	_, _, srv := standalone(t)
	b := cluster.Budget{Key: "shared", Algorithm: cluster.TokenBucket, Limit: 500, Interval: time.Second, Burst: 50}
	other := cluster.Budget{Key: "other", Algorithm: cluster.TokenBucket, Limit: 100, Interval: time.Second}
	res := runShared(t, 4, 150, func() *Store { return New(srv.Client(t)) }, []cluster.Request{
		{Budget: b, N: 3},
		{Budget: other, N: 1},
		{Budget: b, N: 5, Partial: true},
		{Budget: b, N: 1},
	}, "shared")
	span := float64(res.last-res.first) / 1e6
	bound := 50 + 500*span
	t.Logf("granted %d over %.3fs on Redis's clock (bound %.1f)", res.total, span, bound)
	if float64(res.total) > bound+1e-6 {
		t.Fatalf("over-granted: %d > %.3f", res.total, bound)
	}
	if res.total < 50-5 {
		t.Fatalf("granted %d, less than the burst could give", res.total)
	}
}
