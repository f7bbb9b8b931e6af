package param

import (
	"cmp"
	"context"
	"encoding/hex"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/lease"
	"github.com/sluice-go/sluice/internal/quota"
	"github.com/sluice-go/sluice/internal/ruledef"
	"github.com/sluice-go/sluice/rules"
)

// quotaCtl enforces a param rule's calendar quota (rules.Param.Quota):
// each value's units in the current period, at most Capacity values a
// period in table. A cluster rule asks the store through remote, table
// then being its local fallback's. A successor with the same calendar
// takes over table and remote (see stateKey), so a reload keeps the counts.
type quotaCtl struct {
	cal    *quota.Calendar
	table  *quota.Table
	remote *quota.Remote // nil for a local rule
	off    atomic.Int64
}

func newQuotaCtl(r *rules.Param, rm *Remote) *quotaCtl {
	cal, err := quota.New(r.Quota)
	if err != nil { // rules.Validate loaded the zone: only a broken zone database gets here
		panic("sluice: quota of a valid rule: " + err.Error())
	}
	q := &quotaCtl{cal: cal, table: quota.NewTable(cmp.Or(r.Capacity, ruledef.ParamCapacity))}
	if r.Cluster != nil {
		arg := "i" + strconv.Itoa(r.Index)
		if r.Key != "" {
			arg = "k" + r.Key
		}
		q.remote = quota.NewRemote(rm.mgr, rm.app+"/pquota/"+r.Resource+"/"+arg+"/"+cal.Spec(), r.Cluster)
	}
	return q
}

// quotaSpec is what a quota adds to a param rule's stateKey.
func quotaSpec(r *rules.Param) string {
	if r.Quota == nil {
		return ""
	}
	cal, err := quota.New(r.Quota)
	if err != nil {
		return "invalid"
	}
	return cal.Spec()
}

// checkQuota decides ec for value key, whose quota is t units a period.
func (c *Controller) checkQuota(ctx context.Context, ec *entry.Context, key string, t int64, clk core.Clock) *core.BlockError {
	q := c.q
	off := quota.WallOffset(clk)
	q.off.Store(off)
	now := ec.Start + off
	if q.remote != nil {
		return c.checkQuotaRemote(ctx, ec, key, t, now)
	}
	o, used, end := q.table.Take(q.cal, key, now, ec.Batch, t)
	if ec.WantBudget {
		c.localQuotaBudget(ec, o, used, t, now, end)
	}
	switch o {
	case quota.Over:
		return c.blocked(ec, float64(used), float64(t), int64(quota.Retry(now, end)), c.quotaReason(t, end))
	case quota.Full:
		return c.blocked(ec, float64(q.table.Len()), float64(cmp.Or(c.rule.Capacity, ruledef.ParamCapacity)), int64(quota.Retry(now, end)), c.fullReason())
	}
	ec.AddUndo(&quotaUndo{q: q, key: strings.Clone(key)})
	return nil
}

func (c *Controller) quotaReason(t, end int64) string {
	return "quota of " + strconv.FormatInt(t, 10) + " per " + c.q.cal.Spec() + " used; resets at " + c.q.cal.Label(end)
}

func (c *Controller) fullReason() string {
	return "quota table full: the rule counts at most Capacity (" + strconv.Itoa(cmp.Or(c.rule.Capacity, ruledef.ParamCapacity)) +
		") values a period and a new value is refused until the next; raise Capacity (at most 16,777,216) or give the rule a cluster section"
}

// checkQuotaRemote decides ec for value key by the cluster store, or by the
// fallback.
func (c *Controller) checkQuotaRemote(ctx context.Context, ec *entry.Context, key string, t, now int64) *core.BlockError {
	if ctx == nil || ctx == context.Background() {
		ctx = ec.Life
		if ctx == nil {
			ctx = context.Background()
		}
	}
	d := digestOf(key)
	a, o := c.q.remote.AskTable(ctx, c.q.cal, c.q.table, key, hex.EncodeToString(d[:]), now, ec.Start, ec.Batch, t)
	if ec.WantBudget {
		c.remoteQuotaBudget(ec, a, o, t, now)
	}
	if a.Admitted {
		return nil
	}
	_, end := c.q.cal.Bounds(now)
	be := c.blocked(ec, 0, float64(t), int64(quota.Retry(now, end)), c.quotaReason(t, end))
	be.Type = core.BlockCluster
	switch {
	case a.By == lease.ByContext:
		be.RetryAfter, be.Reason, be.Cause = 0, "cancelled while waiting for the cluster store", ctx.Err()
	case a.By == lease.ByFallback && a.Local == 0:
		be.Reason = "cluster fallback: block"
	case a.By == lease.ByFallback && o == quota.Full:
		be.Reason = "cluster fallback: " + c.fullReason()
	case a.By == lease.ByFallback:
		be.Observed, be.Threshold = float64(a.Used), float64(a.Local)
		be.Reason = "cluster fallback: local share of the quota (" + strconv.FormatInt(a.Local, 10) + " per " + c.q.cal.Spec() + ") used"
	}
	return be
}

// quotaUndo gives a value's units back when a later check refuses the entry.
type quotaUndo struct {
	q   *quotaCtl
	key string
}

func (u *quotaUndo) Release(x entry.ExitInfo) {
	if x.Blocked {
		u.q.table.Give(u.key, x.Start+u.q.off.Load(), x.Batch)
	}
}
