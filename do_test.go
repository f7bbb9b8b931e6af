package sluice

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// TestDoCountsAPanicAsAnError: a breaker that opens on one error opens when
// fn panics inside Do (gobreaker counts a panic as a failure too); the panic
// reaches the caller unchanged, after the entry exited. With `defer
// p.Exit()` the same panic is a success for the breaker, which Do exists to
// avoid.
func TestDoCountsAPanicAsAnError(t *testing.T) {
	cb := rules.CircuitBreaker{Resource: "pay", Strategy: rules.ErrorCount, Threshold: 1, MinRequestAmount: 1, RetryTimeout: time.Second}

	// The old way: the panic passes as a success.
	g, _, _ := cbEngine(t, []rules.CircuitBreaker{cb})
	require.Panics(t, func() {
		p, err := g.Entry("pay")
		require.NoError(t, err)
		defer p.Exit()
		panic("boom")
	})
	assert.Equal(t, []stat.BreakerState{stat.BreakerClosed}, states(g), "defer p.Exit() counts a panic as a success")

	// Do: the panic is an error, the breaker opens, the next call is refused
	// without running fn.
	g, _, log := cbEngine(t, []rules.CircuitBreaker{cb})
	_, err := loadFlow(g, []rules.Flow{{Metric: rules.Concurrency, Resource: "pay", Threshold: 1}})
	require.NoError(t, err)
	require.PanicsWithValue(t, "boom", func() {
		_ = g.Do("pay", func() error { panic("boom") })
	})
	assert.Equal(t, []stat.BreakerState{stat.BreakerOpen}, states(g))
	require.Len(t, log.ts, 1)
	s, ok := g.Snapshot("pay")
	require.True(t, ok)
	assert.Zero(t, s.Concurrency, "the entry exited before the panic went on")
	assert.Equal(t, uint64(1), s.TotalError)

	ran := false
	err = g.Do("pay", func() error { ran = true; return nil })
	require.ErrorIs(t, err, core.ErrBlocked)
	var be *core.BlockError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, core.BlockDegrade, be.Type)
	assert.False(t, ran, "a refused call does not run fn")
}

// TestDoReturnsFnError: Do returns fn's error, as it is, and records it for
// breakers and statistics; a nil error is a success.
func TestDoReturnsFnError(t *testing.T) {
	cb := rules.CircuitBreaker{Resource: "pay", Strategy: rules.ErrorCount, Threshold: 2, MinRequestAmount: 1, RetryTimeout: time.Second}
	g, _, _ := cbEngine(t, []rules.CircuitBreaker{cb})
	errWork := errors.New("work failed")
	require.NoError(t, g.Do("pay", func() error { return nil }))
	require.Same(t, errWork, g.Do("pay", func() error { return errWork }))
	s, _ := g.Snapshot("pay")
	assert.Equal(t, uint64(2), s.TotalPass)
	assert.Equal(t, uint64(1), s.TotalError)
	require.Same(t, errWork, g.DoContext(context.Background(), "pay", func() error { return errWork }))
	assert.Equal(t, []stat.BreakerState{stat.BreakerOpen}, states(g))

	// Entry errors other than blocks come back too, and fn does not run.
	ran := false
	require.ErrorIs(t, g.Do("", func() error { ran = true; return nil }), ErrBadResource)
	assert.False(t, ran)
}

