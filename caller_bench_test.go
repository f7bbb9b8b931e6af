package sluice

import (
	"testing"

	"github.com/sluice-go/sluice/rules"
)

// BenchmarkEntryExitCaller is BenchmarkEntryExit's serial and parallel
// cases with and without a caller (0 allocs/op either way), and with a
// caller on a resource whose rule counts each caller apart (Caller
// "other": the param machinery keyed by the caller). Run it beside
// BenchmarkEntryExit in the same run to compare:
//
//	go test -run '^$' -bench 'BenchmarkEntryExit$|BenchmarkEntryExitCaller' -count 6 .
func BenchmarkEntryExitCaller(b *testing.B) {
	for _, c := range []struct {
		name    string
		perCall bool
		opts    []EntryOption
	}{
		{"none", false, nil},
		{"caller", false, []EntryOption{WithCaller("orders-service")}},
		{"caller-rule", true, []EntryOption{WithCaller("orders-service")}},
	} {
		engine := func(b *testing.B) *Engine {
			if !c.perCall {
				return benchEngine(b, "r")
			}
			g := New()
			b.Cleanup(func() { _ = g.Close() })
			if _, err := loadFlow(g, []rules.Flow{{Resource: "r", Threshold: 1e12, Caller: "other"}}); err != nil {
				b.Fatal(err)
			}
			return g
		}
		b.Run(c.name+"/serial", func(b *testing.B) {
			g := engine(b)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			for i := 0; i < b.N; i++ {
				p, err := g.Entry("r", c.opts...)
				if err != nil {
					b.Fatal(err)
				}
				p.Exit()
			}
			reportCPU(b, cpu)
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			g := engine(b)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p, err := g.Entry("r", c.opts...)
					if err != nil {
						b.Error(err)
						return
					}
					p.Exit()
				}
			})
			reportCPU(b, cpu)
		})
	}
}
