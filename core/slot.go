package core

import (
	"sort"
	"sync"

	"go.uber.org/atomic"
)

// PrepareSlot runs first for every entry, before any rule check.
type PrepareSlot interface {
	Prepare(ctx *EntryContext)
}

// RuleCheckSlot decides whether an entry may pass. Check returns nil to let
// the entry through or a *BlockError to refuse it. Custom rule checks run
// after the built-in ones (system, flow, isolation, param, degrade).
type RuleCheckSlot interface {
	Check(ctx *EntryContext) *BlockError
}

// StatSlot observes the outcome of entries.
type StatSlot interface {
	// OnPass is called when the entry passed every check.
	OnPass(ctx *EntryContext)
	// OnBlock is called when a check refused the entry.
	OnBlock(ctx *EntryContext, err *BlockError)
	// OnExit is called once when a passed entry exits.
	OnExit(ctx *EntryContext, x ExitInfo)
}

// Slot is a user-registered slot: any value that implements at least one of
// PrepareSlot, RuleCheckSlot and StatSlot.
//
// Custom slots receive a copy of the entry's context made for them. The
// entry's positional arguments (WithArgs) are not part of it: they are owned
// by the entry and never leave it, which is what keeps the built-in path free
// of allocations. Put what a custom slot needs into attachments instead.
type Slot = any

// Chain is an ordered set of custom slots. The zero value is empty and ready
// to use; it is safe for concurrent use, and registration never blocks
// callers running the chain (they see an immutable snapshot).
type Chain struct {
	mu   sync.Mutex
	snap atomic.Pointer[ChainSnapshot]
	all  []orderedSlot
}

type orderedSlot struct {
	order int
	seq   int
	slot  Slot
}

// ChainSnapshot is an immutable view of a Chain, grouped by slot kind in
// ascending order.
type ChainSnapshot struct {
	Prepare []PrepareSlot
	Check   []RuleCheckSlot
	Stat    []StatSlot
}

// Add registers s at position order (lower runs first; equal orders run in
// registration order). It reports false if s implements none of the slot
// interfaces.
func (c *Chain) Add(s Slot, order int) bool {
	_, p := s.(PrepareSlot)
	_, r := s.(RuleCheckSlot)
	_, st := s.(StatSlot)
	if !p && !r && !st {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.all = append(c.all, orderedSlot{order: order, seq: len(c.all), slot: s})
	all := append([]orderedSlot(nil), c.all...)
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].order != all[j].order {
			return all[i].order < all[j].order
		}
		return all[i].seq < all[j].seq
	})
	snap := &ChainSnapshot{}
	for _, o := range all {
		if x, ok := o.slot.(PrepareSlot); ok {
			snap.Prepare = append(snap.Prepare, x)
		}
		if x, ok := o.slot.(RuleCheckSlot); ok {
			snap.Check = append(snap.Check, x)
		}
		if x, ok := o.slot.(StatSlot); ok {
			snap.Stat = append(snap.Stat, x)
		}
	}
	c.snap.Store(snap)
	return true
}

// Snapshot returns the current slots, or nil when none are registered. The
// nil check is the whole cost of the custom chain for engines that have none.
func (c *Chain) Snapshot() *ChainSnapshot { return c.snap.Load() }
