package sluice

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/rules"
)

// slotEngine is an engine with a concurrency limit of 1 on "r", and
// helpers reading and probing the one slot.
func slotEngine(t *testing.T) (g *Engine, inFlight func() int64, holdsTheSlot func(string)) {
	t.Helper()
	g, _ = newTestEngine(t, 0)
	_, err := loadFlow(g, []rules.Flow{{Metric: rules.Concurrency, Resource: "r", Threshold: 1}})
	require.NoError(t, err)
	inFlight = func() int64 {
		s, ok := g.Snapshot("r")
		require.True(t, ok)
		return s.Concurrency
	}
	holdsTheSlot = func(name string) {
		t.Helper()
		p, err := g.Entry("r")
		require.ErrorIs(t, err, core.ErrBlocked, "%s: a second caller got the one slot", name)
		require.Equal(t, Pass{}, p, "%s: a refusal returns the zero Pass", name)
		require.Equal(t, int64(1), inFlight(), name)
	}
	return g, inFlight, holdsTheSlot
}

// reusing enters "r" until the entry gets rec, the record of an exited
// Pass, and returns it. Records come from a sync.Pool, which hands the
// last one put back to the next Get on the same P, except when the race
// detector drops it on purpose: then the caller tries again with a new
// record (ok false).
func reusing(t *testing.T, g *Engine, rec *passRecord) (q Pass, ok bool) {
	t.Helper()
	q, err := g.Entry("r")
	require.NoError(t, err)
	if q.rec != rec {
		q.Exit()
		return Pass{}, false
	}
	return q, true
}

// TestPassCopyReleasesOnce: under a concurrency limit of 1, exiting a Pass
// and a copy of it (in either order) releases one slot, not two: the
// in-flight count never goes below zero, and two callers never hold the one
// slot.
func TestPassCopyReleasesOnce(t *testing.T) {
	g, inFlight, holdsTheSlot := slotEngine(t)
	for _, copyFirst := range []bool{false, true} {
		p, err := g.Entry("r")
		require.NoError(t, err)
		cp := p
		if copyFirst {
			cp.Exit()
			p.Exit()
		} else {
			p.Exit()
			cp.Exit()
		}
		require.Equal(t, int64(0), inFlight(), "copy first: %v", copyFirst)
		q, err := g.Entry("r")
		require.NoError(t, err)
		holdsTheSlot("after a pass and its copy exited")
		q.Exit()
		require.Equal(t, int64(0), inFlight())
	}
}

// TestPassStaleExitAfterReuse: a Pass exited, whose record then went to a
// later entry q, exits again (itself and a copy): nothing happens. q still
// holds its concurrency slot, and q.Exit releases it.
func TestPassStaleExitAfterReuse(t *testing.T) {
	g, inFlight, holdsTheSlot := slotEngine(t)
	reused := 0
	for i := 0; i < 200 && reused < 20; i++ {
		p, err := g.Entry("r")
		require.NoError(t, err)
		cp := p
		p.Exit()
		q, ok := reusing(t, g, p.rec)
		if !ok {
			continue
		}
		reused++
		require.NotEqual(t, p.gen, q.gen, "a new generation for the new entry")
		p.Exit()
		cp.Exit()
		holdsTheSlot("a stale Pass exited while a later entry holds its record")
		q.Exit()
		require.Equal(t, int64(0), inFlight(), "q.Exit released the slot")
		q, err = g.Entry("r")
		require.NoError(t, err, "the slot is free again")
		q.Exit()
	}
	require.GreaterOrEqual(t, reused, 10, "records were reused")
}

// TestPassStaleSetErrorAfterReuse: SetError on a stale Pass writes nothing
// into the record's new entry: the new entry exits as a success.
func TestPassStaleSetErrorAfterReuse(t *testing.T) {
	g, _, _ := slotEngine(t)
	reused := 0
	for i := 0; i < 200 && reused < 20; i++ {
		p, err := g.Entry("r")
		require.NoError(t, err)
		p.Exit()
		q, ok := reusing(t, g, p.rec)
		if !ok {
			continue
		}
		reused++
		p.SetError(errors.New("stale"))
		require.NoError(t, q.rec.err, "a stale SetError wrote into a later entry")
		q.Exit()
	}
	require.GreaterOrEqual(t, reused, 10, "records were reused")
	s, _ := g.Snapshot("r")
	assert.Equal(t, uint64(0), s.TotalError)
	assert.Equal(t, s.TotalPass, s.TotalComplete)
}

// TestPassZeroIsInert: every method of the zero Pass does nothing.
func TestPassZeroIsInert(t *testing.T) {
	var p Pass
	require.NotPanics(t, func() {
		p.SetError(errors.New("x"))
		p.Exit()
		p.Exit()
	})
}

// TestPassCopiesAcrossGoroutines (run it with -race): copies of Passes
// exit and set errors from other goroutines while the records they name go
// to new entries of another resource. Each entry is released exactly once
// (completions equal passes, nothing left in flight), the new entries,
// which set no error, record none (no stale SetError reaches them), and the
// race detector sees no unsynchronized access to a record.
func TestPassCopiesAcrossGoroutines(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	_, err := loadFlow(g, []rules.Flow{
		{Metric: rules.Concurrency, Resource: "copied", Threshold: 1e6},
		{Metric: rules.Concurrency, Resource: "fresh", Threshold: 1e6},
	})
	require.NoError(t, err)
	const (
		rounds = 300
		copies = 3
	)
	errStale := errors.New("stale")
	var exits atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < rounds; i++ {
		p, err := g.Entry("copied")
		require.NoError(t, err)
		for c := 0; c < copies; c++ {
			cp := p
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; k < 3; k++ {
					cp.SetError(errStale)
				}
				cp.Exit()
				exits.Add(1)
				cp.SetError(errStale) // after Exit: nothing
			}()
		}
		// The owner goes on entering and exiting another resource, with
		// records that include the copies' one once it is exited.
		for k := 0; k < 4; k++ {
			q, err := g.Entry("fresh")
			require.NoError(t, err)
			q.SetError(nil)
			q.Exit()
		}
		p.Exit()
	}
	wg.Wait()
	require.Equal(t, int64(rounds*copies), exits.Load())
	copied, _ := g.Snapshot("copied")
	assert.Equal(t, uint64(rounds), copied.TotalPass)
	assert.Equal(t, uint64(rounds), copied.TotalComplete, "each entry released once")
	assert.Equal(t, int64(0), copied.Concurrency)
	fresh, _ := g.Snapshot("fresh")
	assert.Equal(t, uint64(rounds*4), fresh.TotalComplete)
	assert.Equal(t, uint64(0), fresh.TotalError, "a stale SetError reached a later entry")
	assert.Equal(t, int64(0), fresh.Concurrency)
}

// TestPassSetErrorOnCopyBeforeExit: an error set on a copy before the
// entry exits is the entry's outcome, whichever copy exits.
func TestPassSetErrorOnCopyBeforeExit(t *testing.T) {
	g, _, _ := slotEngine(t)
	p, err := g.Entry("r")
	require.NoError(t, err)
	cp := p
	cp.SetError(errors.New("failed"))
	p.Exit()
	s, _ := g.Snapshot("r")
	assert.Equal(t, uint64(1), s.TotalError)
}
