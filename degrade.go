package sluice

import (
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// BreakerStatus is the state of one circuit-breaker rule in force.
type BreakerStatus struct {
	// Rule is the rule.
	Rule rules.CircuitBreaker
	// State is its breaker's state as of its last transition (an Open
	// breaker whose retry timeout has passed turns HalfOpen at the next
	// entry).
	State stat.BreakerState
	// Transitions counts the breaker's changes of state, by the state it
	// changed to: Transitions[stat.BreakerOpen] is how many times it opened,
	// Transitions[stat.BreakerHalfOpen] how many probe rounds began and
	// Transitions[stat.BreakerClosed] how many ended in closing. Counts run from
	// when the rule was loaded, and survive a reload that keeps the
	// breaker's state (see LoadRules). They are counted at
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

// A circuit-breaker rule equivalent to one in force (same resource and
// strategy, same StatInterval and, for the slow-request-ratio strategy, same
// MaxAllowedRT) keeps its breaker's state and window across a load: an Open
// breaker stays Open until the same instant, a half-open round goes on. Its
// other fields apply from the next decision. Other rules start Closed with an
// empty window.

// CircuitBreakerStates returns the state of every circuit-breaker rule in
// force, in the order of Rules().CircuitBreaker.
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
