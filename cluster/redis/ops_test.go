package sluiceredis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice/cluster"
)

// TestBatchDecidesInOrder: requests for one budget in one batch are decided
// in order, each seeing the ones before it, mixed with other algorithms.
func TestBatchDecidesInOrder(t *testing.T) {
	s, _, _ := standalone(t)
	tb := cluster.Budget{Key: "x", Algorithm: cluster.TokenBucket, Limit: 5, Interval: time.Hour}
	sw := cluster.Budget{Key: "y", Algorithm: cluster.SlidingWindow, Limit: 3, Interval: time.Hour}
	pc := cluster.Budget{Key: "z", Algorithm: cluster.Pacing, Limit: 1, Interval: time.Hour}
	reqs := []cluster.Request{
		{Budget: tb, N: 4},
		{Budget: sw, N: 3},
		{Budget: tb, N: 4, Partial: true},
		{Budget: pc, N: 1},
		{Budget: sw, N: 1},
		{Budget: tb, N: 1},
		{Budget: pc, N: 1},
	}
	g := make([]cluster.Grant, len(reqs))
	if err := s.Take(ctxT(t), reqs, g); err != nil {
		t.Fatal(err)
	}
	want := []int64{4, 3, 1, 1, 0, 0, 0}
	for i := range want {
		if g[i].N != want[i] {
			t.Fatalf("request %d: granted %d, want %d (all: %+v)", i, g[i].N, want[i], g)
		}
	}
	if g[6].RetryAfter < 59*time.Minute {
		t.Fatalf("second pacing permit of 1/h: RetryAfter %v, want about 1h", g[6].RetryAfter)
	}
}

// TestValidation: an invalid request fails the whole call before anything
// reaches Redis, with the package's prefix.
func TestValidation(t *testing.T) {
	s, rc, _ := standalone(t)
	ok := cluster.Budget{Key: "k", Algorithm: cluster.TokenBucket, Limit: 1, Interval: time.Second}
	bad := map[string]cluster.Request{
		"empty key":         {Budget: cluster.Budget{Algorithm: cluster.TokenBucket, Limit: 1, Interval: time.Second}, N: 1},
		"algorithm":         {Budget: cluster.Budget{Key: "k", Algorithm: 9, Limit: 1, Interval: time.Second}, N: 1},
		"zero limit":        {Budget: cluster.Budget{Key: "k", Algorithm: cluster.TokenBucket, Interval: time.Second}, N: 1},
		"NaN limit":         {Budget: cluster.Budget{Key: "k", Algorithm: cluster.TokenBucket, Limit: math.NaN(), Interval: time.Second}, N: 1},
		"infinite limit":    {Budget: cluster.Budget{Key: "k", Algorithm: cluster.TokenBucket, Limit: math.Inf(1), Interval: time.Second}, N: 1},
		"interval":          {Budget: cluster.Budget{Key: "k", Algorithm: cluster.TokenBucket, Limit: 1, Interval: time.Nanosecond}, N: 1},
		"negative burst":    {Budget: cluster.Budget{Key: "k", Algorithm: cluster.TokenBucket, Limit: 1, Interval: time.Second, Burst: -1}, N: 1},
		"negative maxqueue": {Budget: cluster.Budget{Key: "k", Algorithm: cluster.Pacing, Limit: 1, Interval: time.Second, MaxQueue: -1}, N: 1},
		"zero N":            {Budget: ok, N: 0},
		"huge N":            {Budget: ok, N: 1<<53 + 1},
	}
	for name, r := range bad {
		g := make([]cluster.Grant, 2)
		err := s.Take(ctxT(t), []cluster.Request{{Budget: ok, N: 1}, r}, g)
		if err == nil || !strings.HasPrefix(err.Error(), "sluiceredis: ") {
			t.Errorf("%s: error %v", name, err)
		}
	}
	if err := s.Take(ctxT(t), make([]cluster.Request, 2), make([]cluster.Grant, 1)); err == nil {
		t.Error("grants shorter than requests: no error")
	}
	if err := s.Take(ctxT(t), nil, nil); err != nil {
		t.Errorf("empty batch: %v", err)
	}
	if err := s.Give(ctxT(t), cluster.Budget{Key: "k"}, 1); err == nil {
		t.Error("Give with an invalid budget: no error")
	}
	if n := rc.DBSize(ctxT(t)).Val(); n != 0 {
		t.Fatalf("invalid calls wrote %d keys", n)
	}
}

