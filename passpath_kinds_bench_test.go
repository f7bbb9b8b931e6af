package sluice

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice/rules"
)

// BenchmarkPassPathKinds breaks BenchmarkPassPath's all-kinds path down by
// kind: Entry+Exit (serially, one resource, argument 0 a string) with the
// QPS flow rule alone, then with each other kind of all-kinds added to it
// alone, and all of them; rate is rate.Limiter.Allow in the same run. What
// a kind adds is its figure less qps's (docs/design/benchmarks.md).
func BenchmarkPassPathKinds(b *testing.B) {
	qps := rules.Flow{Resource: "all", Threshold: rules.MaxThreshold}
	conc := rules.Flow{Metric: rules.Concurrency, Resource: "all", Threshold: 1 << 20}
	breaker := rules.CircuitBreaker{Resource: "all", Strategy: rules.ErrorRatio, Threshold: 0.5, RetryTimeout: time.Second}
	param := rules.Param{Resource: "all", Index: 0, Threshold: rules.MaxThreshold}
	system := rules.System{Metric: rules.InboundQPS, Threshold: rules.MaxThreshold}
	for _, k := range []struct {
		name string
		set  rules.Set
	}{
		{"qps", rules.Set{Flow: []rules.Flow{qps}}},
		{"qps+concurrency", rules.Set{Flow: []rules.Flow{qps, conc}}},
		{"qps+breaker", rules.Set{Flow: []rules.Flow{qps}, CircuitBreaker: []rules.CircuitBreaker{breaker}}},
		{"qps+param", rules.Set{Flow: []rules.Flow{qps}, Param: []rules.Param{param}}},
		{"qps+system", rules.Set{Flow: []rules.Flow{qps}, System: []rules.System{system}}},
		{"all-kinds", rules.Set{Flow: []rules.Flow{qps, conc}, CircuitBreaker: []rules.CircuitBreaker{breaker}, Param: []rules.Param{param}, System: []rules.System{system}}},
	} {
		b.Run(k.name, func(b *testing.B) {
			g := New()
			b.Cleanup(func() { _ = g.Close() })
			if err := g.LoadRules(k.set); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			for i := 0; i < b.N; i++ {
				p, err := g.Entry("all", WithStringArg(0, "user-1"))
				if err != nil {
					b.Fatal(err)
				}
				p.Exit()
			}
			reportCPU(b, cpu)
		})
	}
}
