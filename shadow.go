package sluice

import (
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
)

// Shadow mode (rules.Flow.Shadow and the same field of every rule kind): a
// rule in shadow mode runs its check as the enforced rule would, taking
// what the enforced rule would take when it admits, and taking nothing when
// it would refuse; its refusal comes back marked BlockError.Shadow,
// and the engine counts it instead of refusing (see docs/rollout.md).

// shadowed counts be when it is the would-be refusal of a rule in shadow
// mode, on the entry's resource (window.Node.AddShadowBlock) and in the
// block log, and reports whether it was: the entry then goes on through the
// remaining checks as if the rule had admitted it. It is called on the
// refusal path only, so the pass path pays nothing for shadow mode.
func (eng *Engine) shadowed(c *entry.Context, r *resource, be *core.BlockError) bool {
	if !be.Shadow {
		return false
	}
	r.node.AddShadowBlock(c.Start, c.Batch, be.Type)
	if eng.blocks != nil {
		eng.blocks.note(be, c.Resource, c.Batch, c.Start)
	}
	return true
}