// TestTTLOnEveryKey: every key the Store writes expires, after a span
// derived from its budget's Interval (or the heartbeat's ttl).
func TestTTLOnEveryKey(t *testing.T) {
	s, rc, _ := standalone(t, WithPrefix("ttl"))
	const ivl = 10 * time.Second
	tb := cluster.Budget{Key: "tb", Algorithm: cluster.TokenBucket, Limit: 10, Interval: ivl}
	sw := cluster.Budget{Key: "sw", Algorithm: cluster.SlidingWindow, Limit: 10, Interval: ivl}
	pc := cluster.Budget{Key: "pc", Algorithm: cluster.Pacing, Limit: 10, Interval: ivl, MaxQueue: time.Minute}
	g := make([]cluster.Grant, 3)
	if err := s.Take(ctxT(t), []cluster.Request{{Budget: tb, N: 10}, {Budget: sw, N: 3}, {Budget: pc, N: 5}}, g); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Beat(ctxT(t), cluster.Member{ID: "i1", App: "app"}, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	tbKey, _ := s.budgetKeys("tb", algBucket)
	swKey, swLog := s.budgetKeys("sw", algWindow)
	pcKey, _ := s.budgetKeys("pc", algPacing)
	base := s.appBase("app")
	// Expected TTLs: an empty bucket refills in 1 interval, plus 1; a
	// window's keys live 2 intervals; a TAT 5 permits ahead (5s) plus 1
	// interval; heartbeat records, the index's epoch, and the index of
	// applications, their ttl.
	want := map[string]time.Duration{
		tbKey: 2 * ivl, swKey: 2 * ivl, swLog: 2 * ivl, pcKey: 5*time.Second + ivl,
		base + sufMembers: 15 * time.Second, base + sufMember + "i1": 15 * time.Second, s.appsKey(): 15 * time.Second,
		base + sufEpoch: 15 * time.Second,
	}
	keys, err := rc.Keys(ctxT(t), "ttl*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != len(want) {
		t.Fatalf("keys %v, want %d", keys, len(want))
	}
	for _, k := range keys {
		w, ok := want[k]
		if !ok {
			t.Fatalf("unexpected key %q", k)
		}
		ttl := rc.PTTL(ctxT(t), k).Val()
		// The TTL was set moments ago: just under the expected one (a
		// busy host may take a few seconds to get here).
		if ttl <= 0 || ttl > w || ttl < w-5*time.Second {
			t.Errorf("%s: PTTL %v, want just under %v", k, ttl, w)
		}
	}
}

// TestScriptFlushMidRun: SCRIPT FLUSH while instances take makes no Take
// fail: a single invocation falls back to EVAL, and so does each pipelined
// invocation answered NOSCRIPT.
func TestScriptFlushMidRun(t *testing.T) {
	t.Run("single invocation", func(t *testing.T) {
		_, rc, srv := standalone(t)
		flushDuringTakes(t, rc, func() *Store { return New(srv.Client(t)) })
	})
	t.Run("pipeline", func(t *testing.T) {
		// A Ring groups by budget, so a batch of several budgets is a
		// pipeline of invocations even on one server.
		_, rc, srv := standalone(t)
		flushDuringTakes(t, rc, func() *Store {
			r := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr()}, MaxRetries: -1})
			t.Cleanup(func() { _ = r.Close() })
			s := New(r)
			if s.group != groupBudget {
				t.Fatal("a Ring should group by budget")
			}
			return s
		})
	})
}

