package param

import (
	"math"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
)

// The remaining budget of a cluster param rule (not a quota, not a
// concurrency rule) for the value an entry carries, as this instance knows
// it (docs/rules.md, "Remaining budget"), as a cluster flow rule reports
// its own: Limit and Window are the fleet's budget for the value (the
// bucket of Threshold+Burst refilled at Threshold per Duration, times the
// live instances for a per-instance rule; with throttle, the requests an
// idle schedule admits at once and the time they take; a per-caller rule's
// sliding window: Threshold per Duration), Remaining the
// permits this instance holds in the value's leases (none without Leases,
// nor under throttle: the store holds the rest, which other instances may
// spend first), Reset the refusal's RetryAfter, or on a pass Window (by
// then the bucket is full again if nothing else comes).

// clusterBudget notes (be nil: the entry passed) or records the budget of
// the cluster rule for value key of threshold t.
func (c *Controller) clusterBudget(ec *entry.Context, be *core.BlockError, key string, t int64) {
	cc := c.cl
	tm := c.termsOf(t, cc.mgr.Live())
	var bg core.Budget
	switch cc.alg {
	case cluster.Pacing:
		cost := float64(cc.interval) / tm.limit
		limit := math.Floor(float64(tm.maxQueue)/cost) + 1
		bg = core.Budget{Limit: limit, Window: time.Duration(min(limit*cost, math.MaxInt64))}
	case cluster.SlidingWindow:
		bg = core.Budget{Limit: tm.limit, Window: cc.interval}
	default:
		bg = core.Budget{Limit: tm.burst, Window: time.Duration(min(tm.burst*float64(cc.interval)/tm.limit, math.MaxInt64))}
	}
	if be != nil {
		bg.Reset = be.RetryAfter
		c.note(ec, false, bg)
		return
	}
	if cc.leases != nil && cc.alg != cluster.Pacing {
		d := digestOf(key)
		bg.Remaining = min(cc.leases.held(&d, tm), int64(bg.Limit))
	}
	bg.Reset = bg.Window
	c.note(ec, true, bg)
}

// held returns the permits the Limiter of d holds for terms tm, or 0 when
// it has none (it makes none).
func (lc *leaseCache) held(d *digest, tm terms) int64 {
	lc.mu.Lock()
	e := lc.m[*d]
	lc.mu.Unlock()
	if e == nil || e.tm != tm {
		return 0
	}
	return e.lim.Held()
}
