package degrade

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/clock"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/rules"
)

// The breaker's own share of the hot paths, without the engine: a Check and
// its ticket's Release while Closed, and a Check refused while Open.
//
//	go test -run '^$' -bench . -benchmem -benchtime=200ms -count 3 ./slots/degrade

func benchBreaker(b *testing.B, r rules.CircuitBreaker) *Breaker {
	b.Helper()
	br, err := NewBreaker(r, nil)
	if err != nil {
		b.Fatal(err)
	}
	return br
}

func BenchmarkClosedCheckRelease(b *testing.B) {
	br := benchBreaker(b, rules.CircuitBreaker{Resource: "bench", Strategy: rules.ErrorRatio, Threshold: 0.5, RetryTimeout: time.Second})
	clk := clock.System()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		ec := &entry.Context{Resource: "bench", Batch: 1}
		for b.Loop() {
			ec.Start = clk.Nanotime()
			if br.Check(ec) != nil {
				b.Fatal("refused")
			}
			ec.ReleaseTickets(entry.ExitInfo{Start: ec.Start, End: ec.Start + 1000, Batch: 1})
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			ec := &entry.Context{Resource: "bench", Batch: 1}
			for pb.Next() {
				ec.Start = clk.Nanotime()
				if br.Check(ec) != nil {
					b.Error("refused")
					return
				}
				ec.ReleaseTickets(entry.ExitInfo{Start: ec.Start, End: ec.Start + 1000, Batch: 1})
			}
		})
	})
}

func BenchmarkOpenCheck(b *testing.B) {
	br := benchBreaker(b, rules.CircuitBreaker{Resource: "bench", Strategy: rules.ErrorCount, Threshold: 1, MinRequestAmount: 1, RetryTimeout: 24 * time.Hour})
	ec := &entry.Context{Resource: "bench", Batch: 1, Start: 1}
	br.Check(ec)
	ec.ReleaseTickets(entry.ExitInfo{Start: 1, End: 1, Batch: 1, Err: errBoom})
	if br.State() != Open {
		b.Fatal("not open")
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		ec := &entry.Context{Resource: "bench", Batch: 1, Start: 2}
		for b.Loop() {
			if br.Check(ec) == nil {
				b.Fatal("passed")
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			ec := &entry.Context{Resource: "bench", Batch: 1, Start: 2}
			for pb.Next() {
				if br.Check(ec) == nil {
					b.Error("passed")
					return
				}
			}
		})
	})
}
