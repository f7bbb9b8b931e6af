package sluicetest_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/fleettest"
	"github.com/sluice-go/sluice/internal/conformance"
	"github.com/sluice-go/sluice/sluicetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ctx = context.Background()

func take(t *testing.T, s cluster.Store, b cluster.Budget, n int64, partial bool) cluster.Grant {
	t.Helper()
	g := make([]cluster.Grant, 1)
	if err := s.Take(ctx, []cluster.Request{{Budget: b, N: n, Partial: partial}}, g); err != nil {
		t.Fatal(err)
	}
	return g[0]
}

// TestConformanceRuleStore runs the rule stores' shared suite on the store
// in memory: versions, conflicts, validation, history, watch, reports,
// audit (the watch returns when its context ends: goleak checks).
func TestConformanceRuleStore(t *testing.T) {
	fleettest.RuleStore(t, func(t *testing.T) cluster.RuleStore {
		s, _ := sluicetest.NewRuleStore(nil)
		return s
	})
}

// TestRuleStoreClockAndFail: dates and report expiry follow the clock; a
// failing store refuses every call and keeps what it had.
func TestRuleStoreClockAndFail(t *testing.T) {
	clk := sluicetest.NewManualClock(int64(time.Hour))
	s, fail := sluicetest.NewRuleStore(clk)
	v, err := s.Save(ctx, "shop", 0, cluster.RuleVersion{Doc: []byte("flow: []\n"), Author: "ann"})
	if err != nil || !v.At.Equal(time.Unix(3600, 0)) {
		t.Fatalf("Save = %+v, %v; want dated 3600 s", v, err)
	}
	if err := s.Report(ctx, "shop", cluster.RuleReport{Instance: "a", Version: 1}, time.Second); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second - 1)
	if reps, _ := s.Reports(ctx, "shop"); len(reps) != 1 {
		t.Fatalf("%d reports 1 ns before the ttl, want 1", len(reps))
	}
	clk.Advance(1)
	if reps, _ := s.Reports(ctx, "shop"); len(reps) != 0 {
		t.Fatalf("%d reports at the ttl, want 0", len(reps))
	}
	down := errors.New("down")
	fail(down)
	if _, err := s.Current(ctx, "shop"); !errors.Is(err, down) {
		t.Fatalf("Current while failing = %v", err)
	}
	if _, err := s.Save(ctx, "shop", 1, cluster.RuleVersion{Doc: []byte("flow: []\n"), Author: "ann"}); !errors.Is(err, down) {
		t.Fatalf("Save while failing = %v", err)
	}
	fail(nil)
	if cur, err := s.Current(ctx, "shop"); err != nil || cur.Version != 1 {
		t.Fatalf("Current after recovery = %+v, %v; want version 1", cur, err)
	}
}

// refBucket is the token bucket by definition, in integers: level holds
// tokens times interval, refilled by limit a nanosecond, at most
// burst*interval; it starts full.
type refBucket struct {
	limit, burst, ivl, level, at int64
}

func (r *refBucket) take(now, n int64, partial bool) (g int64, retry time.Duration) {
	r.level = min(r.level+(now-r.at)*r.limit, r.burst*r.ivl)
	r.at = now
	switch {
	case r.level >= n*r.ivl:
		g = n
	case partial && r.level >= r.ivl:
		g = r.level / r.ivl
	}
	r.level -= g * r.ivl
	if rest := n - g; rest > 0 && rest <= r.burst {
		retry = time.Duration((rest*r.ivl - r.level + r.limit - 1) / r.limit)
	}
	return g, retry
}

