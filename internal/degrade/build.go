package degrade

import "github.com/sluice-go/sluice/rules"

// stateKey identifies the state a breaker can hand to its successor when
// rules are reloaded: same resource, and a window that counts the same
// outcomes over the same interval.
type stateKey struct {
	resource string
	strategy rules.BreakerStrategy
	interval int64
	maxRT    int64
}

func keyOf(r *rules.CircuitBreaker) stateKey {
	return stateKey{resource: r.Resource, strategy: r.Strategy, interval: int64(r.Interval()), maxRT: int64(r.MaxAllowedRT)}
}

// NewBreaker returns a Closed breaker for rule r, reporting transitions to
// hub (a private hub counting every non-nil error when hub is nil).
func NewBreaker(r rules.CircuitBreaker, hub *Hub) (*Breaker, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if hub == nil {
		hub = NewHub(nil)
	}
	return newBreaker(r, hub, nil), nil
}

// newBreaker builds the breaker of valid rule r, taking over st when it is
// not nil.
func newBreaker(r rules.CircuitBreaker, hub *Hub, st *state) *Breaker {
	c := newParams(r, hub.isFailure)
	if st == nil {
		st = &state{hub: hub}
		st.cur.Store(closedPhase(0, c))
	}
	st.cfg.Store(c)
	return &Breaker{rule: r, cfg: c, st: st}
}

// Build validates every rule first and, only if all are valid, returns the
// breakers grouped by resource, in rule order. A rule equivalent to the rule
// of a breaker in old (same resource and strategy, same StatInterval and,
// for the slow-request-ratio strategy, same MaxAllowedRT) takes over that
// breaker's state: its phase (Open stays Open until the same instant, a
// half-open round goes on with its probes) and its window. Its other fields
// (Threshold, MinRequestAmount, RetryTimeout, Probes, ID) apply from the
// next decision, also to calls admitted before the reload; a phase already
// begun keeps its retry timeout and probe count. Each old breaker is taken
// over at most once; old breakers must not be used for new calls after
// Build returns.
//
// The error names the offending rule's index, resource and field (an
// *rules.Error). A nil hub gets a private one that counts every non-nil
// error.
func Build(rs []rules.CircuitBreaker, old map[string][]*Breaker, hub *Hub) (map[string][]*Breaker, error) {
	for i := range rs {
		if err := rs[i].Validate(); err != nil {
			return nil, rules.At(err, i)
		}
	}
	if hub == nil {
		hub = NewHub(nil)
	}
	pool := make(map[stateKey][]*state)
	for _, bs := range old {
		for _, b := range bs {
			k := keyOf(&b.rule)
			pool[k] = append(pool[k], b.st)
		}
	}
	out := make(map[string][]*Breaker, len(rs))
	for i := range rs {
		r := rs[i]
		var st *state
		k := keyOf(&r)
		if prev := pool[k]; len(prev) > 0 {
			st = prev[0]
			pool[k] = prev[1:]
		}
		out[r.Resource] = append(out[r.Resource], newBreaker(r, hub, st))
	}
	return out, nil
}