// TestDoPackageLevel: the package-level Do and DoContext use the default
// engine.
func TestDoPackageLevel(t *testing.T) {
	err := LoadRules(rules.Set{Flow: []rules.Flow{{Metric: rules.Concurrency, Resource: "do-pkg", Threshold: 1}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = LoadRules(rules.Set{}) })
	inner := errors.New("inner")
	err = Do("do-pkg", func() error {
		// The one slot is held: a nested call is refused.
		return DoContext(context.Background(), "do-pkg", func() error { return inner })
	})
	var nb *NestedBlockError
	require.ErrorAs(t, err, &nb, "the outer Do ran: the refusal is the nested one's")
	require.ErrorIs(t, nb.Err, core.ErrBlocked)
	require.NoError(t, Do("do-pkg", func() error { return nil }))
}

func TestDoAllocatesNothing(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	_, err := loadFlow(g, []rules.Flow{{Resource: "r", Threshold: 1e12}, {Metric: rules.Concurrency, Resource: "r", Threshold: 1e9}})
	require.NoError(t, err)
	n := 0
	work := func() error { n++; return nil }
	ctx := context.Background()
	tests := []struct {
		name string
		run  func()
	}{
		{"engine", func() { _ = g.Do("r", work) }},
		{"engine with a closure", func() { _ = g.Do("r", func() error { n++; return nil }) }},
		{"engine with options", func() { _ = g.Do("r", work, WithBatch(2), WithStringArg(0, "u")) }},
		{"engine with context", func() { _ = g.DoContext(ctx, "r", work) }},
		{"package level", func() { _ = Do("r", func() error { n++; return nil }) }},
		{"package level with context", func() { _ = DoContext(ctx, "r", work) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if raceEnabled && strings.HasPrefix(tt.name, "package level") {
				t.Skip("the race detector changes inlining; make test checks this without -race (make allocs)")
			}
			assert.Zero(t, testing.AllocsPerRun(200, tt.run))
		})
	}
	require.Positive(t, n)
}

// BenchmarkDo is BenchmarkEntryExit/serial through Do, beside Entry+Exit.
func BenchmarkDo(b *testing.B) {
	work := func() error { return nil }
	b.Run("do", func(b *testing.B) {
		g := benchEngine(b, "r")
		b.ReportAllocs()
		for b.Loop() {
			if err := g.Do("r", work); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("entry-exit", func(b *testing.B) {
		g := benchEngine(b, "r")
		b.ReportAllocs()
		for b.Loop() {
			p, err := g.Entry("r")
			if err != nil {
				b.Fatal(err)
			}
			p.SetError(work())
			p.Exit()
		}
	})
}

// TestDoNestedRefusal: with the one slot of a concurrency-1 rule on inner
// held, Do("outer", fn) where fn returns Do("inner", ...) returns a
// *NestedBlockError that does not match ErrBlocked (outer's fn ran), from
// which errors.As reads inner's refusal; the error-count breaker on outer,
// which opens on one failure, stays closed and outer's error statistics stay
// at zero. Three levels deep, the middle Do's NestedBlockError comes back
// unchanged. A refusal of outer itself still matches ErrBlocked.
func TestDoNestedRefusal(t *testing.T) {
	cb := rules.CircuitBreaker{Resource: "outer", Strategy: rules.ErrorCount, Threshold: 1, MinRequestAmount: 1, RetryTimeout: time.Second}
	g, _, log := cbEngine(t, []rules.CircuitBreaker{cb})
	_, err := loadFlow(g, []rules.Flow{{Metric: rules.Concurrency, Resource: "inner", Threshold: 1}})
	require.NoError(t, err)
	held, err := g.Entry("inner")
	require.NoError(t, err)
	defer held.Exit()

	ranOuter, ranInner := 0, 0
	for i := 0; i < 5; i++ {
		err := g.Do("outer", func() error {
			ranOuter++
			return g.Do("inner", func() error { ranInner++; return nil })
		})
		require.Error(t, err)
		assert.NotErrorIs(t, err, core.ErrBlocked, "outer's fn ran: not outer's refusal")
		var nb *NestedBlockError
		require.ErrorAs(t, err, &nb)
		assert.Equal(t, "outer", nb.Resource)
		var be *core.BlockError
		require.ErrorAs(t, nb.Err, &be)
		assert.Equal(t, "inner", be.Resource)
		assert.Equal(t, core.BlockFlow, be.Type)
		assert.Equal(t, `sluice: "outer" ran and returned a refusal: `+be.Error(), err.Error())
	}
	assert.Equal(t, 5, ranOuter)
	assert.Zero(t, ranInner)
	assert.Equal(t, []stat.BreakerState{stat.BreakerClosed}, states(g), "an inner refusal is not outer's failure")
	assert.Empty(t, log.ts)
	s, _ := g.Snapshot("outer")
	assert.Equal(t, uint64(5), s.TotalPass)
	assert.Zero(t, s.TotalError)

	// Three levels: "top" gets the NestedBlockError of "outer" as fn's
	// (non-refusal) error, as it is.
	err = g.Do("top", func() error {
		return g.Do("outer", func() error { return g.Do("inner", func() error { return nil }) })
	})
	var nb *NestedBlockError
	require.ErrorAs(t, err, &nb)
	assert.Equal(t, "outer", nb.Resource)
	assert.NotErrorIs(t, err, core.ErrBlocked)

	// A wrapped refusal is a refusal too.
	err = g.Do("outer", func() error {
		_, err := g.Entry("inner")
		return fmt.Errorf("reserving: %w", err)
	})
	require.ErrorAs(t, err, &nb)
	assert.NotErrorIs(t, err, core.ErrBlocked)

	// Outer's own refusal: a real failure opens its breaker; then Do is
	// refused, fn does not run, and the error matches ErrBlocked.
	errWork := errors.New("work failed")
	require.Same(t, errWork, g.Do("outer", func() error { return errWork }))
	assert.Equal(t, []stat.BreakerState{stat.BreakerOpen}, states(g))
	ran := false
	err = g.Do("outer", func() error { ran = true; return nil })
	require.ErrorIs(t, err, core.ErrBlocked)
	assert.False(t, ran)
	assert.False(t, errors.As(err, &nb))
}
