package sluice

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluice-go/sluice/rules"
)

// readEvery is how many calls of a benchmark goroutine pass between two
// reads of the resource (Snapshot and SystemMetrics, what an exporter or
// the dashboard's telemetry does once a scrape) in BenchmarkPassPath's
// "read" path.
const readEvery = 1024

// BenchmarkPassPath is the pass path as users run it, beside
// golang.org/x/time/rate's Allow in the same binary and run, so that the
// ratios the performance budget is written in (CPU per call over
// rate.Limiter.Allow's) come from one run (see docs/design/benchmarks.md):
//
//   - rate: rate.Limiter.Allow on a limiter no call drains (a mutex);
//   - one-rule: Entry+Exit with one passing QPS rule, resource never read;
//   - read: the same on a resource that is read, by Snapshot and
//     SystemMetrics every readEvery calls of each goroutine (an exporter's
//     scrape, the dashboard's telemetry);
//   - all-kinds: a rule of every kind on the resource (examples/benchcompare's
//     SluiceAllKinds configuration).
//
// Each has a serial and a parallel form (RunParallel, one resource).
func BenchmarkPassPath(b *testing.B) {
	for _, p := range []struct {
		name string
		call func(b *testing.B) func(i int) bool
	}{
		{"rate", func(b *testing.B) func(int) bool {
			l := rate.NewLimiter(1e9, 1e9)
			return func(int) bool { return l.Allow() }
		}},
		{"one-rule", func(b *testing.B) func(int) bool {
			g := benchEngine(b, "r")
			return func(int) bool {
				p, err := g.Entry("r")
				p.Exit()
				return err == nil
			}
		}},
		{"read", func(b *testing.B) func(int) bool {
			g := benchEngine(b, "r")
			g.Snapshot("r")
			g.SystemMetrics()
			return func(i int) bool {
				if i%readEvery == 0 {
					g.Snapshot("r")
					g.SystemMetrics()
				}
				p, err := g.Entry("r")
				p.Exit()
				return err == nil
			}
		}},
		{"all-kinds", func(b *testing.B) func(int) bool {
			g := allKindsEngine(b)
			return func(int) bool {
				p, err := g.Entry("all", WithStringArg(0, "user-1"))
				p.Exit()
				return err == nil
			}
		}},
	} {
		b.Run(p.name+"/serial", func(b *testing.B) {
			call := p.call(b)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			for i := 0; i < b.N; i++ {
				if !call(i) {
					b.Fatal("refused")
				}
			}
			reportCPU(b, cpu)
		})
		b.Run(p.name+"/parallel", func(b *testing.B) {
			call := p.call(b)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					if !call(i) {
						b.Error("refused")
						return
					}
				}
			})
			reportCPU(b, cpu)
		})
	}
}

// reportCPU reports the process's CPU time since from per operation, as
// cpu-ns/op: on a busy host the CPU a call costs, where ns/op is wall time.
func reportCPU(b *testing.B, from int64) {
	if to := processCPU(); from > 0 && to > from {
		b.ReportMetric(float64(to-from)/float64(b.N), "cpu-ns/op")
	}
}

// allKindsEngine is BenchmarkEntryExitAllKinds's engine: a passing rule of
// every kind on "all" whose exits need no clock reading.
func allKindsEngine(b *testing.B) *Engine {
	g := New()
	b.Cleanup(func() { _ = g.Close() })
	if err := g.LoadRules(rules.Set{
		Flow: []rules.Flow{
			{Resource: "all", Threshold: rules.MaxThreshold},
			{Metric: rules.Concurrency, Resource: "all", Threshold: 1 << 20},
		},
		CircuitBreaker: []rules.CircuitBreaker{{Resource: "all", Strategy: rules.ErrorRatio, Threshold: 0.5, RetryTimeout: time.Second}},
		Param:          []rules.Param{{Resource: "all", Index: 0, Threshold: rules.MaxThreshold}},
		System:         []rules.System{{Metric: rules.InboundQPS, Threshold: rules.MaxThreshold}},
	}); err != nil {
		b.Fatal(err)
	}
	return g
}

// BenchmarkReadResourceMemory reports the heap cost of one resource with a
// QPS rule, unread and once read (Snapshot), as bytes/resource.
func BenchmarkReadResourceMemory(b *testing.B) {
	const n = 5000
	names := make([]string, n)
	fl := make([]rules.Flow, n)
	for i := range names {
		names[i] = fmt.Sprintf("res-%d", i)
		fl[i] = rules.Flow{Resource: names[i], Threshold: 1e12}
	}
	for _, read := range []bool{false, true} {
		b.Run(map[bool]string{false: "unread", true: "read"}[read], func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				g := New(WithLimits(Limits{Resources: n + 10, Rules: n}))
				if _, err := loadFlow(g, fl); err != nil {
					b.Fatal(err)
				}
				for _, r := range names {
					p, _ := g.Entry(r)
					p.Exit()
					if read {
						g.Snapshot(r)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/resource")
				runtime.KeepAlive(g)
				_ = g.Close()
			}
		})
	}
}
