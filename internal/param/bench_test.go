package param

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"sync/atomic"

	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/rules"
)

const benchKeys = 100_000

func benchValues() []string {
	vs := make([]string, benchKeys)
	for i := range vs {
		vs[i] = "user-" + strconv.Itoa(i*7919)
	}
	return vs
}

// BenchmarkCheck measures one check with 100,000 live values, visited in a
// scattered order, on rules that never refuse.
func BenchmarkCheck(b *testing.B) {
	vs := benchValues()
	modes := []struct {
		name string
		rule rules.Param
	}{
		{"qps", rules.Param{Resource: "r", Threshold: rules.MaxThreshold, Capacity: 2 * benchKeys}},
		{"concurrency", rules.Param{Resource: "r", Metric: rules.Concurrency, Threshold: rules.MaxThreshold, Capacity: 2 * benchKeys}},
	}
	for _, m := range modes {
		c, err := NewController(m.rule)
		if err != nil {
			b.Fatal(err)
		}
		for _, v := range vs {
			ec := &entry.Context{Resource: "r", Batch: 1, Start: 1}
			_ = c.Check(context.Background(), ec, entry.Args{Positional: []any{v}}, nil)
			ec.DropUndo() // the entry passed, as the engine does
			ec.ReleaseTickets(entry.ExitInfo{Batch: 1})
		}
		one := func(i int, ec *entry.Context) {
			ec.Start = int64(i)
			if be := c.Check(context.Background(), ec, entry.Args{Positional: []any{vs[(i*31)%benchKeys]}}, nil); be != nil {
				b.Fatal(be)
			}
			ec.DropUndo() // the entry passed, as the engine does
			ec.ReleaseTickets(entry.ExitInfo{Batch: 1})
		}
		b.Run(m.name+"/string/serial", func(b *testing.B) {
			b.ReportAllocs()
			ec := &entry.Context{Resource: "r", Batch: 1}
			for i := 0; b.Loop(); i++ {
				one(i, ec)
			}
		})
		b.Run(m.name+"/string/parallel", func(b *testing.B) {
			b.ReportAllocs()
			var seq atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				ec := &entry.Context{Resource: "r", Batch: 1}
				i := int(seq.Add(1)) * 10_007
				for pb.Next() {
					one(i, ec)
					i++
				}
			})
		})
	}
	b.Run("qps/int/serial", func(b *testing.B) {
		c, _ := NewController(rules.Param{Resource: "r", Threshold: rules.MaxThreshold, Capacity: 2 * benchKeys})
		ec := &entry.Context{Resource: "r", Batch: 1}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			ec.Start = int64(i)
			_ = c.Check(context.Background(), ec, entry.Args{Positional: []any{(i * 31) % benchKeys}}, nil)
			ec.DropUndo() // the entry passed, as the engine does
			ec.ReleaseTickets(entry.ExitInfo{Batch: 1})
		}
	})
}

var sinkHash uint64

// BenchmarkLocate measures how a value is prepared for lookup: one maphash
// for a value of at most maxKeyLen bytes, two (its fingerprint) for a
// longer one, against SHA-256 of the same bytes, the cryptographic
// alternative for the fingerprint.
func BenchmarkLocate(b *testing.B) {
	c := newCache(1000, modeReject)
	for _, n := range []int{16, maxKeyLen, maxKeyLen + 1, 1 << 10, 64 << 10} {
		v := strings.Repeat("x", n)
		b.Run("maphash/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				_, r := c.locate(v)
				sinkHash += r.h ^ r.h2
			}
		})
		bs := []byte(v)
		b.Run("sha256/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				d := sha256.Sum256(bs)
				sinkHash += binary.LittleEndian.Uint64(d[:])
			}
		})
	}
}

// BenchmarkCheckHot measures one check on a single hot value, so that the
// path's own cost shows rather than cache misses: the value as a WithArgs
// argument (an interface) and as a typed one.
func BenchmarkCheckHot(b *testing.B) {
	v := strconv.Itoa(12345) + "-user"
	typed := &entry.Arg{Value: entry.Value{Str: v, Kind: entry.KindString}}
	args := []struct {
		name string
		args entry.Args
	}{
		{"any", entry.Args{Positional: []any{v}}},
		{"typed", entry.Args{Given: []*entry.Arg{typed}}},
	}
	for _, m := range []struct {
		name string
		rule rules.Param
	}{
		{"qps", rules.Param{Resource: "r", Threshold: rules.MaxThreshold}},
		{"concurrency", rules.Param{Resource: "r", Metric: rules.Concurrency, Threshold: rules.MaxThreshold}},
	} {
		c, err := NewController(m.rule)
		if err != nil {
			b.Fatal(err)
		}
		for _, a := range args {
			b.Run(m.name+"/"+a.name, func(b *testing.B) {
				b.ReportAllocs()
				ec := &entry.Context{Resource: "r", Batch: 1}
				for i := 0; b.Loop(); i++ {
					ec.Start = int64(i)
					if be := c.Check(context.Background(), ec, a.args, nil); be != nil {
						b.Fatal(be)
					}
					ec.DropUndo() // the entry passed, as the engine does
					ec.ReleaseTickets(entry.ExitInfo{Batch: 1})
				}
			})
		}
	}
}

