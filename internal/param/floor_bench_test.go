package param

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/rules"
)

// BenchmarkCheckFloor sets what a check on a cold value costs beside the
// host's memory latency, measured in the same process at the same time:
// chunks of 1,000 passing QPS checks over 1,000,000 live values (a large
// prime stride apart, so every value is cold), of 1,000 checks over 1,000
// values (all in cache), and of 1,000 dependent reads from a buffer as large
// as the million values' slot arrays (each read's address is the value the
// read before it loaded, one line each, in a random cycle over the whole
// buffer) alternate, and each kind's time is its fastest chunk (see
// BenchmarkScaleRatio in the root package for why). b.N counts rounds of
// three chunks.
//
// It reports the three per-call times (ns/cold, ns/hot, ns/read) and
// x-read, the time a cold value adds to a check over the time of one
// dependent read from main memory. A cold check reads one line of main
// memory (its value's slot, see table), so x-read near 1 says the check
// adds nothing beyond that read, whatever the host's memory latency is
// that day; the param goal of docs/design/benchmarks.md (+300 ns over an
// Entry without the rule) then moves with that latency.
func BenchmarkCheckFloor(b *testing.B) {
	const n, few, chunk = 1_000_000, 1_000, 1_000
	fill := func(n int) *Controller {
		c, err := NewController(rules.Param{Resource: "r", Threshold: rules.MaxThreshold, Capacity: 2 * n})
		if err != nil {
			b.Fatal(err)
		}
		ec := &entry.Context{Resource: "r", Batch: 1, Start: 1}
		for v := range n {
			arg := entry.Arg{Value: entry.Value{Int: int64(v), Kind: entry.KindInt}}
			if be := c.Check(context.Background(), ec, entry.Args{Given: []*entry.Arg{&arg}}, nil); be != nil {
				b.Fatal(be)
			}
			ec.DropUndo()
		}
		return c
	}
	cold, hot := fill(n), fill(few)
	slotBytes := 0
	for i := range cold.cache.shards {
		slotBytes += len(cold.cache.shards[i].tab.slots) * int(unsafe.Sizeof(keyState{}))
	}
	chain := lineChain(slotBytes)
	check := func(c *Controller, n int, v *int, now int64) time.Duration {
		ec := &entry.Context{Resource: "r", Batch: 1, Start: now}
		start := time.Now()
		for range chunk {
			arg := entry.Arg{Value: entry.Value{Int: int64(*v), Kind: entry.KindInt}}
			if be := c.Check(context.Background(), ec, entry.Args{Given: []*entry.Arg{&arg}}, nil); be != nil {
				b.Fatal(be)
			}
			ec.DropUndo()
			*v = (*v + 7919) % n
			ec.Start++
		}
		return time.Since(start)
	}
	var at uint64
	read := func() time.Duration {
		start := time.Now()
		for range chunk {
			at = chain[at]
		}
		return time.Since(start)
	}
	bc, bh, br := time.Duration(1<<62), time.Duration(1<<62), time.Duration(1<<62)
	vc, vh := 0, 0
	now := int64(2)
	b.ResetTimer()
	for b.Loop() {
		bc = min(bc, check(cold, n, &vc, now))
		bh = min(bh, check(hot, few, &vh, now))
		br = min(br, read())
		now += chunk
	}
	per := func(d time.Duration) float64 { return float64(d) / chunk }
	b.ReportMetric(per(bc), "ns/cold")
	b.ReportMetric(per(bh), "ns/hot")
	b.ReportMetric(per(br), "ns/read")
	b.ReportMetric((per(bc)-per(bh))/per(br), "x-read")
}

// lineChain returns a buffer of about size bytes in which the first word of
// every 64-byte line holds the index of the next line's first word, the
// lines in one random cycle: following it reads one line of the buffer per
// step, each at an address the step before loaded.
func lineChain(size int) []uint64 {
	const perLine = 64 / 8
	lines := size / 64
	buf := make([]uint64, lines*perLine)
	order := rand.New(rand.NewPCG(1, 2)).Perm(lines)
	for i, l := range order {
		buf[l*perLine] = uint64(order[(i+1)%lines] * perLine)
	}
	return buf
}
