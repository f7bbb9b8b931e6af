package flow

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/lease"
	"github.com/sluice-go/sluice/rules"
)

// errNoSlots is the refusal of a cluster concurrency rule by an engine
// whose store keeps no concurrency slots.
var errNoSlots = errors.New("a cluster concurrency rule needs a store that keeps concurrency slots (the Redis store, sluiceredis.Store, does); this engine's store does not")

// SetSlots gives l the engine's slot pool, which cluster concurrency rules
// need; without it Build refuses them.
func (l *Leases) SetSlots(p *lease.SlotPool) { l.slots = p }

// slotKey is the store key of cluster concurrency rule r in application
// app. It does not name the limit: a reload that changes it counts the
// same entries in flight.
func slotKey(app string, r *rules.Flow) string { return app + "/conc/" + r.Resource }

// clusterConc enforces a concurrency rule whose limit the fleet shares:
// every entry takes slots in the store (lease.SlotPool) and gives them back
// at Exit.
type clusterConc struct {
	pool *lease.SlotPool // set by Build
	spec lease.SlotSpec
	base
}

// newClusterChecker returns the checker of cluster rule b: fleet-wide
// slots for the concurrency metric, leased permits otherwise.
func newClusterChecker(b base) checker {
	if b.rule.Metric == rules.Concurrency {
		return newClusterConc(b)
	}
	return newClusterRule(b)
}

func newClusterConc(b base) *clusterConc {
	r := &b.rule
	return &clusterConc{base: b, spec: lease.SlotSpec{
		Limit:    int64(r.Threshold),
		Fallback: fallbackPolicy[r.Cluster.Fallback], LocalLimit: int64(r.Cluster.LocalThreshold),
	}}
}

func (c *clusterConc) check(ctx context.Context, ec *entry.Context, _ core.Clock) *core.BlockError {
	if be := c.tooLarge(ec, c.rule.Threshold); be != nil {
		be.Type = core.BlockCluster
		return be
	}
	if ctx == nil || ctx == context.Background() {
		ctx = ec.Life
		if ctx == nil {
			ctx = context.Background()
		}
	}
	h, r := c.pool.Acquire(ctx, &c.spec, ec.Batch)
	if !r.Admitted {
		be := c.refuse(ec, 0, c.rule.Threshold, 0, "cluster concurrency limit reached")
		be.Type = core.BlockCluster
		switch r.By {
		case lease.ByFallback:
			be.Reason = "cluster fallback: local share of in-flight slots exhausted"
			if c.spec.Fallback == lease.FallbackBlock {
				be.Reason = "cluster fallback: block"
			}
		case lease.ByContext:
			be.Reason = "cancelled while waiting for the cluster store"
			be.Cause = ctx.Err()
		}
		return be
	}
	ec.AddTicketClock(slotTicket{h}, entry.ExitUntimed)
	return nil
}

// slotTicket gives an entry's slots back at its Exit (or when a later
// check refuses it).
type slotTicket struct{ h *lease.Hold }

func (t slotTicket) Release(entry.ExitInfo) { t.h.Release() }

// Release does nothing: each entry's slotTicket gives its slots back.
func (c *clusterConc) Release(entry.ExitInfo) {}

// inherit does nothing: the count lives in the store and the pool, by key.
func (c *clusterConc) inherit(checker) {}

// attachSlots gives every cluster concurrency rule of built the pool of cl
// and its key.
func attachSlots(built []*Controller, cl *Leases) error {
	for i, c := range built {
		if k, ok := c.c.(*clusterConc); ok {
			if cl.slots == nil {
				return &rules.Error{Kind: "flow", Index: i, Resource: k.rule.Resource, Field: "Cluster", Reason: fmt.Sprint(errNoSlots)}
			}
			k.pool, k.spec.Key = cl.slots, slotKey(cl.app, &k.rule)
		}
	}
	return nil
}
