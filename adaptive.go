package sluice

import (
	"strconv"

	"github.com/sluice-go/sluice/internal/adaptive"
	"github.com/sluice-go/sluice/internal/flow"
	"github.com/sluice-go/sluice/internal/rulewalk"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// The adaptive limit in history and events: a limiter reports each window
// decision that moves its limit (flow.SetAdaptiveHook); the engine records
// the resource's limit then into its node's history (window.Node.RecordLimit,
// the limit in force at the end of each second), and publishes
// stat.EventAdaptive for the material moves (queued under the limiter's
// lock, so in the order of its decisions, and delivered outside it) (adaptive.Change.Material: a
// tenth or more since the last one published, or onto Min or Max). A load
// records the limit of every resource whose adaptive rules it adds, keeps
// or removes (0 when removed). Nothing of this runs per entry.

// hookAdaptive connects the adaptive rules among ctl, built over old, to
// the engine and records each concerned resource's limit at the load. err
// is the build's: a refused load records nothing.
func (eng *Engine) hookAdaptive(old, ctl map[string][]*flow.Controller, err error) {
	if err != nil {
		return
	}
	flow.SetAdaptiveHook(ctl, eng.adaptiveChanged, eng.events.Drain)
	now := eng.clock.Nanotime()
	for name, cs := range ctl {
		if lim, ok := lowestLimit(cs); ok {
			eng.node(name).RecordLimit(now, lim)
		}
	}
	for name, cs := range old {
		if _, ok := lowestLimit(cs); !ok {
			continue
		}
		if _, still := lowestLimit(ctl[name]); still {
			continue
		}
		if r := eng.reg.get(name); r != nil {
			r.node.RecordLimit(now, 0)
		}
	}
}

// lowestLimit returns the lowest limit of the adaptive rules among cs, and
// false when there are none.
func lowestLimit(cs []*flow.Controller) (int64, bool) {
	var lim int64
	found := false
	for _, c := range cs {
		if l, ok := c.Limit(); ok && (!found || l < lim) {
			lim, found = l, true
		}
	}
	return lim, found
}

// adaptiveChanged hears of a move of rule's adaptive limit, under the
// limiter's lock: it records the resource's limit and queues an event for
// a material move, which the limiter's after hook (the hub's Drain)
// delivers once the lock is let go.
func (eng *Engine) adaptiveChanged(rule rules.Flow, c adaptive.Change) {
	r := eng.reg.get(rule.Resource)
	if r == nil {
		return
	}
	lim := r.adaptiveLimit()
	if lim == 0 {
		lim = c.To // the rule is not in force yet (its load is under way)
	}
	r.node.RecordLimit(c.At, lim)
	if c.Material {
		eng.events.Enqueue(stat.Event{
			Kind: stat.EventAdaptive, At: c.At, Resource: rule.Resource, Rule: rulewalk.Clone(rule),
			From: strconv.FormatInt(c.Reported, 10), To: strconv.FormatInt(c.To, 10), Value: float64(c.To),
		})
	}
}

// snapshot returns the resource's figures at now, with the limit of its
// adaptive concurrency rule and the step of its tiered rule, if it has them.
func (r *resource) snapshot(now int64) stat.Snapshot {
	s := r.node.Snapshot(now)
	s.AdaptiveLimit = r.adaptiveLimit()
	if rs := r.rules.Load(); rs != nil {
		s.Tier, _ = flow.Tier(rs.flow)
	}
	return s
}

// adaptiveLimit returns the limit in force of the resource's adaptive
// concurrency rule (the lowest, should it have several), or 0.
func (r *resource) adaptiveLimit() int64 {
	rs := r.rules.Load()
	if rs == nil {
		return 0
	}
	var lim int64
	for i := range rs.flow {
		if l, ok := rs.flow[i].Limit(); ok && (lim == 0 || l < lim) {
			lim = l
		}
	}
	return lim
}
