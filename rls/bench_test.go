package rls

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-go/sluice/cluster/redis/redistest"
)

// benchRequests is a spread of per-user requests on a 1000/minute limit,
// one descriptor each, as a route's remote_address action sends them.
func benchRequests() []*pb.RateLimitRequest {
	rs := make([]*pb.RateLimitRequest, 1024)
	for i := range rs {
		rs[i] = request("another", desc("key2", "user-"+strconv.Itoa(i)))
	}
	return rs
}

func benchDecide(b *testing.B, s decider) {
	rs := benchRequests()
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.ShouldRateLimit(context.Background(), rs[next.Add(1)%int64(len(rs))]); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkDecideLocal: one decision of the Service in process, counters in
// memory (sluice-rls without -redis), no gRPC.
func BenchmarkDecideLocal(b *testing.B) {
	benchDecide(b, NewService(mustLoad(b, "testdata/integration"), Options{}))
}

// BenchmarkDecideGRPC: a decision through a gRPC client on loopback.
func BenchmarkDecideGRPC(b *testing.B) {
	srv := startServer(b, ServerOptions{Config: "testdata/integration", ReloadInterval: -1})
	c := pb.NewRateLimitServiceClient(dial(b, srv.addr))
	benchDecide(b, clientFunc(c.ShouldRateLimit))
}

// BenchmarkDecideRedis: a decision of the Service in process, counted in a
// redis-server started by the benchmark (one pipelined round trip).
func BenchmarkDecideRedis(b *testing.B) {
	srv := redistest.Start(b)
	s, _ := replicaB(b, srv)
	benchDecide(b, s)
}

func replicaB(b *testing.B, srv *redistest.Server) (*Service, *redisCounters) {
	b.Helper()
	client := srv.Client(b)
	m := newMetrics()
	rc := newRedisCounters(client, RedisOptions{Timeout: time.Second}, m, 0)
	s := newService(mustLoad(b, "testdata/integration"), Options{}, rc)
	s.metrics = m
	b.Cleanup(rc.close)
	return s, rc
}
