package sluice

import (
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluice-go/sluice/rules"
)

// BenchmarkEntryExitAllKinds is Entry+Exit of an inbound entry on a
// resource with a rule of every kind whose exits need no clock reading (the
// configuration of examples/benchcompare's SluiceAllKinds path): a QPS flow
// rule, a concurrency rule, a closed error-ratio circuit breaker, a param
// rule on the entry's string argument and a system rule on InboundQPS.
// BenchmarkEntryExitAllSlotKinds has system rules that read the RT (and so
// timed exits) besides.
func BenchmarkEntryExitAllKinds(b *testing.B) {
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
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p, err := g.Entry("all", WithArgs("user-1"))
			if err != nil {
				b.Fatal(err)
			}
			p.Exit()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p, err := g.Entry("all", WithArgs("user-1"))
				if err != nil {
					b.Error(err)
					return
				}
				p.Exit()
			}
		})
	})
}

// BenchmarkRateAllow is golang.org/x/time/rate's Allow on a limiter no
// benchmark drains (as examples/benchcompare's RateAllow path), for
// same-binary ratios of the pass path to it.
func BenchmarkRateAllow(b *testing.B) {
	l := rate.NewLimiter(1e9, 1e9)
	b.ReportAllocs()
	for b.Loop() {
		if !l.Allow() {
			b.Fatal("denied")
		}
	}
}
