// Package isolation is the isolation slot: it caps the number of requests of
// a resource in flight at once, one Controller per isolation rule.
//
// A controller reserves an in-flight slot with a compare-and-swap before the
// entry passes, and the entry gives it back on Exit (or when a later check
// refuses it), so concurrent callers never together exceed the threshold.
package isolation

import (
	"sync/atomic"

	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/rules"
)

// Controller enforces one isolation rule. It is safe for concurrent use and
// is the entry.Ticket its admitted entries hold.
type Controller struct {
	rule     rules.Isolation
	inflight *atomic.Int64
}

var _ entry.Ticket = (*Controller)(nil)

// NewController builds the controller of rule r.
func NewController(r rules.Isolation) (*Controller, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return newController(r), nil
}

// newController builds the controller of the valid rule r.
func newController(r rules.Isolation) *Controller {
	return &Controller{rule: r, inflight: new(atomic.Int64)}
}

// Rule returns the rule the controller enforces.
func (c *Controller) Rule() rules.Isolation { return c.rule }

// InFlight returns the number of requests holding a slot.
func (c *Controller) InFlight() int64 { return c.inflight.Load() }

// Check reserves ec.Batch in-flight slots, or refuses the entry when that
// would exceed the threshold. The refusal observes the requests in flight,
// or, for a batch larger than the threshold (which no wait can let through),
// the batch itself, with that reason.
func (c *Controller) Check(ec *entry.Context) *core.BlockError {
	n := ec.Batch
	for {
		cur := c.inflight.Load()
		if cur+n > c.rule.Threshold {
			if n > c.rule.Threshold {
				return c.blocked(ec, n, "batch larger than threshold")
			}
			return c.blocked(ec, cur, "")
		}
		if c.inflight.CompareAndSwap(cur, cur+n) {
			ec.AddTicket(c)
			return nil
		}
	}
}

func (c *Controller) blocked(ec *entry.Context, observed int64, reason string) *core.BlockError {
	return &core.BlockError{
		Type:      core.BlockIsolation,
		Resource:  ec.Resource,
		Rule:      core.RuleRef{ID: c.rule.ID, Metric: "concurrency"},
		Observed:  float64(observed),
		Threshold: float64(c.rule.Threshold),
		Reason:    reason,
	}
}

// Release gives back the entry's in-flight slots.
func (c *Controller) Release(x entry.ExitInfo) { c.inflight.Add(-x.Batch) }

// Build returns the controllers of rs grouped by resource. The rules must be
// valid: the engine validates every rule before building. The i-th rule on
// a resource takes over the in-flight count of the i-th old controller on
// it, whatever its threshold: requests already in flight keep counting after
// a reload. Build changes nothing the controllers in old use.
func Build(rs []rules.Isolation, old map[string][]*Controller) map[string][]*Controller {
	out := make(map[string][]*Controller, len(rs))
	for i := range rs {
		c := newController(rs[i])
		res := rs[i].Resource
		if prev := old[res]; len(prev) > len(out[res]) {
			c.inflight = prev[len(out[res])].inflight
		}
		out[res] = append(out[res], c)
	}
	return out
}