// BenchmarkCheckLive measures one passing QPS check with 1,000 and with
// 1,000,000 live values, visited in a scattered order (each call a
// different value, a large odd stride apart), serially and from parallel
// goroutines. Values are typed integers, formatted into the check's stack
// buffer as a caller's argument would be, so that the benchmark's own
// value table adds no cache miss; "string" passes the same values as
// strings kept in a slice (one more miss per call at 1,000,000: the
// string's bytes). The 1,000,000 run over the 1,000 one is the cost of the
// table's and entries' cache and TLB misses.
func BenchmarkCheckLive(b *testing.B) {
	for _, n := range []int{1_000, 1_000_000} {
		c, err := NewController(rules.Param{Resource: "r", Threshold: rules.MaxThreshold, Capacity: 2 * n})
		if err != nil {
			b.Fatal(err)
		}
		var strs []string
		ec := &entry.Context{Resource: "r", Batch: 1, Start: 1}
		for i := 0; i < n; i++ {
			if be := c.Check(context.Background(), ec, entry.Args{Positional: []any{i}}, nil); be != nil {
				b.Fatal(be)
			}
			ec.DropUndo() // the entry passed, as the engine does
			ec.ReleaseTickets(entry.ExitInfo{Batch: 1})
		}
		if c.Tracked() != n {
			b.Fatalf("tracked %d values, want %d", c.Tracked(), n)
		}
		const stride = 7919 // prime, so every value is visited once per n calls
		next := func(j int) int { return (j + stride) % n }
		name := strconv.Itoa(n)
		b.Run(name+"/int/serial", func(b *testing.B) {
			b.ReportAllocs()
			ec := &entry.Context{Resource: "r", Batch: 1}
			j := 0
			for i := 0; b.Loop(); i++ {
				ec.Start = int64(i)
				arg := entry.Arg{Value: entry.Value{Int: int64(j), Kind: entry.KindInt}}
				if be := c.Check(context.Background(), ec, entry.Args{Given: []*entry.Arg{&arg}}, nil); be != nil {
					b.Fatal(be)
				}
				ec.DropUndo() // the entry passed, as the engine does
				ec.ReleaseTickets(entry.ExitInfo{Batch: 1})
				j = next(j)
			}
		})
		b.Run(name+"/int/parallel", func(b *testing.B) {
			b.ReportAllocs()
			var seq atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				ec := &entry.Context{Resource: "r", Batch: 1}
				j := int(seq.Add(1)*50_021) % n
				for i := 0; pb.Next(); i++ {
					ec.Start = int64(i)
					arg := entry.Arg{Value: entry.Value{Int: int64(j), Kind: entry.KindInt}}
					if be := c.Check(context.Background(), ec, entry.Args{Given: []*entry.Arg{&arg}}, nil); be != nil {
						b.Error(be)
						return
					}
					ec.DropUndo() // the entry passed, as the engine does
					ec.ReleaseTickets(entry.ExitInfo{Batch: 1})
					j = next(j)
				}
			})
		})
		b.Run(name+"/string/serial", func(b *testing.B) {
			if strs == nil {
				strs = make([]string, n)
				for i := range strs {
					strs[i] = strconv.Itoa(i)
				}
			}
			b.ReportAllocs()
			ec := &entry.Context{Resource: "r", Batch: 1}
			j := 0
			for i := 0; b.Loop(); i++ {
				ec.Start = int64(i)
				if be := c.CheckKey(context.Background(), ec, strs[j], nil); be != nil {
					b.Fatal(be)
				}
				ec.DropUndo() // the entry passed, as the engine does
				ec.ReleaseTickets(entry.ExitInfo{Batch: 1})
				j = next(j)
			}
		})
	}
}

// BenchmarkBytesPerValue reports the heap a rule keeps per tracked value
// (HeapAlloc after a GC, table, queues and ghost hashes included): n values
// checked once in a rule of capacity 2n (no eviction), 1,000,000 through the
// default capacity (the steady state of churn, ghost set full), and 33-byte
// values (fingerprinted). Each iteration fills a new rule; run it with
// -benchtime 1x.
func BenchmarkBytesPerValue(b *testing.B) {
	for _, tt := range []struct {
		name             string
		n, capacity, pad int
	}{
		{"1000000-of-2000000", 1_000_000, 2_000_000, 0},
		{"10000-of-20000", 10_000, 20_000, 0},
		{"1000000-through-default", 1_000_000, 0, 0},
		{"100000-33B-of-200000", 100_000, 200_000, 24},
	} {
		b.Run(tt.name, func(b *testing.B) {
			pad := strings.Repeat("k", tt.pad)
			var perValue float64
			for b.Loop() {
				var ms runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&ms)
				before := ms.HeapAlloc
				c, err := NewController(rules.Param{Resource: "r", Threshold: rules.MaxThreshold, Capacity: tt.capacity})
				if err != nil {
					b.Fatal(err)
				}
				ec := &entry.Context{Resource: "r", Batch: 1, Start: 1}
				for i := 0; i < tt.n; i++ {
					_ = c.CheckKey(context.Background(), ec, pad+strconv.Itoa(100_000_000+i), nil)
					ec.DropUndo()
					ec.ReleaseTickets(entry.ExitInfo{Batch: 1})
				}
				runtime.GC()
				runtime.ReadMemStats(&ms)
				perValue = float64(ms.HeapAlloc-before) / float64(c.Tracked())
				runtime.KeepAlive(c)
			}
			b.ReportMetric(perValue, "B/value")
		})
	}
}
