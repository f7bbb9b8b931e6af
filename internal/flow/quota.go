package flow

import (
	"context"
	"strconv"
	"sync/atomic"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/lease"
	"github.com/sluice-go/sluice/internal/quota"
	"github.com/sluice-go/sluice/rules"
)

// quotaRule enforces a calendar quota (rules.Flow.Quota): at most limit
// units in each period of cal. A local rule counts in count; a cluster
// rule asks the store through remote, count being its local fallback's.
// Both live behind pointers that a successor with the same calendar and
// cluster terms takes over (see stateKey), so a reload keeps the count.
type quotaRule struct {
	cal    *quota.Calendar
	limit  int64
	count  *quota.Count
	remote *quota.Remote // nil for a local rule; set by Build
	off    atomic.Int64  // the clock's wall offset, read at each check
	base
}

func newQuotaRule(b base) *quotaRule {
	cal, err := quota.New(b.rule.Quota)
	if err != nil { // rules.Validate loaded the zone: only a broken zone database gets here
		panic("sluice: quota of a valid rule: " + err.Error())
	}
	return &quotaRule{cal: cal, limit: int64(b.rule.Threshold), count: new(quota.Count), base: b}
}

func (c *quotaRule) check(ctx context.Context, ec *entry.Context, clk core.Clock) *core.BlockError {
	if be := c.tooLarge(ec, float64(c.limit)); be != nil {
		return be
	}
	off := quota.WallOffset(clk)
	c.off.Store(off)
	t := ec.Start + off
	if c.remote != nil {
		return c.checkRemote(ctx, ec, t)
	}
	ok, used, end := c.count.Take(c.cal, t, ec.Batch, c.limit)
	if ec.WantBudget {
		c.localQuotaBudget(ec, ok, used, t, end)
	}
	if !ok {
		return c.refuse(ec, float64(used), float64(c.limit), quota.Retry(t, end), c.reason(end))
	}
	ec.AddUndo(c)
	return nil
}

// reason is a refusal's reason: the quota and when it resets.
func (c *quotaRule) reason(end int64) string {
	return "quota of " + strconv.FormatInt(c.limit, 10) + " per " + c.cal.Spec() + " used; resets at " + c.cal.Label(end)
}

// checkRemote decides ec by the cluster store, or by the fallback.
func (c *quotaRule) checkRemote(ctx context.Context, ec *entry.Context, t int64) *core.BlockError {
	if ctx == nil || ctx == context.Background() {
		ctx = ec.Life
		if ctx == nil {
			ctx = context.Background()
		}
	}
	a := c.remote.Ask(ctx, c.cal, c.count, "", t, ec.Start, ec.Batch, c.limit, true)
	if ec.WantBudget {
		c.remoteQuotaBudget(ec, a, t)
	}
	if a.Admitted {
		return nil
	}
	_, end := c.cal.Bounds(t)
	be := c.refuse(ec, 0, float64(c.limit), quota.Retry(t, end), c.reason(end))
	be.Type = core.BlockCluster
	switch {
	case a.By == lease.ByContext:
		be.RetryAfter, be.Reason, be.Cause = 0, "cancelled while waiting for the cluster store", ctx.Err()
	case a.By == lease.ByFallback && a.Local == 0:
		be.Reason = "cluster fallback: block"
	case a.By == lease.ByFallback:
		be.Observed, be.Threshold = float64(a.Used), float64(a.Local)
		be.Reason = "cluster fallback: local share of the quota (" + strconv.FormatInt(a.Local, 10) + " per " + c.cal.Spec() + ") used; resets at " + c.cal.Label(end)
	}
	return be
}

// Release gives the units back when a later check refused the entry, on a
// local rule (a cluster rule's grant is spent).
func (c *quotaRule) Release(x entry.ExitInfo) {
	if x.Blocked && c.remote == nil {
		c.count.Give(x.Start+c.off.Load(), x.Batch)
	}
}

func (c *quotaRule) inherit(old checker) {
	o := old.(*quotaRule)
	c.count = o.count
	if c.remote == nil {
		c.remote = o.remote
	}
}

// quotaTerms is what a quota's count depends on beyond its resource: a
// change of period, zone or week start, or between local and cluster,
// starts a new count.
type quotaTerms struct {
	spec    string
	cluster bool
}

func quotaTermsOf(r *rules.Flow) quotaTerms {
	if r.Quota == nil {
		return quotaTerms{}
	}
	cal, err := quota.New(r.Quota)
	if err != nil {
		return quotaTerms{spec: "invalid"}
	}
	return quotaTerms{spec: cal.Spec(), cluster: r.Cluster != nil}
}

// attachQuotas gives every cluster quota of built that inherited no Remote
// a new one, named from the application, resource and calendar.
func attachQuotas(built []*Controller, cl *Leases) {
	for _, c := range built {
		k, ok := c.c.(*quotaRule)
		if !ok || k.remote != nil || k.rule.Cluster == nil {
			continue
		}
		k.remote = quota.NewRemote(cl.mgr, cl.app+"/quota/"+k.rule.Resource+"/"+k.cal.Spec(), k.rule.Cluster)
	}
}