func flushDuringTakes(t *testing.T, flusher redis.UniversalClient, newStore func() *Store) {
	t.Helper()
	batch := make([]cluster.Request, 8)
	for i := range batch {
		batch[i] = cluster.Request{Budget: cluster.Budget{
			Key: string(rune('a' + i)), Algorithm: cluster.Algorithm(1 + i%3),
			Limit: 1000, Interval: time.Second, MaxQueue: time.Second,
		}, N: 1}
	}
	var (
		wg       sync.WaitGroup
		progress = make(chan struct{}, 1)
		failures atomic.Int64
		flushes  int
	)
	for w := 0; w < 4; w++ {
		s := newStore()
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := make([]cluster.Grant, len(batch))
			for r := 0; r < 150; r++ {
				// Batches alternate with lone requests of each
				// algorithm (the lone-request script for two of them).
				reqs := batch
				if r%2 == 1 {
					i := (r / 2) % 3
					reqs = batch[i : i+1]
				}
				if err := s.Take(ctxT(t), reqs, g[:len(reqs)]); err != nil {
					failures.Add(1)
					t.Errorf("take during SCRIPT FLUSH: %v", err)
					return
				}
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-progress:
			if err := flusher.ScriptFlush(ctxT(t)).Err(); err != nil {
				t.Fatal(err)
			}
			flushes++
		case <-done:
			running = false
		}
	}
	// One more flush, then a take that must reload.
	if err := flusher.ScriptFlush(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := newStore().Take(ctxT(t), batch, make([]cluster.Grant, len(batch))); err != nil {
		t.Fatalf("take after SCRIPT FLUSH: %v", err)
	}
	if err := newStore().Take(ctxT(t), batch[:1], make([]cluster.Grant, 1)); err != nil {
		t.Fatalf("lone take after SCRIPT FLUSH: %v", err)
	}
	evals := evalCalls(t, flusher)
	if evals == 0 {
		t.Fatal("no EVAL fallback recorded")
	}
	t.Logf("%d flushes during the run, %d EVAL fallbacks, %d failed takes", flushes, evals, failures.Load())
}

// evalCalls sums the EVAL calls every primary has served.
func evalCalls(t *testing.T, c redis.UniversalClient) int64 {
	t.Helper()
	var mu sync.Mutex
	var total int64
	count := func(ctx context.Context, c *redis.Client) error {
		stats, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(stats, "\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_eval:calls="); ok {
				n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				mu.Lock()
				total += n
				mu.Unlock()
			}
		}
		return nil
	}
	var err error
	switch c := c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctxT(t), count)
	case *redis.Client:
		err = count(ctxT(t), c)
	default:
		t.Fatalf("evalCalls: client %T", c)
	}
	if err != nil {
		t.Fatal(err)
	}
	return total
}

// TestRestartSamePort: while Redis is down a Take fails within its
// context's deadline (the caller falls back); once it is back, empty and
// without scripts, Takes succeed again on fresh budgets.
func TestRestartSamePort(t *testing.T) {
	s, _, srv := standalone(t)
	b := cluster.Budget{Key: "r", Algorithm: cluster.TokenBucket, Limit: 5, Interval: time.Hour}
	if g := take1(t, s, cluster.Request{Budget: b, N: 5}); g.N != 5 {
		t.Fatalf("before: %+v", g)
	}
	srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := s.Take(ctx, []cluster.Request{{Budget: b, N: 1}}, make([]cluster.Grant, 1))
	cancel()
	if err == nil || !strings.HasPrefix(err.Error(), "sluiceredis: ") {
		t.Fatalf("take with Redis down: %v", err)
	}
	srv.Restart()
	// The first calls may meet connections the kill broke; the Store does
	// not retry them, the caller does.
	var g cluster.Grant
	for try := 0; ; try++ {
		gs := make([]cluster.Grant, 1)
		err = s.Take(ctxT(t), []cluster.Request{{Budget: b, N: 5}}, gs)
		if err == nil {
			g = gs[0]
			break
		}
		if try == 20 {
			t.Fatalf("take after restart: %v", err)
		}
	}
	if g.N != 5 {
		t.Fatalf("after restart (state lost, bucket full): %+v", g)
	}
}

// TestContextEnds: a Take whose context has ended returns its error.
func TestContextEnds(t *testing.T) {
	s, _, _ := standalone(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Take(ctx, []cluster.Request{{Budget: cluster.Budget{Key: "c", Algorithm: cluster.TokenBucket, Limit: 1, Interval: time.Second}, N: 1}}, make([]cluster.Grant, 1))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("take with a cancelled context: %v", err)
	}
}

