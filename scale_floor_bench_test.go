package sluice

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// BenchmarkScaleFloor sets the cost of a call over 100,000 resources
// round-robin beside the host's memory latency, measured in the same
// process at the same time: chunks of 2,000 Entry+Exit calls (one passing
// QPS rule per resource) over the 100,000 resources, of 2,000 on one of
// them, and of 2,000 dependent reads from a buffer as large as the heap the
// 100,000 resources take (each read's address is the value the read before
// it loaded, one line each, in a random cycle) alternate, and each kind's
// time is its fastest chunk (see BenchmarkScaleRatio). b.N counts rounds of
// three chunks.
//
// It reports the per-call times (ns/many, ns/one, ns/read), x-one (the
// scale goal's ratio, many over one) and x-read, the time the 100,000
// resources add to a call over one dependent read from main memory. A call
// on a cold resource makes two such reads one after the other (the read
// table's line, then the resource's lines, see table), so x-read near 2
// says the path adds nothing beyond them; x-one then moves with the host's
// memory latency: about 1 + 2×read/one.
func BenchmarkScaleFloor(b *testing.B) {
	const n, chunk = 100_000, 2_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("GET /api/v1/items/%d", i)
	}
	g := benchEngine(b, names...)
	runtime.GC()
	runtime.ReadMemStats(&after)
	chain := floorChain(int(after.HeapAlloc - before.HeapAlloc))
	one := []string{names[n/2]}
	run := func(order []string, pos *int) time.Duration {
		start := time.Now()
		for range chunk {
			p, err := g.Entry(order[*pos])
			if err != nil {
				b.Fatal(err)
			}
			p.Exit()
			if *pos++; *pos == len(order) {
				*pos = 0
			}
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
	bm, bo, br := time.Duration(1<<62), time.Duration(1<<62), time.Duration(1<<62)
	var pm, po int
	b.ResetTimer()
	for b.Loop() {
		bm = min(bm, run(names, &pm))
		bo = min(bo, run(one, &po))
		br = min(br, read())
	}
	per := func(d time.Duration) float64 { return float64(d) / chunk }
	b.ReportMetric(per(bm), "ns/many")
	b.ReportMetric(per(bo), "ns/one")
	b.ReportMetric(per(br), "ns/read")
	b.ReportMetric(per(bm)/per(bo), "x-one")
	b.ReportMetric((per(bm)-per(bo))/per(br), "x-read")
}

// floorChain returns a buffer of about size bytes in which the first word
// of every 64-byte line holds the index of the next line's first word, the
// lines in one random cycle: following it reads one line per step, each at
// an address the step before loaded.
func floorChain(size int) []uint64 {
	const perLine = 64 / 8
	lines := max(size/64, 2)
	buf := make([]uint64, lines*perLine)
	order := rand.New(rand.NewPCG(1, 2)).Perm(lines)
	for i, l := range order {
		buf[l*perLine] = uint64(order[(i+1)%lines] * perLine)
	}
	return buf
}
