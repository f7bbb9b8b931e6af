package sluiceredis

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice/cluster"
)

// checkWindow fails t if any half-open window [t, t+ivl) of the grant log
// holds more than limit permits, and cross-checks the log the store keeps:
// its entries still in the window must be exactly the grants the run saw
// there.
func checkWindow(t *testing.T, rc redis.UniversalClient, s *Store, key string, res sharedResult, limit int64, ivl time.Duration) {
	t.Helper()
	worst, at := maxInWindow(res.events, ivl.Microseconds())
	t.Logf("granted %d of %d asked in %d grants over %dµs; busiest window holds %d (limit %d)",
		res.total, res.asked, len(res.events), res.last-res.first, worst, limit)
	if worst > limit {
		t.Fatalf("window starting at %dµs holds %d permits, limit %d", at, worst, limit)
	}
	if res.total <= limit {
		t.Fatalf("run granted %d, not more than one window's limit %d: nothing was tested", res.total, limit)
	}
	// The store's log: what it holds must be what the run saw granted
	// after now - ivl.
	_, logKey := s.budgetKeys(escapeTag(key), algWindow)
	now := redisTime(t, rc)
	zs, err := rc.ZRangeWithScores(ctxT(t), logKey, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var inLog, seen int64
	for _, z := range zs {
		if int64(z.Score) > now-ivl.Microseconds() {
			m := z.Member.(string)
			c, _ := strconv.ParseInt(m[strings.IndexByte(m, ':')+1:], 10, 64)
			inLog += c
		}
	}
	for _, e := range res.events {
		if e.at > now-ivl.Microseconds() {
			seen += e.n
		}
	}
	if inLog != seen {
		t.Fatalf("log holds %d permits in the last window, run saw %d granted", inLog, seen)
	}
}

// TestSlidingWindowNeverExceedsLimit: four instances take from one window
// budget as fast as they can, with partial and repeated requests; no window
// of length Interval, anywhere in the run, holds more than Limit permits
// by the scripts' own clock.
func TestSlidingWindowNeverExceedsLimit(t *testing.T) {
	s, rc, srv := standalone(t)
	b := cluster.Budget{Key: "sw", Algorithm: cluster.SlidingWindow, Limit: 25, Interval: 20 * time.Millisecond}
	res := runShared(t, 4, 200, func() *Store { return New(srv.Client(t)) }, []cluster.Request{
		{Budget: b, N: 2},
		{Budget: b, N: 3, Partial: true},
		{Budget: cluster.Budget{Key: "x", Algorithm: cluster.TokenBucket, Limit: 1, Interval: time.Second}, N: 1},
		{Budget: b, N: 1},
	}, "sw")
	checkWindow(t, rc, s, "sw", res, 25, b.Interval)
}

// TestSlidingWindowRetryAfter: a refusal's RetryAfter is when enough of the
// oldest grants leave the window, exactly, from the log.
func TestSlidingWindowRetryAfter(t *testing.T) {
	s, _, _ := standalone(t)
	clk := watch(s)
	b := cluster.Budget{Key: "ra", Algorithm: cluster.SlidingWindow, Limit: 5, Interval: time.Hour}
	if g := take1(t, s, cluster.Request{Budget: b, N: 2}); g.N != 2 {
		t.Fatalf("first: %+v", g)
	}
	t1 := clk.now()
	if g := take1(t, s, cluster.Request{Budget: b, N: 3}); g.N != 3 {
		t.Fatalf("second: %+v", g)
	}
	t2 := clk.now()

	// One more permit: it fits when the first grant (2 permits) leaves.
	g := take1(t, s, cluster.Request{Budget: b, N: 1})
	now := clk.now()
	if want := us(float64(t1 + time.Hour.Microseconds() - now)); g.N != 0 || !near(g.RetryAfter, want) {
		t.Fatalf("refused 1: %+v, want RetryAfter %v", g, want)
	}
	// Three: the first grant frees only two, so they wait for the second.
	g = take1(t, s, cluster.Request{Budget: b, N: 3})
	now = clk.now()
	if want := us(float64(t2 + time.Hour.Microseconds() - now)); g.N != 0 || !near(g.RetryAfter, want) {
		t.Fatalf("refused 3: %+v, want RetryAfter %v", g, want)
	}
	// More than Limit can never be granted whole: no estimate.
	if g := take1(t, s, cluster.Request{Budget: b, N: 6}); g.N != 0 || g.RetryAfter != 0 {
		t.Fatalf("N above limit: %+v", g)
	}
	// Partial with nothing available: nothing, and the same estimate as
	// the all-or-nothing request.
	g = take1(t, s, cluster.Request{Budget: b, N: 3, Partial: true})
	now = clk.now()
	if want := us(float64(t2 + time.Hour.Microseconds() - now)); g.N != 0 || !near(g.RetryAfter, want) {
		t.Fatalf("partial 3: %+v, want RetryAfter %v", g, want)
	}
}

// TestSlidingWindowPartial: a partial request takes what the window has
// left, whole permits only, and a fractional Limit rounds down.
func TestSlidingWindowPartial(t *testing.T) {
	s, _, _ := standalone(t)
	b := cluster.Budget{Key: "p", Algorithm: cluster.SlidingWindow, Limit: 7.5, Interval: time.Hour}
	if g := take1(t, s, cluster.Request{Budget: b, N: 5}); g.N != 5 {
		t.Fatalf("first: %+v", g)
	}
	if g := take1(t, s, cluster.Request{Budget: b, N: 5}); g.N != 0 {
		t.Fatalf("all-or-nothing 5 of 2.5 left: %+v", g)
	}
	if g := take1(t, s, cluster.Request{Budget: b, N: 5, Partial: true}); g.N != 2 || g.RetryAfter <= 0 {
		t.Fatalf("partial 5 of 2.5 left: %+v, want 2 and a RetryAfter", g)
	}
	if g := take1(t, s, cluster.Request{Budget: b, N: 1, Partial: true}); g.N != 0 {
		t.Fatalf("partial 1 of 0.5 left: %+v", g)
	}
}
