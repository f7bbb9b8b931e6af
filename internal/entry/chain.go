// The chain keeps an engine's custom slots (see package slots) in
// order, behind a snapshot that entries read without locking.

package entry

import (
	"sort"
	"sync"

	"sync/atomic"

	"github.com/sluice-go/sluice/slots"
)

// Chain is an ordered set of custom slots. The zero value is empty and ready
// to use; it is safe for concurrent use, and registration never blocks
// callers running the chain (they see an immutable snapshot).
type Chain struct {
	mu   sync.Mutex
	snap atomic.Pointer[Snapshot]
	all  []orderedSlot
}

type orderedSlot struct {
	order int
	seq   int
	slot  any
}

// Snapshot is an immutable view of a Chain, grouped by slot kind in
// ascending order.
type Snapshot struct {
	Prepare []slots.Preparer
	Check   []slots.Checker
	Stat    []slots.Observer
}

// Add registers s at position order (lower runs first; equal orders run in
// registration order). It reports false if s implements none of the slot
// interfaces.
func (c *Chain) Add(s any, order int) bool {
	_, p := s.(slots.Preparer)
	_, r := s.(slots.Checker)
	_, st := s.(slots.Observer)
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
	snap := &Snapshot{}
	for _, o := range all {
		if x, ok := o.slot.(slots.Preparer); ok {
			snap.Prepare = append(snap.Prepare, x)
		}
		if x, ok := o.slot.(slots.Checker); ok {
			snap.Check = append(snap.Check, x)
		}
		if x, ok := o.slot.(slots.Observer); ok {
			snap.Stat = append(snap.Stat, x)
		}
	}
	c.snap.Store(snap)
	return true
}

// Snapshot returns the current slots, or nil when none are registered. The
// nil check is the whole cost of the custom chain for engines that have none.
func (c *Chain) Snapshot() *Snapshot { return c.snap.Load() }
