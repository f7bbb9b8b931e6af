package sluice

import (
	"testing"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/rules"
)

// BenchmarkEntryExitAdaptive is Entry+Exit under an adaptive concurrency
// rule beside the plain pass path (one passing QPS rule, as
// BenchmarkEntryExit) and a static concurrency rule, serial and parallel on
// one resource. The adaptive rule's limit is at least 1000, so nothing is
// refused, and its windows decide as they do in service (the system clock,
// windows of 100 ms). Goal: at most 60 ns over the plain path, 0 allocs.
func BenchmarkEntryExitAdaptive(b *testing.B) {
	cases := []struct {
		name string
		rule rules.Flow
		opts []EntryOption
	}{
		{"plain", rules.Flow{Resource: "r", Threshold: 1e12}, nil},
		{"concurrency", rules.Flow{Resource: "r", Metric: rules.Concurrency, Threshold: 1e9}, nil},
		{"adaptive", rules.Flow{Resource: "r", Metric: rules.Concurrency, Adaptive: &rules.Adaptive{Min: 1000, Max: 1000000}}, nil},
		{"adaptive-critical", rules.Flow{Resource: "r", Metric: rules.Concurrency, Adaptive: &rules.Adaptive{Min: 1000, Max: 1000000}}, []EntryOption{WithPriority(core.PriorityCritical)}},
	}
	for _, c := range cases {
		engine := func(b *testing.B) *Engine {
			g := New()
			b.Cleanup(func() { _ = g.Close() })
			if err := g.LoadRules(rules.Set{Flow: []rules.Flow{c.rule}}); err != nil {
				b.Fatal(err)
			}
			return g
		}
		b.Run(c.name+"/serial", func(b *testing.B) {
			g := engine(b)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p, err := g.Entry("r", c.opts...)
				if err != nil {
					b.Fatal(err)
				}
				p.Exit()
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			g := engine(b)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p, err := g.Entry("r", c.opts...)
					if err != nil {
						b.Fatal(err)
					}
					p.Exit()
				}
			})
		})
	}
}
