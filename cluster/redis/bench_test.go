package sluiceredis

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/rules"
)

// benchBatch returns n requests for n budgets, cycling through the three
// algorithms, with limits high enough that most are granted.
func benchBatch(n int) []cluster.Request {
	reqs := make([]cluster.Request, n)
	for i := range reqs {
		reqs[i] = cluster.Request{Budget: cluster.Budget{
			Key: fmt.Sprintf("bench:%d", i), Algorithm: cluster.Algorithm(1 + i%3),
			Limit: 1e6, Interval: time.Second, Burst: 1e6, MaxQueue: time.Second,
		}, N: 1, Partial: true}
	}
	return reqs
}

func benchTake(b *testing.B, c redis.UniversalClient) {
	for _, n := range []int{1, 64} {
		reqs := benchBatch(n)
		s := New(c)
		if err := s.Load(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("requests=%d/serial", n), func(b *testing.B) {
			ctx := context.Background()
			g := make([]cluster.Grant, n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := s.Take(ctx, reqs, g); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/request")
		})
		b.Run(fmt.Sprintf("requests=%d/parallel", n), func(b *testing.B) {
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				g := make([]cluster.Grant, n)
				for pb.Next() {
					if err := s.Take(ctx, reqs, g); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/request")
		})
	}
}

// BenchmarkTake measures Take against a local redis-server: one request,
// and 64 requests for 64 budgets in one script invocation.
func BenchmarkTake(b *testing.B) {
	srv := redistest.Start(b)
	benchTake(b, srv.Client(b))
}

// BenchmarkTakeCluster measures Take against a local 3-primary cluster,
// where 64 budgets spread over the primaries make one pipeline of one
// invocation per slot.
func BenchmarkTakeCluster(b *testing.B) {
	rc := redistest.StartCluster(b, 3)
	benchTake(b, rc.Client(b))
}

// BenchmarkParamEntry measures Entry+Exit under one param rule counting
// attachment "user", with limits no user reaches: the local rule, and the
// cluster rule strict (one Redis request per entry, concurrent entries
// sharing a round trip) and with leases (a Limiter per user), against a
// local redis-server. Entries cycle over 10 users (each value hot: leases
// serve most entries) or 1,000 (each value comes back after its lease has
// expired: every entry waits for a refill, and the expired lease goes back).
func BenchmarkParamEntry(b *testing.B) {
	srv := redistest.Start(b)
	for _, nusers := range []int{10, 1000} {
		users := make([]string, nusers)
		for i := range users {
			users[i] = fmt.Sprint("user-", i)
		}
		for _, tc := range []struct {
			name    string
			section *rules.Cluster
		}{
			{"local", nil},
			{"strict", &rules.Cluster{}},
			{"leased", &rules.Cluster{Leases: true}},
		} {
			g := sluice.New(sluice.WithCluster(New(srv.Client(b)), sluice.ClusterConfig{App: "bench", Timeout: time.Second}))
			if err := g.LoadRules(rules.Set{Param: []rules.Param{{Resource: "api", Key: "user", Threshold: 1e9, Cluster: tc.section}}}); err != nil {
				b.Fatal(err)
			}
			name := fmt.Sprintf("users=%d/%s", nusers, tc.name)
			b.Run(name+"/serial", func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					p, err := g.Entry("api", sluice.WithStringAttachment("user", users[i%len(users)]))
					if err != nil {
						b.Fatal(err)
					}
					p.Exit()
				}
			})
			b.Run(name+"/parallel", func(b *testing.B) {
				b.ReportAllocs()
				var next atomic.Int64
				b.RunParallel(func(pb *testing.PB) {
					i := int(next.Add(7919))
					for pb.Next() {
						i++
						p, err := g.Entry("api", sluice.WithStringAttachment("user", users[i%len(users)]))
						if err != nil {
							b.Error(err)
							return
						}
						p.Exit()
					}
				})
			})
			st, _ := g.ClusterStatus()
			_ = g.Close()
			b.Logf("%s: %+v", name, st)
		}
	}
}
