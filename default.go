package sluice

import (
	"context"
	"sync"

	"go.uber.org/atomic"

	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

var (
	defaultMu  sync.Mutex
	defaultEng *Engine
	defaultPtr atomic.Pointer[Engine]
)

// Default returns the engine the package-level functions act on, creating it
// on first use. It starts no goroutine until a feature that needs one (such
// as system rules) is used; Close stops those.
func Default() *Engine {
	defaultMu.Lock()
	defer defaultMu.Unlock()
	if defaultEng == nil || defaultEng.closed.Load() {
		defaultEng = New()
		defaultPtr.Store(defaultEng)
	}
	return defaultEng
}

// SetDefault replaces the default engine with g (for example one built with
// a custom clock) and returns the previous one, which is not closed.
func SetDefault(g *Engine) *Engine {
	defaultMu.Lock()
	defer defaultMu.Unlock()
	old := defaultEng
	defaultEng = g
	defaultPtr.Store(g)
	return old
}

// defaultEngine is the fast path of Default: after the first call the
// engine is read without locking.
func defaultEngine() *Engine {
	if g := defaultPtr.Load(); g != nil {
		return g
	}
	g := Default()
	defaultPtr.Store(g)
	return g
}

// Entry asks the default engine to enter resource (see Engine.Entry).
func Entry(resource string, opts ...EntryOption) (*Pass, error) {
	return defaultEngine().enter(new(Pass), nil, resource, opts)
}

// EntryContext is Entry with a context that bounds any wait (see
// Engine.EntryContext).
func EntryContext(ctx context.Context, resource string, opts ...EntryOption) (*Pass, error) {
	return defaultEngine().enter(new(Pass), ctx, resource, opts)
}

// LoadFlowRules replaces the default engine's flow rules (see
// Engine.LoadFlowRules).
func LoadFlowRules(rs []rules.Flow) (bool, error) { return defaultEngine().LoadFlowRules(rs) }

// FlowRules returns the default engine's flow rules.
func FlowRules() []rules.Flow { return defaultEngine().FlowRules() }

// LoadIsolationRules replaces the default engine's isolation rules (see
// Engine.LoadIsolationRules).
func LoadIsolationRules(rs []rules.Isolation) (bool, error) {
	return defaultEngine().LoadIsolationRules(rs)
}

// IsolationRules returns the default engine's isolation rules.
func IsolationRules() []rules.Isolation { return defaultEngine().IsolationRules() }

// Snapshot returns the default engine's statistics of a resource.
func Snapshot(resource string) (stat.Snapshot, bool) { return defaultEngine().Snapshot(resource) }

// Close closes the default engine (see Engine.Close). A later package-level
// call starts a fresh default engine.
func Close() error {
	defaultMu.Lock()
	g := defaultEng
	defaultEng = nil
	defaultPtr.Store(nil)
	defaultMu.Unlock()
	if g == nil {
		return nil
	}
	return g.Close()
}
