package sluice

import (
	"fmt"
	"math/rand"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/ruledef"
	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
)

// benchEngine returns an engine on the system clock with one passing QPS
// rule per named resource (the threshold is far above any benchmark's rate).
func benchEngine(b *testing.B, resources ...string) *Engine {
	b.Helper()
	g := New(WithLimits(Limits{Resources: len(resources) + 10, Rules: max(len(resources), rules.DefaultMaxRules)}))
	b.Cleanup(func() { _ = g.Close() })
	rs := make([]rules.Flow, len(resources))
	for i, r := range resources {
		rs[i] = rules.Flow{Resource: r, Threshold: 1e12}
	}
	if _, err := loadFlow(g, rs); err != nil {
		b.Fatal(err)
	}
	return g
}

// BenchmarkEntryExit is the budget path: Entry+Exit with one passing QPS
// rule (<= 150 ns/op, 0 allocs/op, serial and parallel on one resource).
func BenchmarkEntryExit(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		g := benchEngine(b, "r")
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			p, err := g.Entry("r")
			if err != nil {
				b.Fatal(err)
			}
			p.Exit()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		g := benchEngine(b, "r")
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p, err := g.Entry("r")
				if err != nil {
					b.Fatal(err)
				}
				p.Exit()
			}
		})
	})
	b.Run("no-rules", func(b *testing.B) {
		g := New()
		b.Cleanup(func() { _ = g.Close() })
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			p, _ := g.Entry("r")
			p.Exit()
		}
	})
	b.Run("default-engine", func(b *testing.B) {
		if err := LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "bench-default", Threshold: 1e12}}}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = LoadRules(rules.Set{}) })
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			p, err := Entry("bench-default")
			if err != nil {
				b.Fatal(err)
			}
			p.Exit()
		}
	})
}

// BenchmarkEntryExitTokenBucket is BenchmarkEntryExit with a token-bucket
// rule instead (a bucket of 1e12 tokens refilled at 1e12/s: it never runs
// dry), serial and parallel on one resource; the reject rule beside it is
// the same-run reference.
func BenchmarkEntryExitTokenBucket(b *testing.B) {
	for _, tt := range []struct {
		name string
		rule rules.Flow
	}{
		{"reject", rules.Flow{Resource: "r", Threshold: 1e12}},
		{"token-bucket", rules.Flow{Resource: "r", Threshold: 1e12, Bucket: &rules.Bucket{}}},
	} {
		engine := func(b *testing.B) *Engine {
			g := New()
			b.Cleanup(func() { _ = g.Close() })
			if _, err := loadFlow(g, []rules.Flow{tt.rule}); err != nil {
				b.Fatal(err)
			}
			return g
		}
		b.Run(tt.name+"/serial", func(b *testing.B) {
			g := engine(b)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p, err := g.Entry("r")
				if err != nil {
					b.Fatal(err)
				}
				p.Exit()
			}
		})
		b.Run(tt.name+"/parallel", func(b *testing.B) {
			g := engine(b)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p, err := g.Entry("r")
					if err != nil {
						b.Fatal(err)
					}
					p.Exit()
				}
			})
		})
	}
}

// BenchmarkEntryBlocked is a refused Entry (<= 200 ns/op, <= 1 alloc/op: the
// *BlockError).
func BenchmarkEntryBlocked(b *testing.B) {
	run := func(b *testing.B, parallel bool) {
		// A manual clock that never moves keeps the resource blocked.
		g := New(WithClock(sluicetest.NewManualClock(0)))
		b.Cleanup(func() { _ = g.Close() })
		mustLoadFlow(b, g, rules.Flow{Resource: "r", Threshold: 1})
		p, _ := g.Entry("r")
		p.Exit()
		b.ReportAllocs()
		b.ResetTimer()
		if !parallel {
			for i := 0; i < b.N; i++ {
				if _, err := g.Entry("r"); err == nil {
					b.Fatal("passed")
				}
			}
			return
		}
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := g.Entry("r"); err == nil {
					b.Fatal("passed")
				}
			}
		})
	}
	b.Run("serial", func(b *testing.B) { run(b, false) })
	b.Run("parallel", func(b *testing.B) { run(b, true) })
}

