package flow

import "github.com/sluice-go/sluice/rules"

// Build validates every rule first and, only if all are valid, returns the
// controllers grouped by resource, in rule order. A rule that counts the same
// way as a controller in old (same resource, metric, strategy, behavior,
// window kind, interval and associated resource) takes over that
// controller's counting state, so reloading rules under traffic neither resets counters nor admits a
// fresh burst. Each old controller is inherited at most once.
//
// The error names the offending rule's index, resource and field (an
// *rules.Error).
func Build(rs []rules.Flow, old map[string][]*Controller, nodes NodeFunc) (map[string][]*Controller, error) {
	for i := range rs {
		if err := rs[i].Validate(); err != nil {
			return nil, rules.At(err, i)
		}
	}
	pool := make(map[stateKey][]*Controller)
	for _, cs := range old {
		for _, c := range cs {
			pool[c.key()] = append(pool[c.key()], c)
		}
	}
	built := make([]*Controller, len(rs))
	for i := range rs {
		c, err := newController(rs[i], nodes)
		if err != nil {
			return nil, rules.At(err, i)
		}
		k := c.key()
		if prev := pool[k]; len(prev) > 0 {
			c.c.inherit(prev[0].c)
			pool[k] = prev[1:]
		}
		built[i] = c
	}
	// The old controllers nobody inherited are dropped: a resource's own
	// window one of them held goes to the first new controller that needs
	// a window, fresh, as a window of its own would be.
	for _, cs := range pool {
		for _, c := range cs {
			c.releaseWindow(nodes)
		}
	}
	out := make(map[string][]*Controller, len(rs))
	for _, c := range built {
		c.attachWindow(nodes)
		res := c.c.enforced().Resource
		out[res] = append(out[res], c)
	}
	return out, nil
}