// TestConformanceStoreTokenBucket drives a budget on seeded random arrival
// times (bursts at one instant included) and compares every grant and
// RetryAfter with the integer model. Limit 4 per 2^30 ns keeps the store's
// floating-point level exact, so boundaries are compared exactly.
func TestConformanceStoreTokenBucket(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		clk := sluicetest.NewManualClock(0)
		s, _ := sluicetest.NewStore(clk)
		b := cluster.Budget{Key: "k", Algorithm: cluster.TokenBucket, Limit: 4, Interval: 1 << 30, Burst: 6}
		ref := &refBucket{limit: 4, burst: 6, ivl: 1 << 30, level: 6 << 30}
		rng := rand.New(rand.NewPCG(seed, 0))
		for i := 0; i < conformance.Steps(2000); i++ {
			if rng.IntN(3) > 0 {
				clk.Advance(time.Duration(rng.Int64N(1 << 29)))
			}
			n, partial := 1+rng.Int64N(7), rng.IntN(2) == 0
			g := take(t, s, b, n, partial)
			wg, wr := ref.take(clk.Nanotime(), n, partial)
			if g.N != wg || g.RetryAfter != wr || g.Wait != 0 {
				t.Fatalf("seed %d step %d at %v: take %d (partial %v) = %+v, want %d retry %v", seed, i, time.Duration(clk.Nanotime()), n, partial, g, wg, wr)
			}
		}
	}
}

// refWindow is the sliding window by definition: the grants made in the
// last interval, each with its time.
type refWindow struct {
	limit int64
	ivl   int64
	at    []int64 // one entry a permit
}

func (r *refWindow) take(now, n int64, partial bool) (g int64, retry time.Duration) {
	in := r.at[:0]
	for _, a := range r.at {
		if a > now-r.ivl {
			in = append(in, a)
		}
	}
	r.at = in
	avail := r.limit - int64(len(r.at))
	switch {
	case n <= avail:
		g = n
	case partial && avail >= 1:
		g = avail
	}
	for k := int64(0); k < g; k++ {
		r.at = append(r.at, now)
	}
	if rest := n - g; rest > 0 && rest <= r.limit {
		// The rest fits once the oldest permits beyond limit-rest leave.
		need := int64(len(r.at)) - (r.limit - rest)
		retry = time.Duration(r.at[need-1] + r.ivl - now)
	}
	return g, retry
}

func TestConformanceStoreSlidingWindow(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		clk := sluicetest.NewManualClock(0)
		s, _ := sluicetest.NewStore(clk)
		b := cluster.Budget{Key: "k", Algorithm: cluster.SlidingWindow, Limit: 5, Interval: time.Second}
		ref := &refWindow{limit: 5, ivl: int64(time.Second)}
		rng := rand.New(rand.NewPCG(seed, 1))
		for i := 0; i < conformance.Steps(2000); i++ {
			if rng.IntN(3) > 0 {
				// Steps of whole 100 ms now and then, so that grants leave
				// the window exactly at the instant of another arrival.
				if rng.IntN(2) == 0 {
					clk.Advance(100 * time.Millisecond)
				} else {
					clk.Advance(time.Duration(rng.Int64N(int64(400 * time.Millisecond))))
				}
			}
			n, partial := 1+rng.Int64N(6), rng.IntN(2) == 0
			g := take(t, s, b, n, partial)
			wg, wr := ref.take(clk.Nanotime(), n, partial)
			if g.N != wg || g.RetryAfter != wr {
				t.Fatalf("seed %d step %d at %v: take %d (partial %v) = %+v, want %d retry %v", seed, i, time.Duration(clk.Nanotime()), n, partial, g, wg, wr)
			}
		}
	}
}

// TestStorePacing: permits 100 ms apart, a wait of at most MaxQueue, and
// Give unscheduling the latest permits, never into the past.
func TestStorePacing(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	s, _ := sluicetest.NewStore(clk)
	b := cluster.Budget{Key: "p", Algorithm: cluster.Pacing, Limit: 10, Interval: time.Second, MaxQueue: 250 * time.Millisecond}
	ms := time.Millisecond
	for i, want := range []cluster.Grant{
		{N: 1}, {N: 1, Wait: 100 * ms}, {N: 1, Wait: 200 * ms}, {N: 0, RetryAfter: 50 * ms},
	} {
		if g := take(t, s, b, 1, false); g != want {
			t.Fatalf("take %d = %+v, want %+v", i, g, want)
		}
	}
	if err := s.Give(ctx, b, 1); err != nil {
		t.Fatal(err)
	}
	if g := take(t, s, b, 1, false); g != (cluster.Grant{N: 1, Wait: 200 * ms}) {
		t.Fatalf("after Give(1): %+v, want the slot at 200 ms again", g)
	}
	clk.Advance(time.Second)
	if err := s.Give(ctx, b, 5); err != nil {
		t.Fatal(err)
	}
	if g := take(t, s, b, 2, false); g != (cluster.Grant{N: 2}) {
		t.Fatalf("idle budget: %+v, want 2 at once", g)
	}
}

