package flow

import (
	"time"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/lease"
	"github.com/sluice-go/sluice/internal/quota"
)

// The remaining budget of a calendar quota (docs/rules.md, "Remaining
// budget"): Limit is Threshold, Remaining Threshold less the units counted
// in the current period (after the entry's when it passed), Reset the time
// to the period's end (a refusal's RetryAfter) and Window the period's
// length (this period's: 23 h on a day that skips an hour).

// localQuotaBudget notes (ok) or records the budget of a local quota that
// found used counted in the period holding wall instant t, ending at end.
func (c *quotaRule) localQuotaBudget(ec *entry.Context, ok bool, used, t, end int64) {
	s, e := c.count.Period()
	if ok {
		used += ec.Batch
	}
	bg := core.Budget{Limit: float64(c.limit), Remaining: max(c.limit-used, 0), Reset: quota.Retry(t, end), Window: quota.Length(c.cal, s, e, end)}
	if ok {
		c.noteBudget(ec, bg)
	} else {
		c.refusedBudget(ec, bg)
	}
}

// remoteQuotaBudget notes or records the budget of a cluster quota as
// this instance knows it from answer a: the store's answer carries no
// count, so Remaining is 0 (a lower bound) unless the fallback's local
// count decided, whose share (Limit) and count it then reports. An entry
// cancelled before the store answered hears nothing.
func (c *quotaRule) remoteQuotaBudget(ec *entry.Context, a quota.Answer, t int64) {
	if a.By == lease.ByContext {
		return
	}
	s, end := c.cal.Bounds(t)
	bg := core.Budget{Limit: float64(c.limit), Reset: quota.Retry(t, end), Window: time.Duration(end - s)}
	if a.By == lease.ByFallback && a.Local > 0 {
		used := a.Used
		if a.Admitted {
			used += ec.Batch
		}
		bg.Limit, bg.Remaining = float64(a.Local), max(a.Local-used, 0)
	}
	if a.Admitted {
		c.noteBudget(ec, bg)
	} else {
		c.refusedBudget(ec, bg)
	}
}
