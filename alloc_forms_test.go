package sluice

import (
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/rules"
)

// entrier is an interface a caller might hold an engine behind.
type entrier interface {
	Entry(resource string, opts ...EntryOption) (*Pass, error)
}

// entryThrough calls Entry through an interface the compiler cannot see
// through (no devirtualization, no inlining).
//
//go:noinline
func entryThrough(e entrier, res string) (*Pass, error) { return e.Entry(res) }

// TestAllocEntryCallForms pins what Entry allocates for each way of
// calling it (run without -race, which changes inlining: make allocs).
// Called directly, Entry is inlined and its Pass lives in the caller's
// frame: nothing. Through a method value or an interface, Entry is a real
// call, and the *Pass it returns must outlive its frame: one allocation of
// the Pass, and nothing else (the options never escape, see enter). A pool
// of Passes would make that zero, but a Pass handed out again after Exit
// would turn a second Exit, documented to do nothing, into the release of
// someone else's entry (docs/design/benchmarks.md, "Allocations by call form").
func TestAllocEntryCallForms(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes inlining; make allocs runs this without it")
	}
	g, _ := newTestEngine(t, 0)
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "r", Threshold: 1e12}}}))
	methodValue := g.Entry
	var iface entrier = g
	passSize := int64(unsafe.Sizeof(Pass{}))
	optsSize := 2 * int64(unsafe.Sizeof(EntryOption{}))
	tests := []struct {
		name   string
		run    func()
		allocs int64
		bytes  int64 // at most, rounded up to the allocator's size classes
	}{
		{"direct", func() { p, _ := g.Entry("r"); p.Exit() }, 0, 0},
		{"direct with options", func() { p, _ := g.Entry("r", WithBatch(2), WithIntArg(0, 7)); p.Exit() }, 0, 0},
		{"method value", func() { p, _ := methodValue("r"); p.Exit() }, 1, passSize},
		{"interface", func() { p, _ := entryThrough(iface, "r"); p.Exit() }, 1, passSize},
		// The caller makes the options' array; for a call it cannot see
		// through, Go's escape analysis puts it on the heap.
		{"method value with options", func() { p, _ := methodValue("r", WithBatch(2), WithIntArg(0, 7)); p.Exit() }, 2, passSize + optsSize},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			allocs, bytes := allocsAndBytes(tt.run)
			assert.Equal(t, tt.allocs, allocs, "allocations per call")
			assert.LessOrEqual(t, bytes, tt.bytes+tt.bytes/8, "bytes per call")
		})
	}
}

// allocsAndBytes returns the allocations and bytes allocated per call of
// run, over 1,000 calls after one warm-up, as testing.AllocsPerRun counts
// them (on one P).
func allocsAndBytes(run func()) (allocs, bytes int64) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	run()
	const n = 1000
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	for i := 0; i < n; i++ {
		run()
	}
	runtime.ReadMemStats(&b)
	return int64(b.Mallocs-a.Mallocs) / n, int64(b.TotalAlloc-a.TotalAlloc) / n
}
