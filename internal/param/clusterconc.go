package param

import (
	"context"
	"encoding/hex"
	"strconv"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/lease"
	"github.com/sluice-go/sluice/rules"
)

// SetSlots gives rm the engine's slot pool, which cluster concurrency
// rules need (each value's in-flight limit shared by the fleet); without
// it Build refuses them.
func (rm *Remote) SetSlots(p *lease.SlotPool) { rm.slots = p }

// slotsPrefix is the key stem of the values of cluster concurrency rule r
// in application app: the limit is not part of it, so a reload that
// changes it counts the entries in flight.
func slotsPrefix(app string, r *rules.Param) string {
	arg := "i" + strconv.Itoa(r.Index)
	if r.Key != "" {
		arg = "k" + r.Key
	}
	return app + "/conc/" + r.Resource + "/" + arg + "/"
}

// errNoSlots is the refusal of a cluster concurrency rule by an engine
// whose store keeps no concurrency slots.
const errNoSlots = "a cluster concurrency rule needs a store that keeps concurrency slots (the Redis store, sluiceredis.Store, does); this engine's store does not"

// fallbackPolicy maps a rule's fallback to the lease manager's.
var fallbackPolicy = map[rules.ClusterFallback]lease.FallbackPolicy{
	rules.FallbackPass: lease.FallbackPass, rules.FallbackBlock: lease.FallbackBlock,
}

// checkSlots decides an entry of value key, whose in-flight limit is t,
// by the fleet's slots (lease.SlotPool): the entry holds them until Exit.
func (c *Controller) checkSlots(ctx context.Context, ec *entry.Context, key string, t int64) *core.BlockError {
	if ctx == nil || ctx == context.Background() {
		ctx = ec.Life
		if ctx == nil {
			ctx = context.Background()
		}
	}
	cc := c.cl
	d := digestOf(key)
	spec := lease.SlotSpec{Key: cc.prefix + hex.EncodeToString(d[:]), Limit: t,
		Fallback: fallbackPolicy[cc.fallback], LocalLimit: cc.localT}
	h, r := cc.slots.Acquire(ctx, &spec, ec.Batch)
	if r.Admitted {
		ec.AddTicketClock(slotTicket{h}, entry.ExitUntimed)
		return nil
	}
	switch {
	case r.By == lease.ByContext:
		be := c.clusterBlocked(ec, t, 0, "cancelled while waiting for the cluster store")
		be.Cause = ctx.Err()
		return be
	case r.By == lease.ByFallback && cc.fallback == rules.FallbackBlock:
		return c.clusterBlocked(ec, t, 0, "cluster fallback: block")
	case r.By == lease.ByFallback:
		return c.clusterBlocked(ec, t, 0, "cluster fallback: local share of in-flight slots exhausted")
	}
	return c.clusterBlocked(ec, t, 0, "cluster concurrency limit reached")
}

// slotTicket gives an entry's slots back at its Exit (or when a later
// check refuses it).
type slotTicket struct{ h *lease.Hold }

func (t slotTicket) Release(entry.ExitInfo) { t.h.Release() }
