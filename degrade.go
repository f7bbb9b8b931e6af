package sluice

import (
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// Circuit-breaker types, re-exported from package stat.
type (
	// BreakerState is a circuit breaker's state: BreakerClosed, BreakerOpen
	// or BreakerHalfOpen.
	BreakerState = stat.BreakerState
	// BreakerTransition is one change of a circuit breaker's state: the
	// resource, the rule in force, from and to, the value that caused it and
	// the clock reading.
	BreakerTransition = stat.BreakerTransition
	// BreakerListener receives circuit-breaker state changes (see
	// Engine.AddBreakerListener).
	BreakerListener = func(stat.BreakerTransition)
)

const (
	// BreakerClosed lets calls through and counts their outcomes.
	BreakerClosed = stat.BreakerClosed
	// BreakerOpen refuses every call until the rule's retry timeout passes.
	BreakerOpen = stat.BreakerOpen
	// BreakerHalfOpen lets the rule's number of probe calls through.
	BreakerHalfOpen = stat.BreakerHalfOpen
)

// BreakerStatus is the state of one circuit-breaker rule in force.
type BreakerStatus struct {
	// Rule is the rule.
	Rule rules.CircuitBreaker
	// State is its breaker's state as of its last transition (an Open
	// breaker whose retry timeout has passed turns HalfOpen at the next
	// entry).
	State BreakerState
	// Transitions counts the breaker's changes of state, by the state it
	// changed to: Transitions[BreakerOpen] is how many times it opened,
	// Transitions[BreakerHalfOpen] how many probe rounds began and
	// Transitions[BreakerClosed] how many ended in closing. Counts run from
	// when the rule was loaded, and survive a reload that keeps the
	// breaker's state (see LoadCircuitBreakerRules). They are counted at
	// the transition, never on the request path of a decision that keeps
	// the state.
	Transitions [3]uint64
}

// WithErrorClassifier sets which errors recorded with Pass.SetError count as
// failures for circuit breakers: an error counts when isFailure returns
// true. For example, to ignore callers that gave up:
//
//	sluice.WithErrorClassifier(func(err error) bool { return !errors.Is(err, context.Canceled) })
//
// isFailure is called at Exit with each non-nil error of an entry on a
// resource with circuit breakers, and must be safe for concurrent use. Nil
// (the default) counts every non-nil error. The error statistics of
// resources (stat.Snapshot) count every non-nil error either way.
func WithErrorClassifier(isFailure func(err error) bool) Option {
	return func(cf *config) { cf.isFailure = isFailure }
}

// LoadCircuitBreakerRules replaces every circuit-breaker rule of the engine
// with rs. The whole set is validated first: if any rule is invalid, nothing
// changes and the error (an *rules.Error, reached with errors.As) names the
// rule's index, resource and field.
//
// A rule equivalent to one in force (same resource and strategy, same
// StatInterval and, for the slow-request-ratio strategy, same MaxAllowedRT)
// keeps its breaker's state and window: an Open breaker stays Open until the
// same instant, a half-open round goes on. Its other fields apply from the
// next decision. Other rules start Closed with an empty window.
//
// It reports whether the rules in force changed. Passing nil or an empty
// slice removes all circuit-breaker rules. On a closed engine it returns
// ErrClosed and changes nothing.
func (eng *Engine) LoadCircuitBreakerRules(rs []rules.CircuitBreaker) (bool, error) {
	return load(eng, breakerKind, rs)
}

// CircuitBreakerRules returns a copy of the circuit-breaker rules in force
// (nil when there are none).
func (eng *Engine) CircuitBreakerRules() []rules.CircuitBreaker { return rulesIn(eng, breakerKind) }

// CircuitBreakerStates returns the state of every circuit-breaker rule in
// force, in the order of CircuitBreakerRules.
func (eng *Engine) CircuitBreakerStates() []BreakerStatus {
	eng.mu.Lock()
	defer eng.mu.Unlock()
	out := make([]BreakerStatus, len(eng.breakers.rules))
	seen := make(map[string]int, len(eng.breakers.ctl))
	for i, r := range eng.breakers.rules {
		// Build keeps each resource's breakers in rule order.
		b := eng.breakers.ctl[r.Resource][seen[r.Resource]]
		seen[r.Resource]++
		out[i] = BreakerStatus{Rule: r, State: b.State(), Transitions: b.Transitions()}
	}
	return out
}

// AddBreakerListener registers l to receive every circuit-breaker state
// change of the engine from now on, and returns a function that unregisters
// it.
//
// Listeners receive the changes of all breakers in the order they happened,
// each exactly once, one at a time and outside every lock of the engine.
// They run on the goroutine of an Entry or Exit that made (or was
// delivering) a change, so they should be quick; a listener may call back
// into the engine (Entry, rule loading): the changes it causes are delivered
// after it returns. A panic in a listener propagates to that Entry or Exit;
// later changes are still delivered.
func (eng *Engine) AddBreakerListener(l BreakerListener) (remove func()) {
	return eng.breakerHub.AddListener(l)
}

// LoadCircuitBreakerRules replaces the default engine's circuit-breaker
// rules (see Engine.LoadCircuitBreakerRules).
func LoadCircuitBreakerRules(rs []rules.CircuitBreaker) (bool, error) {
	return defaultEngine().LoadCircuitBreakerRules(rs)
}

// CircuitBreakerRules returns the default engine's circuit-breaker rules.
func CircuitBreakerRules() []rules.CircuitBreaker { return defaultEngine().CircuitBreakerRules() }

// CircuitBreakerStates returns the states of the default engine's circuit
// breakers (see Engine.CircuitBreakerStates).
func CircuitBreakerStates() []BreakerStatus { return defaultEngine().CircuitBreakerStates() }

// AddBreakerListener registers a circuit-breaker listener on the default
// engine (see Engine.AddBreakerListener). It stays with that engine: after
// Close or SetDefault, register it again on the new default engine.
func AddBreakerListener(l BreakerListener) (remove func()) {
	return defaultEngine().AddBreakerListener(l)
}