// BenchmarkManyResources is Entry+Exit with one passing QPS rule per
// resource over n resources (budget: 10,000 within 2x and 100,000 within 3x
// of one resource), serially and from GOMAXPROCS goroutines. The rr walk
// goes round-robin, so every call's resource is cold; the zipf walk draws
// resources with Zipf's law (s = 1.1), as traffic over many routes or
// tenants tends to be: a few hot resources and a long tail. Every walk
// visits its resources in an order fixed before the timer starts (1<<16
// names, or every name for rr), so the walks cost the same.
func BenchmarkManyResources(b *testing.B) {
	for _, n := range []int{1, 10000, 100000} {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("GET /api/v1/items/%d", i)
		}
		g := benchEngine(b, names...)
		walks := []struct {
			name  string
			order []string
		}{{"rr", names}}
		if n > 1 {
			z := rand.NewZipf(rand.New(rand.NewSource(1)), 1.1, 1, uint64(n-1))
			zipf := make([]string, 1<<16)
			for i := range zipf {
				zipf[i] = names[z.Uint64()]
			}
			walks = []struct {
				name  string
				order []string
			}{{"rr", names}, {"zipf", zipf}}
		}
		for _, w := range walks {
			order := w.order
			b.Run(fmt.Sprintf("resources=%d/walk=%s", n, w.name), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					p, err := g.Entry(order[i%len(order)])
					if err != nil {
						b.Fatal(err)
					}
					p.Exit()
				}
			})
			b.Run(fmt.Sprintf("resources=%d/walk=%s/parallel", n, w.name), func(b *testing.B) {
				b.ReportAllocs()
				var start atomic.Int64
				b.RunParallel(func(pb *testing.PB) {
					i := int(start.Add(int64(len(order)) / 7))
					for pb.Next() {
						p, err := g.Entry(order[i%len(order)])
						if err != nil {
							b.Error(err)
							return
						}
						p.Exit()
						i++
					}
				})
			})
		}
	}
}

// BenchmarkIdleResourceMemory reports the heap cost of one tracked resource
// without rules that nobody read (node and registry slot; the minute and
// history windows are made at the first read), as bytes/resource.
func BenchmarkIdleResourceMemory(b *testing.B) {
	const n = 10000
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("res-%d", i)
	}
	for i := 0; i < b.N; i++ {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		g := New(WithLimits(Limits{Resources: n}))
		for _, r := range names {
			p, _ := g.Entry(r)
			p.Exit()
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/resource")
		runtime.KeepAlive(g)
		_ = g.Close()
	}
}

// steppingClock is a clock that moves step nanoseconds at every reading,
// so that time passes between calls as fast as the benchmark runs them.
type steppingClock struct {
	now  atomic.Int64
	step int64
}

func (c *steppingClock) Nanotime() int64 { return c.now.Add(c.step) }

func (c *steppingClock) NewTimer(time.Duration) core.Timer {
	panic("sluice: the benchmark clock has no timers")
}

// BenchmarkExactWindow is Entry+Exit with a 10,000/s QPS reject rule
// counted in the bucketed window (the flow gate's path) and with Exact (a
// log of admission times under a mutex). The clock moves 100 µs per
// reading, two readings per call, so every call passes either rule.
func BenchmarkExactWindow(b *testing.B) {
	for _, exact := range []bool{false, true} {
		name := "buckets"
		if exact {
			name = "exact"
		}
		setup := func(b *testing.B) *Engine {
			g := New(WithClock(&steppingClock{step: int64(100 * time.Microsecond)}))
			b.Cleanup(func() { _ = g.Close() })
			mustLoadFlow(b, g, rules.Flow{Resource: "r", Threshold: ruledef.MaxExactThreshold, Exact: exact})
			return g
		}
		b.Run(name+"/serial", func(b *testing.B) {
			g := setup(b)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p, err := g.Entry("r")
				if err != nil {
					b.Fatal(err)
				}
				p.Exit()
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			g := setup(b)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p, err := g.Entry("r")
					if err != nil {
						b.Fatal(err)
					}
					p.Exit()
				}
			})
		})
	}
}
