package sluice

import (
	"context"
	"sync/atomic"
)

// The default engine always exists: making one starts no goroutine (the
// system sampler starts only when system rules need it), and the
// package-level functions need not check for nil (see "Atomics" in
// docs/design/architecture.md for why the pointer is a sync/atomic one).
var defaultPtr atomic.Pointer[Engine]

func init() { defaultPtr.Store(New()) }

// Default returns the engine the package-level functions act on. After
// Close, a fresh default engine takes its place.
func Default() *Engine { return defaultPtr.Load() }

// SetDefault replaces the default engine with eng (for example one built with
// a custom clock) and returns the previous one, which is not closed. A nil eng
// installs a fresh engine.
func SetDefault(eng *Engine) *Engine {
	if eng == nil {
		eng = New()
	}
	return defaultPtr.Swap(eng)
}

// defaultEngine returns the default engine.
func defaultEngine() *Engine { return defaultPtr.Load() }

// Entry asks the default engine to enter resource (see Engine.Entry).
func Entry(resource string, opts ...EntryOption) (Pass, error) {
	return defaultPtr.Load().enter(context.Background(), resource, opts)
}

// EntryContext is Entry with a context that bounds any wait (see
// Engine.EntryContext).
func EntryContext(ctx context.Context, resource string, opts ...EntryOption) (Pass, error) {
	return defaultPtr.Load().enter(ctx, resource, opts)
}
