package flow

import (
	"fmt"
	"math"

	"github.com/sluice-go/sluice/rules"
)

// Build validates every rule first and, only if all are valid, returns the
// controllers grouped by resource, in rule order. A rule that counts the same
// way as a controller in old (same resource, metric, sections,
// window kind, interval and associated resource) takes over that
// controller's counting state, so reloading rules under traffic neither resets counters nor admits a
// fresh burst. Each old controller is inherited at most once.
//
// A cluster rule (rules.Flow.Cluster set) enforces its budget through a
// lease.Limiter of cl's Manager: an unchanged rule (same resource, behavior,
// interval, threshold, queueing and cluster section) keeps the Limiter of
// its predecessor, and with it the leases it holds; a new or changed one
// gets a new Limiter. When Build succeeds, the Limiters of old cluster rules
// that no rule inherited are closed (their unused permits go back to the
// store): old must then go out of force, as it does right after a
// successful build. When it fails, it closes the Limiters it made and
// changes nothing. A nil cl refuses cluster rules.
//
// The error names the offending rule's index, resource and field (an
// *rules.Error).
//
// complexity: validates each rule, builds its controller and carries state over from the old one, per rule kind
func Build(rs []rules.Flow, old map[string][]*Controller, nodes NodeFunc, cl *Leases) (map[string][]*Controller, error) {
	for i := range rs {
		if err := (&rules.Set{Flow: rs[i : i+1]}).Validate(); err != nil {
			err.(*rules.Error).Index = i
			return nil, err
		}
		if rs[i].Cluster != nil && cl == nil {
			return nil, &rules.Error{Kind: "flow", Index: i, Resource: rs[i].Resource, Field: "Cluster", Reason: errNoCluster}
		}
	}
	pool := make(map[stateKey][]*Controller)
	for _, cs := range old {
		for _, c := range cs {
			pool[c.key()] = append(pool[c.key()], c)
		}
	}
	built := make([]*Controller, len(rs))
	var unexact []carriedLog
	for i := range rs {
		c := newController(rs[i], nodes)
		k := c.key()
		if prev := pool[k]; len(prev) > 0 {
			c.c.inherit(prev[0].c)
			pool[k] = prev[1:]
		} else if from := switchedExact(pool, k); from != nil {
			// The same rule with Exact switched: the count carries over.
			if o, ok := from.c.(*reject); ok {
				if nc, ok := c.c.(*exact); ok {
					nc.log.seedFrom(o.win, o.width)
				}
			}
			if o, ok := from.c.(*exact); ok {
				if nc, ok := c.c.(*reject); ok {
					unexact = append(unexact, carriedLog{to: nc, times: o.log.recent(o.interval)})
				}
			}
		}
		built[i] = c
	}
	if err := attachSlots(built, cl); err != nil {
		return nil, err
	}
	if err := attachLimiters(built, cl); err != nil {
		return nil, err
	}
	attachQuotas(built, cl)
	// The old controllers nobody inherited are dropped: a resource's own
	// window one of them held goes to the first new controller that needs
	// a window, fresh, as a window of its own would be.
	for _, cs := range pool {
		for _, c := range cs {
			c.releaseWindow(nodes)
			if k, ok := c.c.(*clusterRule); ok {
				k.close()
			}
		}
	}
	out := make(map[string][]*Controller, len(rs))
	for _, c := range built {
		c.attachWindow(nodes)
		res := c.c.enforced().Resource
		out[res] = append(out[res], c)
	}
	for _, u := range unexact {
		for _, t := range u.times {
			u.to.win.TryAdd(t/u.to.width, 1, math.Inf(1))
		}
	}
	return out, nil
}

// switchedExact returns an old controller of pool that counts as a
// controller of key k would but with Exact the other way, if there is one.
// Its count carries over to the new rule (which does not take it over: it
// stays in pool). Switching Exact on, the new rule's admission log starts
// with the old window's admissions, each at the end of its bucket (see
// admissionLog.seedFrom); switching it off, the new window starts with the
// old log's admissions of the last interval, each in its own bucket.
func switchedExact(pool map[stateKey][]*Controller, k stateKey) *Controller {
	k.exact = !k.exact
	prev := pool[k]
	if len(prev) == 0 {
		return nil
	}
	switch prev[0].c.(type) {
	case *reject, *exact:
		return prev[0]
	}
	return nil
}

// carriedLog is the admissions of an exact rule's log that a rule without
// Exact replacing it counts in its window.
type carriedLog struct {
	to    *reject
	times []int64
}

// attachLimiters gives every cluster rule of built that inherited no
// Limiter a new one. On failure it closes the ones it made.
func attachLimiters(built []*Controller, cl *Leases) error {
	var made []*clusterRule
	for i, c := range built {
		k, ok := c.c.(*clusterRule)
		if !ok || k.lim != nil {
			continue
		}
		lim, err := cl.newLimiter(&k.rule)
		if err != nil {
			for _, m := range made {
				m.close()
			}
			return &rules.Error{Kind: "flow", Index: i, Resource: k.rule.Resource, Field: "Cluster", Reason: fmt.Sprint(err)}
		}
		k.lim = lim
		made = append(made, k)
	}
	return nil
}
