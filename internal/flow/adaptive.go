package flow

import (
	"context"
	"errors"

	"github.com/sluice-go/sluice/internal/adaptive"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/ruledef"
	"github.com/sluice-go/sluice/rules"
)

// adaptiveRule enforces an adaptive concurrency rule: a concurrency limit
// that an adaptive.Limiter moves with the resource's response time.
type adaptiveRule struct {
	lim *adaptive.Limiter
	base
	// refusals shares the rule's equal refusals (the count seen against
	// the limit of the moment).
	refusals entry.Refusals
}

// newAdaptive builds the rule's checker. Its limiter's first window starts
// at clock reading 0: it ends at the first exit with enough samples, and
// the first decision probes the no-load RT whatever the clock reads.
func newAdaptive(b base) *adaptiveRule {
	a := b.rule.Adaptive
	lo, hi, initial, window, tol, probe := ruledef.AdaptiveDefaults(a.Min, a.Max, a.Initial, a.Window, a.Tolerance, a.ProbeInterval)
	return &adaptiveRule{
		lim:  adaptive.New(adaptive.Config{Min: lo, Max: hi, Initial: initial, Window: window, Tolerance: tol, Probe: probe}, 0),
		base: b,
	}
}

// share returns the part of the limit an entry of priority p may fill.
func share(p core.Priority) adaptive.Share {
	switch p {
	case core.PrioritySheddable:
		return adaptive.Sheddable
	case core.PriorityCritical:
		return adaptive.Critical
	}
	return adaptive.Default
}

func (c *adaptiveRule) check(_ context.Context, ec *entry.Context, _ core.Clock) *core.BlockError {
	ok, seen, capacity := c.lim.Acquire(ec.Batch, share(ec.Priority))
	if !ok {
		if n := float64(ec.Batch); n > float64(capacity) {
			return c.shared(&c.refusals, ec, n, float64(capacity), 0, reasonTooLarge)
		}
		return c.shared(&c.refusals, ec, float64(seen), float64(capacity), 0, "")
	}
	ec.AddTicket(c)
	return nil
}

// Release gives the entry's slots back; its RT is a sample unless a later
// check refused it or its caller recorded a cancellation.
func (c *adaptiveRule) Release(x entry.ExitInfo) {
	sample := !x.Blocked && (x.Err == nil || !errors.Is(x.Err, context.Canceled))
	c.lim.Release(x.Start, x.End, x.Batch, sample)
}

// inherit keeps the limiter of the rule it replaces when the adaptive
// section is unchanged: its limit and measurements carry over a reload.
// A changed section starts afresh, from its Initial.
func (c *adaptiveRule) inherit(old checker) {
	o := old.(*adaptiveRule)
	if *o.rule.Adaptive == *c.rule.Adaptive {
		c.lim = o.lim
	}
}

// Limit returns the limit in force of an adaptive rule, and false for
// other rules.
func (c *Controller) Limit() (int64, bool) {
	if a, ok := c.c.(*adaptiveRule); ok {
		return a.lim.Limit(), true
	}
	return 0, false
}

// SetAdaptiveHook makes changed hear of every move of the limit of the
// adaptive rules among cs, with the rule that moved, and calls after once
// the limiter's lock is let go (see adaptive.Limiter.SetHook). A limiter
// kept across a reload (inherit) reports for its newest rule.
func SetAdaptiveHook(cs map[string][]*Controller, changed func(rules.Flow, adaptive.Change), after func()) {
	for _, l := range cs {
		for _, c := range l {
			if a, ok := c.c.(*adaptiveRule); ok {
				r := a.rule
				a.lim.SetHook(func(ch adaptive.Change) { changed(r, ch) }, after)
			}
		}
	}
}
