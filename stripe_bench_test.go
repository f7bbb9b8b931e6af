package sluice

import (
	"testing"

	"golang.org/x/time/rate"
)

// BenchmarkStripedPassPath is BenchmarkPassPath's one-rule and read paths
// on a resource whose node counts in stripes from the start ("striped"),
// beside the same paths as they come ("as-is": a node makes its stripes
// only once calls contend for it, which on a busy host two benchmark
// goroutines may never do) and rate.Limiter.Allow, serial and in
// parallel, with cpu-ns/op. A node's stripes cost a serial call little
// (the P's index, one more pointer load) and take the lines every call
// wrote off the list of lines cores share: what is left shared is the
// rule's admission word, as rate.Limiter's mutex is.
func BenchmarkStripedPassPath(b *testing.B) {
	for _, p := range []struct {
		name string
		call func(b *testing.B) func(i int) bool
	}{
		{"rate", func(b *testing.B) func(int) bool {
			l := rate.NewLimiter(1e9, 1e9)
			return func(int) bool { return l.Allow() }
		}},
		{"one-rule/as-is", func(b *testing.B) func(int) bool { return stripedCall(b, false, false) }},
		{"one-rule/striped", func(b *testing.B) func(int) bool { return stripedCall(b, true, false) }},
		{"read/as-is", func(b *testing.B) func(int) bool { return stripedCall(b, false, true) }},
		{"read/striped", func(b *testing.B) func(int) bool { return stripedCall(b, true, true) }},
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

// stripedCall is an Entry+Exit on "r" of an engine with one passing QPS
// rule, its node striped or not, read every readEvery calls or never.
func stripedCall(b *testing.B, striped, read bool) func(int) bool {
	g := benchEngine(b, "r")
	if read {
		g.Snapshot("r")
		g.SystemMetrics()
	}
	if striped {
		g.reg.get("r").node.Stripe()
	}
	return func(i int) bool {
		if read && i%readEvery == 0 {
			g.Snapshot("r")
			g.SystemMetrics()
		}
		p, err := g.Entry("r")
		p.Exit()
		return err == nil
	}
}