// TestBatchReadsAndWritesEachBudgetOnce: a batch of many requests for one
// budget (a strict rule's concurrent entries) is decided in order, as
// single requests at the same instant would be, and the script reads and
// writes the budget once: one HMGET, HSET and PEXPIRE for a token bucket,
// one log entry for a window's grants, one GET and SET for pacing.
func TestBatchReadsAndWritesEachBudgetOnce(t *testing.T) {
	s, rc, _ := standalone(t)
	tests := []struct {
		name   string
		budget cluster.Budget
		want   int64            // requests of one permit granted, of 15
		calls  map[string]int64 // commands the script sent
	}{
		{"token bucket", cluster.Budget{Key: "tb", Algorithm: cluster.TokenBucket, Limit: 10, Interval: time.Hour},
			10, map[string]int64{"hmget": 1, "hset": 1, "pexpire": 1}},
		{"sliding window", cluster.Budget{Key: "sw", Algorithm: cluster.SlidingWindow, Limit: 10, Interval: time.Hour},
			10, map[string]int64{"hmget": 1, "zadd": 1, "hset": 1}},
		// Permits 100 ms apart, waits up to 1 s: 0, 100, ..., 1,000 ms.
		{"pacing", cluster.Budget{Key: "pc", Algorithm: cluster.Pacing, Limit: 10, Interval: time.Second, MaxQueue: time.Second},
			11, map[string]int64{"get": 1, "set": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqs := make([]cluster.Request, 15)
			for i := range reqs {
				reqs[i] = cluster.Request{Budget: tt.budget, N: 1}
			}
			g := make([]cluster.Grant, len(reqs))
			if err := rc.ConfigResetStat(ctxT(t)).Err(); err != nil {
				t.Fatal(err)
			}
			if err := s.Take(ctxT(t), reqs, g); err != nil {
				t.Fatal(err)
			}
			stats := commandCalls(t, rc)
			for i := range g {
				want := int64(0)
				if int64(i) < tt.want {
					want = 1
				}
				if g[i].N != want {
					t.Fatalf("request %d: %+v, want %d granted", i, g[i], want)
				}
				if tt.budget.Algorithm == cluster.Pacing && want == 1 && !near(g[i].Wait, time.Duration(i)*100*time.Millisecond) {
					t.Errorf("request %d: wait %v, want %v", i, g[i].Wait, time.Duration(i)*100*time.Millisecond)
				}
				if want == 0 && g[i].RetryAfter <= 0 {
					t.Errorf("request %d refused without RetryAfter", i)
				}
			}
			for cmd, n := range tt.calls {
				if stats[cmd] != n {
					t.Errorf("%s sent %d times, want %d (all: %v)", cmd, stats[cmd], n, stats)
				}
			}
			if tt.budget.Algorithm == cluster.SlidingWindow {
				_, zkey := s.budgetKeys(escapeTag(tt.budget.Key), algWindow)
				if n := rc.ZCard(ctxT(t), zkey).Val(); n != 1 {
					t.Errorf("window log holds %d entries, want 1 for the call's grants", n)
				}
				if n := windowCount(t, s, tt.budget.Key); n != 10 {
					t.Errorf("window counts %d, want 10", n)
				}
			}
		})
	}
}