// TestStoreGive: a bucket gets permits back up to Burst (a full one
// nothing); a window forgets its most recent permits.
func TestStoreGive(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	s, _ := sluicetest.NewStore(clk)
	tb := cluster.Budget{Key: "b", Algorithm: cluster.TokenBucket, Limit: 10, Interval: time.Second, Burst: 3}
	if err := s.Give(ctx, tb, 5); err != nil {
		t.Fatal(err)
	}
	if g := take(t, s, tb, 5, true); g.N != 3 {
		t.Fatalf("a full bucket given 5: took %d, want the burst 3", g.N)
	}
	if err := s.Give(ctx, tb, 9); err != nil {
		t.Fatal(err)
	}
	if g := take(t, s, tb, 5, true); g.N != 3 {
		t.Fatalf("an empty bucket given 9: took %d, want the burst 3", g.N)
	}
	w := cluster.Budget{Key: "w", Algorithm: cluster.SlidingWindow, Limit: 4, Interval: time.Second}
	take(t, s, w, 2, false)
	clk.Advance(500 * time.Millisecond)
	take(t, s, w, 2, false)
	if err := s.Give(ctx, w, 3); err != nil { // the 2 of 500 ms and 1 of 0 ms
		t.Fatal(err)
	}
	clk.Advance(500 * time.Millisecond) // the permit left at 0 leaves
	if g := take(t, s, w, 5, true); g.N != 4 {
		t.Fatalf("window after Give(3) and a second: took %d, want 4", g.N)
	}
}

// TestStoreMembersAndFail: members expire after their ttl; a failing store
// refuses every call, keeps its budgets, and answers again after fail(nil).
func TestStoreMembersAndFail(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	s, fail := sluicetest.NewStore(clk)
	for i, id := range []string{"b", "a"} {
		clk.Advance(time.Duration(i) * 500 * time.Millisecond)
		if _, err := s.Beat(ctx, cluster.Member{ID: id, App: "shop"}, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if ms, err := s.Members(ctx, "shop"); err != nil || len(ms) != 2 || ms[0].ID != "a" {
		t.Fatalf("Members = %+v, %v; want a, b", ms, err)
	}
	clk.Advance(500 * time.Millisecond) // b's ttl ends
	if n, err := s.Beat(ctx, cluster.Member{ID: "a", App: "shop"}, time.Second); err != nil || n != 1 {
		t.Fatalf("Beat = %d, %v; want 1 live", n, err)
	}

	b := cluster.Budget{Key: "k", Algorithm: cluster.SlidingWindow, Limit: 3, Interval: time.Hour}
	take(t, s, b, 2, false)
	down := errors.New("down")
	fail(down)
	g := make([]cluster.Grant, 1)
	if err := s.Take(ctx, []cluster.Request{{Budget: b, N: 1}}, g); !errors.Is(err, down) {
		t.Fatalf("Take while failing = %v", err)
	}
	if _, err := s.Members(ctx, "shop"); !errors.Is(err, down) {
		t.Fatalf("Members while failing = %v", err)
	}
	fail(nil)
	if g := take(t, s, b, 2, true); g.N != 1 {
		t.Fatalf("after recovery took %d, want the 1 left", g.N)
	}
	if err := s.Take(ctx, []cluster.Request{{Budget: cluster.Budget{Key: "x", Algorithm: cluster.TokenBucket, Interval: time.Second}, N: 1}}, g); err == nil {
		t.Fatal("a budget without a limit was accepted")
	}
}
