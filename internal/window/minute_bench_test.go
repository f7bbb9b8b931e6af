package window

import (
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkNodeReadMinute is what a reader of a node pays: Snapshot (the
// minute sums and totals of the counts) and History of the minute, on a
// node whose minute window holds a full minute.
func BenchmarkNodeReadMinute(b *testing.B) {
	n := new(Node)
	n.InitHistory(5 * time.Minute)
	n.History(0, time.Minute)
	for t := int64(0); t < int64(70*time.Second); t += int64(30 * time.Millisecond) {
		n.AddPass(t, 1)
		n.AddComplete(t, 1000, 1, false)
	}
	now := int64(70 * time.Second)
	b.Run("Snapshot", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			_ = n.Snapshot(now)
		}
	})
	b.Run("History", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			_ = n.History(now, time.Minute)
		}
	})
}

// BenchmarkNodeRetire is the request path's share of the minute window: a
// node read by a reader (its minute window made), with a clock that moves
// 10 µs per call (a second-level bucket retires every 10,000 calls),
// serial and in parallel.
func BenchmarkNodeRetire(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		n := NewNode()
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			now := int64(i) * 10000
			n.AddPass(now, 1)
			n.AddComplete(now, 1000, 1, false)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		n := NewNode()
		var clock atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				now := clock.Add(10000)
				n.AddPass(now, 1)
				n.AddComplete(now, 1000, 1, false)
			}
		})
	})
}