// commandCalls returns the calls of each command since the last CONFIG
// RESETSTAT, by lower-case name.
func commandCalls(t *testing.T, c *redis.Client) map[string]int64 {
	t.Helper()
	info, err := c.Info(ctxT(t), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("INFO commandstats: %q", line)
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return out
}

// TestLoneAndBatchedRequestsAgree: a lone request for a token bucket or a
// pacing budget goes to the lone-request script, the same request beside
// another goes to the batch script; both read and write the same keys and
// decide the same. Requests of random sizes alternate at random between
// the two paths and are checked against a model of the budget (refill and
// the passing of time are negligible over the test: 10 permits per 1,000
// hours).
func TestLoneAndBatchedRequestsAgree(t *testing.T) {
	const hour = int64(time.Hour)
	slow := func(key string, alg cluster.Algorithm) cluster.Budget {
		return cluster.Budget{Key: key, Algorithm: alg, Limit: 10, Interval: 1000 * time.Hour, MaxQueue: 350 * time.Hour}
	}
	for _, partial := range []bool{false, true} {
		t.Run(fmt.Sprintf("token bucket, partial %v", partial), func(t *testing.T) {
			s, rc, _ := standalone(t)
			b := slow("tb", cluster.TokenBucket)
			other := cluster.Request{Budget: slow("other", cluster.TokenBucket), N: 1}
			rng := rand.New(rand.NewSource(7))
			level, lone := int64(10), 0
			for i := 0; level > 0 || i < 30; i++ {
				if i > 200 {
					t.Fatal("the bucket never emptied")
				}
				n := int64(1 + rng.Intn(3))
				req := cluster.Request{Budget: b, N: n, Partial: partial}
				alone := rng.Intn(2) == 0
				if alone {
					lone++
				}
				g := takeAloneOrBeside(t, s, req, other, alone)
				want := int64(0)
				switch {
				case level >= n:
					want = n
				case partial && level >= 1:
					want = level
				}
				if g.N != want || g.Wait != 0 {
					t.Fatalf("request %d (%d, level %d): %+v, want %d granted", i, n, level, g, want)
				}
				level -= want
				// Refused: the rest comes back in (rest - level) refills of
				// 100 hours each, give or take the test's own duration.
				if rest := n - want; rest > 0 {
					wantRetry := time.Duration((rest - level) * 100 * hour)
					if d := g.RetryAfter - wantRetry; d < -time.Minute || d > 0 {
						t.Fatalf("request %d: RetryAfter %v, want about %v", i, g.RetryAfter, wantRetry)
					}
				}
				key, _ := s.budgetKeys("tb", algBucket)
				if got := hfloat(t, rc, key, "t"); got < float64(level) || got >= float64(level)+0.01 {
					t.Fatalf("request %d: stored level %v, want %d", i, got, level)
				}
			}
			if lone == 0 {
				t.Fatal("no lone request")
			}
		})
	}
	t.Run("pacing", func(t *testing.T) {
		s, _, _ := standalone(t)
		b := slow("pc", cluster.Pacing)
		other := cluster.Request{Budget: slow("other", cluster.Pacing), N: 1}
		rng := rand.New(rand.NewSource(7))
		scheduled := int64(0) // permits scheduled, 100 hours apart
		for i := 0; i < 40; i++ {
			n := int64(1 + rng.Intn(2))
			req := cluster.Request{Budget: b, N: n}
			g := takeAloneOrBeside(t, s, req, other, i%2 == 0)
			wait := time.Duration(scheduled * 100 * hour)
			if wait > 350*time.Hour { // beyond MaxQueue: refused
				if g.N != 0 || g.RetryAfter <= wait-350*time.Hour-time.Minute || g.RetryAfter > wait-350*time.Hour {
					t.Fatalf("request %d: %+v, want refused, RetryAfter about %v", i, g, wait-350*time.Hour)
				}
				continue
			}
			if g.N != n || g.Wait <= wait-time.Minute || g.Wait > wait {
				t.Fatalf("request %d: %+v, want %d granted after about %v", i, g, n, wait)
			}
			scheduled += n
		}
	})
}

// takeAloneOrBeside takes req alone (the lone-request script) or in a batch
// beside other (the batch script), and returns req's grant.
func takeAloneOrBeside(t *testing.T, s *Store, req, other cluster.Request, alone bool) cluster.Grant {
	t.Helper()
	if alone {
		return take1(t, s, req)
	}
	gs := make([]cluster.Grant, 2)
	if err := s.Take(ctxT(t), []cluster.Request{req, other}, gs); err != nil {
		t.Fatal(err)
	}
	return gs[0]
}

// TestLoneRequestScript: a lone token bucket or pacing request is one
// invocation of the lone-request script (loaded by it, the batch script
// not), with the commands of the batch script for one budget; a lone
// sliding window request goes to the batch script.
func TestLoneRequestScript(t *testing.T) {
	s, rc, _ := standalone(t)
	tests := []struct {
		alg   cluster.Algorithm
		one   bool
		calls map[string]int64
	}{
		{cluster.TokenBucket, true, map[string]int64{"evalsha": 1, "eval": 1, "hmget": 1, "hset": 1, "pexpire": 1}},
		{cluster.Pacing, true, map[string]int64{"evalsha": 1, "eval": 1, "get": 1, "set": 1}},
		{cluster.SlidingWindow, false, map[string]int64{"evalsha": 1, "eval": 1, "hmget": 1, "zadd": 1}},
	}
	for _, tt := range tests {
		if err := rc.ScriptFlush(ctxT(t)).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rc.ConfigResetStat(ctxT(t)).Err(); err != nil {
			t.Fatal(err)
		}
		b := cluster.Budget{Key: fmt.Sprint("k", tt.alg), Algorithm: tt.alg, Limit: 5, Interval: time.Second, MaxQueue: time.Second}
		if g := take1(t, s, cluster.Request{Budget: b, N: 2}); g.N != 2 {
			t.Fatalf("algorithm %d: %+v", tt.alg, g)
		}
		stats := commandCalls(t, rc)
		for cmd, n := range tt.calls {
			if stats[cmd] != n {
				t.Errorf("algorithm %d: %s sent %d times, want %d (all: %v)", tt.alg, cmd, stats[cmd], n, stats)
			}
		}
		ex, err := rc.ScriptExists(ctxT(t), takeOneScript.Hash(), takeScript.Hash()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ex[0] != tt.one || ex[1] == tt.one {
			t.Errorf("algorithm %d: lone-request script loaded %v, batch script %v; want lone %v", tt.alg, ex[0], ex[1], tt.one)
		}
	}
}
