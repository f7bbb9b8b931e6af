// The statistic slot: it records each entry's outcome
// on its resource node and, for inbound traffic, on the engine's global
// inbound node. It runs last on the way in (after every rule check) and first
// on the way out.
//
// The functions are concrete rather than behind an interface so the engine's
// hot path calls them directly.

package entry

import (
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/window"
)

// Pass records an entry that passed every check: pass count and concurrency.
// inbound is nil for outbound entries.
func Pass(ec *Context, node, inbound *window.Node) {
	node.AddPass(ec.Start, ec.Batch)
	if inbound != nil {
		inbound.AddPass(ec.Start, ec.Batch)
	}
}

// Block records an entry that a rule of block type by refused.
func Block(ec *Context, node, inbound *window.Node, by core.BlockType) {
	node.AddBlock(ec.Start, ec.Batch, by)
	if inbound != nil {
		inbound.AddBlock(ec.Start, ec.Batch, by)
	}
}

// Exit records a passed entry's completion: count, RT, error, and releases
// its concurrency.
func Exit(x ExitInfo, node, inbound *window.Node) {
	failed := x.Err != nil
	rt := x.RT()
	node.AddComplete(x.End, rt, x.Batch, failed)
	if inbound != nil {
		inbound.AddComplete(x.End, rt, x.Batch, failed)
	}
}
