package param

import (
	"cmp"
	"math"
	"time"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/rules"
)

// The remaining budget of a param rule (core.Budget) for the value an
// entry carries, computed only when the entry asked (WantBudget) and only
// for a local rule: a cluster rule's budget per value is the store's.

// wantBudget reports whether the rule tells ec its budget: ec asked, and
// the rule is local.
func (c *Controller) wantBudget(ec *entry.Context) bool { return ec.WantBudget && c.cl == nil }

// note records bg for ec: the tightest when the entry passed, the rule's
// own when it refused it. A rule in shadow mode tells nothing.
func (c *Controller) note(ec *entry.Context, passed bool, bg core.Budget) {
	if c.rule.Shadow {
		return
	}
	bg.Rule = core.RuleRef{ID: c.rule.ID, Metric: string(cmp.Or(c.rule.Metric, rules.QPS))}
	if passed {
		ec.NoteBudget(bg)
	} else {
		ec.Budget = bg
	}
}

// bucketBudget is the budget of a value's token bucket of t+burst tokens,
// refilled at t per Duration, holding tokens and part/Duration of the
// next: Limit is its size, Remaining its whole tokens, Reset the time
// until it is full, Window the time it takes to fill from empty. Must hold
// the value's shard lock (it reads nothing else).
func (c *Controller) bucketBudget(ec *entry.Context, passed bool, tokens int64, part uint64, t, burst int64) {
	size := t + burst
	bg := core.Budget{Limit: float64(size), Remaining: max(tokens, 0)}
	if tokens < size {
		bg.Reset = time.Duration(c.wait(size-tokens, part, t))
	}
	bg.Window = time.Duration(min(float64(size)*float64(c.window)/float64(t), math.MaxInt64))
	c.note(ec, passed, bg)
}

// paceBudget is the budget of a value's schedule of one request every
// Duration/t (window/t) ns, busy until busy ns from now, each request
// waiting at most MaxQueueing: Limit is the requests an idle schedule
// admits at once, Remaining those it still admits (the j-th waiting
// busy + j slots), Reset the time until it is idle, Window the time Limit
// slots take. On a pass busy includes the entry's own slots.
func (c *Controller) paceBudget(ec *entry.Context, passed bool, busy, t int64, window uint64) {
	cost := float64(window) / float64(t)
	limit := math.Floor(float64(c.maxQueue)/cost) + 1
	bg := core.Budget{Limit: limit, Reset: time.Duration(max(busy, 0)), Window: time.Duration(min(limit*cost, math.MaxInt64))}
	if b := max(busy, 0); b <= c.maxQueue {
		bg.Remaining = min(int64((float64(c.maxQueue-b))/cost)+1, int64(limit))
	}
	c.note(ec, passed, bg)
}
