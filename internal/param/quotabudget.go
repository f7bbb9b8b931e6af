package param

import (
	"time"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/lease"
	"github.com/sluice-go/sluice/internal/quota"
)

// The remaining budget of a param rule's calendar quota for the value an
// entry carries (docs/rules.md, "Remaining budget"): Limit is the value's
// threshold, Remaining that less the value's units in the current period
// (after the entry's when it passed; 0 for a new value refused because
// the table is full), Reset the time to the period's end (a refusal's
// RetryAfter) and Window the period's length.

// localQuotaBudget notes or records the budget of value's quota of limit
// units, whose Take at wall instant now had outcome o, found used counted
// and gave the period's end.
func (c *Controller) localQuotaBudget(ec *entry.Context, o quota.Outcome, used, limit, now, end int64) {
	s, e := c.q.table.Period()
	switch o {
	case quota.Taken:
		used += ec.Batch
	case quota.Full:
		used = limit
	}
	c.note(ec, o == quota.Taken, core.Budget{
		Limit:     float64(limit),
		Remaining: max(limit-used, 0),
		Reset:     quota.Retry(now, end),
		Window:    quota.Length(c.q.cal, s, e, end),
	})
}

// remoteQuotaBudget is localQuotaBudget for a cluster quota, as this
// instance knows it from answer a: the store's answer carries no count, so
// Remaining is 0 (a lower bound) unless the fallback's local count decided,
// whose share (Limit) and count it then reports. An entry cancelled before
// the store answered hears nothing.
func (c *Controller) remoteQuotaBudget(ec *entry.Context, a quota.Answer, o quota.Outcome, limit, now int64) {
	if a.By == lease.ByContext {
		return
	}
	s, end := c.q.cal.Bounds(now)
	bg := core.Budget{Limit: float64(limit), Reset: quota.Retry(now, end), Window: time.Duration(end - s)}
	if a.By == lease.ByFallback && a.Local > 0 && o != quota.Full {
		used := a.Used
		if a.Admitted {
			used += ec.Batch
		}
		bg.Limit, bg.Remaining = float64(a.Local), max(a.Local-used, 0)
	}
	c.note(ec, a.Admitted, bg)
}
