package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/rules"
)

// BenchmarkCluster compares, in one run and against one local
// redis-server the benchmark starts, three ways of deciding a limit shared
// through Redis, in two regimes. Open: each admits every call (a budget
// that no run exhausts: 10^9 per second for leases, which admit millions
// per second; 10^6 for the others, which decide at most about 100,000 per
// second and must write their state on every decision: redis_rate keeps
// its schedule in float seconds since 2017, where at 10^9/s an increment
// of 1 ns is lost to rounding and the script writes nothing). Saturated
// (the paths' names end in "Saturated"): a limit of 1,000 per second that
// the calls exceed many times over, so most decisions are refusals and
// leases are small and short of permits.
//
//   - SluiceLeases: Entry+Exit on a cluster flow rule (token bucket): the
//     engine takes permits from Redis in leases and hands them out locally.
//   - SluiceStrict: the same rule with Strict: every entry is Redis's
//     decision; concurrent entries share one script call.
//   - RedisRate: github.com/go-redis/redis_rate/v10 Allow, one script call
//     (GCRA) per decision.
//
// Each runs with 1 goroutine (a plain loop), 2 and 64 (b.RunParallel with
// b.SetParallelism). Besides ns/op it reports redis-us/decision: the
// microseconds Redis spent in EVALSHA and EVAL (INFO commandstats) during
// the run, divided by the decisions, which is what the deciding costs the
// shared Redis, scripts/decision, the script calls per decision, and in
// the saturated regime admitted/decision and redis-us/admitted (Redis's
// microseconds per permit admitted). Every path uses the same client options (no retries,
// the context's deadline honoured, go-redis's default pool). Run with
//
//	make bench-cluster
//	(cd examples/benchcompare && go test -run '^$' -bench Cluster -benchmem -count 5 .)
func BenchmarkCluster(b *testing.B) {
	srv := redistest.Start(b)
	admin := srv.Client(b)
	newClient := func(b *testing.B) *redis.Client {
		c := redis.NewClient(&redis.Options{
			Addr: srv.Addr(), MaxRetries: -1, DialerRetries: 1,
			DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
			ContextTimeoutEnabled: true,
		})
		b.Cleanup(func() { _ = c.Close() })
		return c
	}
	for _, cp := range clusterPaths {
		for _, g := range []int{1, 2, 64} {
			b.Run(fmt.Sprintf("%s/goroutines=%d", cp.name, g), func(b *testing.B) {
				op, check, done := cp.setup(b, newClient(b))
				defer done()
				var admitted atomic.Int64
				if cp.saturated {
					inner := op
					op = func() error {
						err := inner()
						if err == nil {
							admitted.Add(1)
						}
						if errors.Is(err, errRefused) {
							return nil
						}
						return err
					}
				}
				usec0, calls0 := scriptStats(b, admin)
				b.ReportAllocs()
				b.ResetTimer()
				if g == 1 {
					for i := 0; i < b.N; i++ {
						if err := op(); err != nil {
							b.Fatal(err)
						}
					}
				} else {
					b.SetParallelism((g + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if err := op(); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				b.StopTimer()
				usec, calls := scriptStats(b, admin)
				b.ReportMetric(float64(usec-usec0)/float64(b.N), "redis-us/decision")
				b.ReportMetric(float64(calls-calls0)/float64(b.N), "scripts/decision")
				if cp.saturated {
					b.ReportMetric(float64(admitted.Load())/float64(b.N), "admitted/decision")
					b.ReportMetric(float64(usec-usec0)/float64(max(admitted.Load(), 1)), "redis-us/admitted")
				}
				if err := check(); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// clusterPath is one way of deciding a shared limit. setup returns the
// operation (nil error: admitted), a check run after the timed loop (the
// store never failed, so no decision was a fallback's), and a release.
// With saturated set, op returns errRefused for a refusal, which the
// benchmark counts as a decision.
type clusterPath struct {
	name      string
	saturated bool
	setup     func(b *testing.B, c *redis.Client) (op func() error, check func() error, done func())
}

// leaseLimit and callLimit are the budgets per second of the lease path
// and of the paths that ask Redis on every decision; no run exhausts
// them. satLimit is the saturated regime's, which every run exceeds.
const (
	leaseLimit = 1_000_000_000
	callLimit  = 1_000_000
	satLimit   = 1_000
)

// errRefused is a refusal of the limit, in the saturated regime.
var errRefused = errors.New("refused")

var clusterPaths = []clusterPath{
	{"SluiceLeases", false, func(b *testing.B, c *redis.Client) (func() error, func() error, func()) {
		return sluiceCluster(b, c, false, leaseLimit)
	}},
	{"SluiceStrict", false, func(b *testing.B, c *redis.Client) (func() error, func() error, func()) {
		return sluiceCluster(b, c, true, callLimit)
	}},
	{"RedisRate", false, func(b *testing.B, c *redis.Client) (func() error, func() error, func()) {
		return redisRate(b, c, callLimit)
	}},
	{"SluiceLeasesSaturated", true, func(b *testing.B, c *redis.Client) (func() error, func() error, func()) {
		return sluiceCluster(b, c, false, satLimit)
	}},
	{"SluiceStrictSaturated", true, func(b *testing.B, c *redis.Client) (func() error, func() error, func()) {
		return sluiceCluster(b, c, true, satLimit)
	}},
	{"RedisRateSaturated", true, func(b *testing.B, c *redis.Client) (func() error, func() error, func()) {
		return redisRate(b, c, satLimit)
	}},
}

// redisRate returns go-redis/redis_rate's Allow at perSecond through c;
// a refusal is errRefused.
func redisRate(b *testing.B, c *redis.Client, perSecond int) (func() error, func() error, func()) {
	lim := redis_rate.NewLimiter(c)
	limit := redis_rate.PerSecond(perSecond)
	key := "bench:" + strconv.Itoa(b.N) // a fresh budget per run
	ctx := context.Background()
	op := func() error {
		res, err := lim.Allow(ctx, key, limit)
		if err != nil {
			return err
		}
		if res.Allowed != 1 {
			return fmt.Errorf("redis_rate: %w (%+v)", errRefused, res)
		}
		return nil
	}
	// Load the script, as sluiceredis.Store.Load does.
	if err := op(); err != nil {
		b.Fatal(err)
	}
	return op, func() error { return nil }, func() {}
}

// sluiceCluster returns Entry+Exit on an engine with one cluster rule of
// limit per second through c: with leases, or strict. A refusal of the
// limit is errRefused.
func sluiceCluster(b *testing.B, c *redis.Client, strict bool, limit float64) (func() error, func() error, func()) {
	store := sluiceredis.New(c, sluiceredis.WithPrefix("bench"+strconv.Itoa(b.N)))
	if err := store.Load(context.Background()); err != nil {
		b.Fatal(err)
	}
	g := sluice.New(sluice.WithCluster(store, sluice.ClusterConfig{
		App: "bench", Timeout: time.Second, // no fallback on a loaded host
	}))
	err := g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: resource, Threshold: limit, Bucket: &rules.Bucket{}, Cluster: &rules.Cluster{Strict: strict}}}})

	if err != nil {
		_ = g.Close()
		b.Fatal(err)
	}
	op := func() error {
		p, err := g.Entry(resource)
		if err != nil {
			var be *sluice.BlockError
			if errors.As(err, &be) && be.Type == sluice.BlockCluster && !strings.Contains(be.Reason, "fallback") {
				return fmt.Errorf("%w: %v", errRefused, err)
			}
			return err
		}
		p.Exit()
		return nil
	}
	if err := op(); err != nil { // the first lease, or the first strict call
		_ = g.Close()
		b.Fatal(err)
	}
	check := func() error {
		st, _ := g.ClusterStatus()
		if st.Fallback || st.TakeErrors != 0 {
			return fmt.Errorf("cluster store failed during the run: %+v", st)
		}
		return nil
	}
	return op, check, func() { _ = g.Close() }
}

// scriptStats returns the microseconds Redis has spent in EVALSHA and
// EVAL since it started, and the number of those calls (INFO
// commandstats).
func scriptStats(b *testing.B, c *redis.Client) (usec, calls int64) {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		for _, f := range strings.Split(stats, ",") {
			k, v, _ := strings.Cut(f, "=")
			if k != "usec" && k != "calls" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatalf("INFO commandstats: %q: %v", line, err)
			}
			if k == "usec" {
				usec += n
			} else {
				calls += n
			}
		}
	}
	return usec, calls
}
