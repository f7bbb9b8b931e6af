package sluice

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/rules"
)

// entrier is an interface a caller might hold an engine behind.
type entrier interface {
	Entry(resource string, opts ...EntryOption) (Pass, error)
}

// entryThrough calls Entry through an interface the compiler cannot see
// through (no devirtualization, no inlining).
//
//go:noinline
func entryThrough(e entrier, res string, opts ...EntryOption) (Pass, error) {
	return e.Entry(res, opts...)
}

// TestAllocEntryCallForms: Entry allocates nothing whichever way it is
// called (run without -race, which changes inlining: make allocs). The Pass
// is a value of two words, and the entry's state lives in a recycled record
// whose generation keeps a second Exit, or one on a stale copy, from
// releasing a later entry (docs/design/benchmarks.md, "Allocations by call
// form"). The options never escape (see enter).
//
// One allocation is not Entry's: the array of a variadic call the compiler
// cannot see through (a method value or an interface) is moved to the heap
// by the caller's escape analysis, whatever the callee does with it. Those
// forms must allocate exactly what the same call of a function that ignores
// its options allocates; the same options built once and passed as a slice
// cost nothing.
func TestAllocEntryCallForms(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes inlining; make allocs runs this without it")
	}
	g, _ := newTestEngine(t, 0)
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "r", Threshold: 1e12}}}))
	methodValue := g.Entry
	var iface entrier = g
	opts := []EntryOption{WithBatch(2), WithIntArg(0, 7)}
	tests := []struct {
		name string
		run  func()
	}{
		{"direct", func() { p, _ := g.Entry("r"); p.Exit() }},
		{"direct with options", func() { p, _ := g.Entry("r", WithBatch(2), WithIntArg(0, 7)); p.Exit() }},
		{"method value", func() { p, _ := methodValue("r"); p.Exit() }},
		{"interface", func() { p, _ := entryThrough(iface, "r"); p.Exit() }},
		{"method value with an options slice", func() { p, _ := methodValue("r", opts...); p.Exit() }},
		{"interface with an options slice", func() { p, _ := entryThrough(iface, "r", opts...); p.Exit() }},
		{"package-level", func() { p, _ := Entry("alloc-forms"); p.Exit() }},
		{"Do", func() { _ = g.Do("r", func() error { return nil }) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			allocs, bytes := allocsAndBytes(tt.run)
			assert.Equal(t, int64(0), allocs, "allocations per call")
			assert.Equal(t, int64(0), bytes, "bytes per call")
		})
	}

	// The caller's variadic array, and nothing more.
	ignore := func(string, ...EntryOption) (Pass, error) { return Pass{}, nil }
	var ignoring entrier = ignoreOptions{}
	for _, tt := range []struct {
		name           string
		run, arrayOnly func()
	}{
		{"method value with options",
			func() { p, _ := methodValue("r", WithBatch(2), WithIntArg(0, 7)); p.Exit() },
			func() { p, _ := opaque(ignore)("r", WithBatch(2), WithIntArg(0, 7)); p.Exit() }},
		{"interface with options",
			func() { p, _ := entryThrough(iface, "r", WithBatch(2), WithIntArg(0, 7)); p.Exit() },
			func() { p, _ := entryThrough(ignoring, "r", WithBatch(2), WithIntArg(0, 7)); p.Exit() }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			allocs, bytes := allocsAndBytes(tt.run)
			arrayAllocs, arrayBytes := allocsAndBytes(tt.arrayOnly)
			assert.Equal(t, int64(1), arrayAllocs, "the control allocates the array")
			assert.Equal(t, arrayAllocs, allocs, "allocations per call")
			assert.Equal(t, arrayBytes, bytes, "bytes per call")
		})
	}
}

// ignoreOptions is an entrier that ignores its options.
type ignoreOptions struct{}

func (ignoreOptions) Entry(string, ...EntryOption) (Pass, error) { return Pass{}, nil }

// opaque returns f through a call the compiler does not inline.
//
//go:noinline
func opaque(f func(string, ...EntryOption) (Pass, error)) func(string, ...EntryOption) (Pass, error) {
	return f
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
