package window

import (
	"testing"

	"sync/atomic"
)

// BenchmarkNodePassComplete is a node's share of Entry+Exit: AddPass then
// AddComplete at a clock that moves 1 µs per call (a new 100 ms bucket
// every 100,000 calls), serial and in parallel on one node.
func BenchmarkNodePassComplete(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		n := NewNode()
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			now := int64(i) * 1000
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
				now := clock.Add(1000)
				n.AddPass(now, 1)
				n.AddComplete(now, 1000, 1, false)
			}
		})
	})
}

// BenchmarkNodePassUntimed is BenchmarkNodePassComplete with an untimed
// exit (AddCompleteUntimed), as Entry+Exit has when nothing reads the
// exit's RT.
func BenchmarkNodePassUntimed(b *testing.B) {
	n := NewNode()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		now := int64(i) * 1000
		n.AddPass(now, 1)
		n.AddCompleteUntimed(now, 1, false)
	}
}

// BenchmarkNodeBlock is a node's share of a refusal (AddBlock), at a clock
// that moves 1 µs per call.
func BenchmarkNodeBlock(b *testing.B) {
	n := NewNode()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		n.AddBlock(int64(i)*1000, 1, 2)
	}
}

// BenchmarkNodePassExit is a node's share of Entry+Exit as the engine's
// pass path has it (AddPass, then AddCompleteUntimed), each goroutine with
// a clock of its own that moves 1 µs per call, so that nothing but the
// node is shared: serial, in parallel on an unstriped node (one shared
// concurrency word and bucket slot; it stripes itself once calls contend)
// and on a node striped from the start.
func BenchmarkNodePassExit(b *testing.B) {
	run := func(b *testing.B, n *Node) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			now := int64(0)
			for pb.Next() {
				now += 1000
				n.AddPass(now, 1)
				n.AddCompleteUntimed(now, 1, false)
			}
		})
	}
	b.Run("serial", func(b *testing.B) {
		n := NewNode()
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			now := int64(i) * 1000
			n.AddPass(now, 1)
			n.AddCompleteUntimed(now, 1, false)
		}
	})
	b.Run("serial-striped", func(b *testing.B) {
		n := NewNode()
		n.stripe()
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			now := int64(i) * 1000
			n.AddPass(now, 1)
			n.AddCompleteUntimed(now, 1, false)
		}
	})
	b.Run("parallel", func(b *testing.B) { run(b, NewNode()) })
	b.Run("parallel-striped", func(b *testing.B) {
		n := NewNode()
		n.stripe()
		run(b, n)
	})
}
