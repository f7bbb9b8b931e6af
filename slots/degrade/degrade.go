// Package degrade is the circuit-breaker slot. (Contract stub: issue 4
// implements it.)
package degrade

import (
	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/rules"
)

// Breaker enforces one circuit-breaker rule.
type Breaker struct{ rule rules.CircuitBreaker }

// Rule returns the rule the breaker enforces.
func (b *Breaker) Rule() rules.CircuitBreaker { return b.rule }

// Check decides on one entry at ec.Start; when it passes, it records a ticket
// on ec whose Release feeds the outcome (RT, error) back to the breaker.
func (b *Breaker) Check(ec *core.EntryContext) *core.BlockError { return nil }

// Build validates every rule first and returns the breakers by resource; an
// equivalent rule keeps its old breaker's state.
func Build(rs []rules.CircuitBreaker, old map[string][]*Breaker, clock core.Clock) (map[string][]*Breaker, error) {
	for i := range rs {
		if err := rs[i].Validate(); err != nil {
			return nil, rules.At(err, i)
		}
	}
	out := map[string][]*Breaker{}
	for _, r := range rs {
		out[r.Resource] = append(out[r.Resource], &Breaker{rule: r})
	}
	return out, nil
}
