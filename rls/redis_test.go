package rls

import (
	"context"
	"fmt"
	"math"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/rls/config"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// replica is a Service counting in the Redis of srv, as sluice-rls -redis
// runs it.
func replica(t *testing.T, srv *redistest.Server, cfg *config.Config, clk *manualClock, name string) (*Service, *redisCounters) {
	t.Helper()
	client := redis.NewClient(&redis.Options{
		Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second, ContextTimeoutEnabled: true,
	})
	m := newMetrics()
	rc := newRedisCounters(client, RedisOptions{Timeout: 200 * time.Millisecond, ProbeInterval: 20 * time.Millisecond, Instance: name, ExpectedInstances: 5}, m, 0)
	s := newService(cfg, Options{Now: clk.Now}, rc)
	s.metrics = m
	t.Cleanup(func() { rc.close(); client.Close() })
	return s, rc
}

// Two replicas on one Redis: the fleet admits exactly the limit while Redis
// answers; when Redis is killed every answer still comes within the
// timeout, decided by the fallback, which admits what is left of the limit
// (each replica starts from its share of the fleet's count); after a
// restart (without its data) the replicas return to Redis.
//
// A request Redis has not answered within the 200 ms Timeout (a loaded
// host, a new connection's dial) is decided by the fallback, by design, so
// each step that asserts Redis's exact answers is repeated on a new key
// until Redis decided all of its requests (untilRedisDecides), and the
// steps that the fallback shared are checked against the bound that holds
// whoever decided (fleetRound).
func TestRedisFleetBoundAndLoss(t *testing.T) {
	srv := redistest.Start(t)
	clk := newClock(base)
	cfg := mustLoad(t, "testdata/integration")
	a, ra := replica(t, srv, cfg, clk, "a")
	b, rb := replica(t, srv, cfg, clk, "b")
	eventually(t, func() bool { return ra.instances.Load() == 2 && rb.instances.Load() == 2 })
	pair := []*Service{a, b}

	// Concurrently from both replicas: exactly 10 admitted.
	untilRedisDecides(t, fallbacks(pair...), func(try int) error {
		return fleetRound(t, a, b, ra, rb, request("another", desc("key3", "fleet-"+strconv.Itoa(try)))) // 10 per hour
	})

	// Part of a limit used, then Redis is lost: the fleet admits the rest.
	var r2 *pb.RateLimitRequest
	untilRedisDecides(t, fallbacks(pair...), func(try int) error {
		r2 = request("another", desc("key3", "loss-"+strconv.Itoa(try)))
		if got := countOK(t, a, r2, 2) + countOK(t, b, r2, 2); got != 4 {
			return fmt.Errorf("before the loss: %d", got)
		}
		return nil
	})
	srv.Kill()
	admitted := 0
	for _, s := range pair {
		for range 10 {
			t0 := time.Now()
			resp := call(t, s, r2)
			if d := time.Since(t0); d > 2*time.Second {
				t.Fatalf("an answer took %v with Redis lost (timeout 200 ms)", d)
			}
			if resp.OverallCode == pb.RateLimitResponse_OK {
				admitted++
			}
		}
	}
	// Each replica admits its share, floor(10/2) = 5, less its share of the
	// count it last saw, ceil(seen/2): a saw 2 (so 5-1), b saw 4 (5-2). The
	// fleet ends one over the limit: b's 2 hits after a's last answer from
	// Redis, halved (the design's bound, docs/rls.md). The replicas counted
	// each other before the loss (untilRedisDecides) and cannot count again
	// without Redis.
	if admitted != 7 || ra.instances.Load() != 2 || rb.instances.Load() != 2 {
		t.Fatalf("with Redis lost the fleet admitted %d more, want 4+3 (replicas counted %d, %d)",
			admitted, ra.instances.Load(), rb.instances.Load())
	}
	if a.metrics.remote.Load() != 0 || a.metrics.fallback.Load() == 0 {
		t.Fatalf("not in fallback: remote %d fallback %d", a.metrics.remote.Load(), a.metrics.fallback.Load())
	}

	srv.Restart()
	eventually(t, func() bool {
		call(t, a, request("basic", desc("key1", "probe")))
		return a.metrics.remote.Load() == 1
	})
	// Redis restarted without its data: its count starts again.
	untilRedisDecides(t, fallbacks(a), func(try int) error {
		if resp := call(t, a, request("another", desc("key3", "after-"+strconv.Itoa(try)))); resp.Statuses[0].LimitRemaining != 9 {
			return fmt.Errorf("after restart: %s", summary(resp))
		}
		return nil
	})
}

// fleetRound sends 20 requests r, five at a time from each of two
// goroutines per replica, a limit of 10, and checks what the fleet
// admitted. When Redis decided every request (no fallback decision in the
// round): exactly 10, else it returns an error. Otherwise it fails the test
// unless what holds whoever decided holds: Redis's answers are distinct
// counts, admitted up to 10, so Redis admitted at most 10, and at least 10
// less the requests of the fallback (a late request's hit may still be
// counted in Redis and take one of the first 10 counts); each replica's
// fallback admitted at most its decisions and its share, 10/n for the n
// replicas it counted (the fewest it counted before and after the round,
// which the heartbeats change at most once a second).
func fleetRound(t *testing.T, a, b *Service, ra, rb *redisCounters, r *pb.RateLimitRequest) error {
	t.Helper()
	fa, fb := a.metrics.fallback.Load(), b.metrics.fallback.Load()
	na, nb := ra.instances.Load(), rb.instances.Load()
	var ok atomic.Int64
	var wg sync.WaitGroup
	for _, s := range []*Service{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				if resp, err := s.ShouldRateLimit(context.Background(), r); err == nil && resp.OverallCode == pb.RateLimitResponse_OK {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	fa, fb = a.metrics.fallback.Load()-fa, b.metrics.fallback.Load()-fb
	if fa+fb == 0 {
		if ok.Load() != 10 {
			return fmt.Errorf("fleet admitted %d, want exactly 10 (every request decided by Redis)", ok.Load())
		}
		return nil
	}
	share := func(rc *redisCounters, before int64) int64 { return 10 / max(1, min(before, rc.instances.Load())) }
	lo := 10 - int64(fa+fb)
	hi := 10 + min(int64(fa), share(ra, na)) + min(int64(fb), share(rb, nb))
	if ok.Load() < lo || ok.Load() > hi {
		t.Fatalf("fleet admitted %d with %d+%d decisions by the fallback, want %d to %d", ok.Load(), fa, fb, lo, hi)
	}
	t.Logf("Redis late or failing: %d+%d decisions by the fallback, %d admitted (bound %d to %d)", fa, fb, ok.Load(), lo, hi)
	return nil
}

// untilRedisDecides runs step with try 0, 1, ... until a try during which
// offRedis did not change (Redis answered each of its requests within the
// Timeout: no decision by a fallback, no failed call), for at most 20 s, and
// fails the test with that try's error. step returns the error of what it
// asserts of Redis's answers, which a try with decisions off Redis does not
// prove or disprove (step fails the test itself on what holds either way),
// and uses a new key or window each try.
func untilRedisDecides(t *testing.T, offRedis func() uint64, step func(try int) error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for try := 0; ; try++ {
		before := offRedis()
		err := step(try)
		if offRedis() == before {
			if err != nil {
				t.Fatal(err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis did not answer every request of a step in time in 20 s (%d tries)", try+1)
		}
		t.Logf("try %d: %d decisions off Redis (%v); again on a new key", try, offRedis()-before, err)
	}
}

// fallbacks returns a function that counts the decisions the fallbacks of
// ss made so far.
func fallbacks(ss ...*Service) func() uint64 {
	return func() (n uint64) {
		for _, s := range ss {
			n += s.metrics.fallback.Load()
		}
		return n
	}
}

// The integration sequence through Redis, as envoyproxy/ratelimit runs it
// against Redis: same answers as the local counters.
func TestRedisIntegrationSequence(t *testing.T) {
	srv := redistest.Start(t)
	clk := newClock(base)
	s, _ := replica(t, srv, mustLoad(t, "testdata/integration"), clk, "a")
	replayBasicSequence(t, s)
	// Huge hits_addend values do not overflow Redis's count (which would
	// fail every later request of the key over to the fallback).
	d := desc("key2", "huge")
	d.HitsAddend = wrapperspb.UInt64(math.MaxUint64)
	for range 3 {
		if got := summary(call(t, s, request("another", d))); got != "OVER_LIMIT [OVER_LIMIT 20/minute rem=0]" || s.metrics.remote.Load() != 1 {
			t.Fatalf("huge addend: %s, redis_up %d", got, s.metrics.remote.Load())
		}
	}
	// A window's key expires with the window.
	ttl, err := srv.Client(t).TTL(context.Background(), "sluice-rls:another_key2_v1_"+strconv.FormatInt(base.Unix()/60*60, 10)).Result()
	if err != nil || ttl <= 0 || ttl > 51*time.Second {
		t.Fatalf("TTL %v %v", ttl, err)
	}
}

// A Redis that accepts connections and never answers (a partition, a
// stalled server): every answer still comes within the timeout, decided
// by the fallback.
func TestRedisSilentAnswersWithinTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	held := make(chan net.Conn, 64)
	conns.Add(1)
	go func() {
		defer conns.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			select {
			case held <- c: // held open, never answered
			default:
				c.Close()
			}
		}
	}()
	t.Cleanup(func() {
		l.Close()
		conns.Wait()
		close(held)
		for c := range held {
			c.Close()
		}
	})
	client := redis.NewClient(&redis.Options{Addr: l.Addr().String(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second, ContextTimeoutEnabled: true})
	m := newMetrics()
	rc := newRedisCounters(client, RedisOptions{Timeout: 100 * time.Millisecond, ExpectedInstances: 2}, m, 0)
	s := newService(mustLoad(t, "testdata/integration"), Options{Now: newClock(base).Now}, rc)
	s.metrics = m
	t.Cleanup(func() { rc.close(); client.Close() })

	r := request("another", desc("key3", "silent")) // 10 an hour: 5 for each of 2 replicas
	ok := 0
	for range 8 {
		t0 := time.Now()
		if call(t, s, r).OverallCode == pb.RateLimitResponse_OK {
			ok++
		}
		if d := time.Since(t0); d > 2*time.Second {
			t.Fatalf("an answer took %v with a silent Redis (timeout 100 ms)", d)
		}
	}
	if ok != 5 || m.remote.Load() != 0 {
		t.Fatalf("%d admitted (want this replica's share, 5), redis_up %d", ok, m.remote.Load())
	}
}
