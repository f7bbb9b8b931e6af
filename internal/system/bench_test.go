package system_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/system"
	"github.com/sluice-go/sluice/internal/window"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

// fullSet is one rule per metric, none of which fires.
var fullSet = []rules.System{
	{Metric: rules.InboundQPS, Threshold: 1e9},
	{Metric: rules.InboundConcurrency, Threshold: 1e6},
	{Metric: rules.InboundAvgRT, Threshold: 1e6},
	{Metric: rules.Load1, Threshold: 1000},
	{Metric: rules.CPUUsage, Threshold: 0.99, Strategy: rules.BBR},
}

// benchSlot returns a slot with rs in force, sampled values in place, and an
// inbound node with traffic in every bucket of the window.
func benchSlot(b *testing.B, rs []rules.System, load, cpu float64) (*system.Slot, *window.Node, *sluicetest.ManualClock) {
	b.Helper()
	clock := sluicetest.NewManualClock(int64(time.Hour))
	node := window.NewNode()
	for i := 0; i < 10; i++ {
		node.AddPass(clock.Nanotime(), 100)
		node.AddComplete(clock.Nanotime(), int64(5*time.Millisecond), 100, false)
		clock.Advance(100 * time.Millisecond)
	}
	// One sample, taken at start: with an hour's interval it stays fresh
	// (not stale) however far the benchmarks move the clock.
	s := system.New(system.Config{Clock: clock, Inbound: node, Source: newFakeSource(load, cpu), Interval: time.Hour})
	b.Cleanup(func() { _ = s.Close() })
	s.Use(system.Compile(rs))
	// The sampler takes its first sample, then parks on the clock's timer.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := clock.BlockUntil(ctx, 1); err != nil {
		b.Fatal("no first sample:", err)
	}
	if s.Metrics().CPUUsageAge < 0 {
		b.Fatal("sampler parked without a reading")
	}
	return s, node, clock
}

// BenchmarkCheck is the request-path cost of a full set of passing system
// rules, at a fixed instant (the window cache is warm).
func BenchmarkCheck(b *testing.B) {
	s, _, clock := benchSlot(b, fullSet, 1, 0.5)
	ec := &entry.Context{Resource: "r", Batch: 1, Start: clock.Nanotime()}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if s.Check(ec) != nil {
			b.Fatal("blocked")
		}
	}
}

// BenchmarkCheckMovingClock moves time 1 µs per check, so the window cache
// is refilled every 100,000 checks (as at 100k QPS).
func BenchmarkCheckMovingClock(b *testing.B) {
	s, _, clock := benchSlot(b, fullSet, 1, 0.5)
	ec := &entry.Context{Resource: "r", Batch: 1}
	start := clock.Nanotime()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ec.Start = start + int64(i)*1000
		if s.Check(ec) != nil {
			b.Fatal("blocked")
		}
	}
}

func BenchmarkCheckParallel(b *testing.B) {
	s, _, clock := benchSlot(b, fullSet, 1, 0.5)
	now := clock.Nanotime()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ec := &entry.Context{Resource: "r", Batch: 1, Start: now}
		for pb.Next() {
			if s.Check(ec) != nil {
				b.Error("blocked")
				return
			}
		}
	})
}

// BenchmarkCheckBBRPass is the request-path cost of an entry admitted while
// a CPU BBR rule is triggered (CPU over the threshold, concurrency under
// capacity), as during an overload: capacity is read through the window
// cache. Time moves 1 µs per check and each new 100 ms bucket gets its
// completions, so the cache is refilled every 100,000 checks.
func BenchmarkCheckBBRPass(b *testing.B) {
	s, node, clock := benchSlot(b, []rules.System{{Metric: rules.CPUUsage, Threshold: 0.5, Strategy: rules.BBR}}, 0, 0.9)
	start := clock.Nanotime()
	node.AddPass(start, 3) // capacity is 1000/s × 5 ms = 5
	ec := &entry.Context{Resource: "r", Batch: 1}
	bucket := int64(window.BucketWidth)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ec.Start = start + int64(i)*1000
		if ec.Start%bucket < 1000 {
			node.AddPass(ec.Start, 100)
			node.AddComplete(ec.Start, int64(5*time.Millisecond), 100, false)
		}
		if s.Check(ec) != nil {
			b.Fatal("blocked")
		}
	}
}

// BenchmarkCheckBBRBlock is the cost of refusing an entry under a CPU BBR
// rule (the capacity is computed from the inbound node).
func BenchmarkCheckBBRBlock(b *testing.B) {
	s, node, clock := benchSlot(b, []rules.System{{Metric: rules.CPUUsage, Threshold: 0.5, Strategy: rules.BBR}}, 0, 0.9)
	node.AddPass(clock.Nanotime(), 1000) // far above capacity
	ec := &entry.Context{Resource: "r", Batch: 1, Start: clock.Nanotime()}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if s.Check(ec) == nil {
			b.Fatal("passed")
		}
	}
}

func BenchmarkActive(b *testing.B) {
	s, _, _ := benchSlot(b, fullSet, 1, 0.5)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if !s.Active() {
			b.Fatal("inactive")
		}
	}
}
