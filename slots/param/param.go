// Package param is the hot-parameter slot. (Contract stub: issue 6
// implements it.)
package param

import (
	"context"

	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/rules"
)

// Controller enforces one param rule.
type Controller struct{ rule rules.Param }

// Rule returns the rule the controller enforces.
func (c *Controller) Rule() rules.Param { return c.rule }

// Check decides on one entry; it reads args and must not retain them (they
// must not escape: that is what keeps string and integer keys free of
// allocations).
func (c *Controller) Check(ctx context.Context, ec *core.EntryContext, args core.Args, clk core.Clock) *core.BlockError {
	return nil
}

// Build validates every rule first and returns the controllers by resource;
// an equivalent rule keeps its old controller's per-value state.
func Build(rs []rules.Param, old map[string][]*Controller) (map[string][]*Controller, error) {
	for i := range rs {
		if err := rs[i].Validate(); err != nil {
			return nil, rules.At(err, i)
		}
	}
	out := map[string][]*Controller{}
	for _, r := range rs {
		out[r.Resource] = append(out[r.Resource], &Controller{rule: r})
	}
	return out, nil
}
