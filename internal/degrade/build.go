package degrade

import (
	"cmp"

	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/ruledef"
	"github.com/sluice-go/sluice/rules"
)

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
	return stateKey{resource: r.Resource, strategy: cmp.Or(r.Strategy, rules.SlowRequestRatio), interval: int64(cmp.Or(r.StatInterval, ruledef.StatInterval)), maxRT: int64(r.MaxAllowedRT)}
}

// NewBreaker returns a Closed breaker for rule r, reporting transitions to
// hub (a private hub counting every non-nil error when hub is nil).
func NewBreaker(r rules.CircuitBreaker, hub *Hub) (*Breaker, error) {
	if err := (&rules.Set{CircuitBreaker: []rules.CircuitBreaker{r}}).Validate(); err != nil {
		return nil, err
	}
	if hub == nil {
		hub = NewHub(nil)
	}
	return newBreaker(r, hub, nil), nil
}

// newBreaker builds the breaker of valid rule r, taking over st when it is
// not nil. It changes nothing in st: Use puts the new rule in force there.
func newBreaker(r rules.CircuitBreaker, hub *Hub, st *state) *Breaker {
	c := newParams(r, hub.isFailure)
	if st == nil {
		st = &state{hub: hub}
		st.cur.Store(closedPhase(st, 0, c))
		st.cfg.Store(c)
	}
	b := &Breaker{rule: r, cfg: c, st: st, closedClock: entry.ExitTimed, refusals: new(entry.Refusals)}
	if !c.slow {
		b.closedClock = entry.ExitTimedIfGate
	}
	return b
}

// Build returns the breakers of rs grouped by resource, in rule order. The
// rules must be valid: the engine validates every rule before building. A
// rule equivalent to the rule of a breaker in old (same resource and
// strategy, same StatInterval and, for the slow-request-ratio strategy, same
// MaxAllowedRT) takes over that breaker's state: its phase (Open stays Open
// until the same instant, a half-open round goes on with its probes) and its
// window. Each old breaker is taken over at most once.
//
// Build changes nothing the breakers in old use, so its result may be
// dropped. Use puts it in force: from then on the taken-over states judge
// exits by the new rules' other fields (Threshold, MinRequestAmount,
// RetryTimeout, Probes, ID), also for calls admitted before the reload; a
// phase already begun keeps its retry timeout and probe count. Old breakers
// must not be used for new calls after Use. A nil hub gets a private one
// that counts every non-nil error.
func Build(rs []rules.CircuitBreaker, old map[string][]*Breaker, hub *Hub) map[string][]*Breaker {
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
	return out
}

// Use puts breakers returned by Build in force in the states they share
// with their predecessors (see Build).
func Use(bs map[string][]*Breaker) {
	for _, list := range bs {
		for _, b := range list {
			b.st.cfg.Store(b.cfg)
		}
	}
}
