package flow

import (
	"time"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/window"
)

// The remaining budget of a rule that counts another resource (RefResource,
// QPS metric; docs/rules.md, "Remaining budget"). Its resource's own
// entries spend none of it: the budget is the other resource's headroom.
// Limit is Threshold, Remaining the requests the other resource may still
// pass in its one-second window before this resource is refused
// (Threshold less its count, floored), Reset the time until its window
// holds nothing (its newest bucket holding a count has left it), Window a
// second. A refusal reports Remaining 0 and the same Reset. The
// concurrency metric, like every concurrency rule, reports nothing.

// refBudget notes (ok: the entry passed) or records the budget of c, which
// found sum requests passed by the other resource in the window ending at
// ec.Start.
func (c *associated) refBudget(ec *entry.Context, ok bool, sum uint64) {
	now := ec.Start
	bg := core.Budget{Limit: c.limit, Remaining: floorCount(c.limit - float64(sum)), Window: time.Second}
	width := int64(window.BucketWidth)
	e := now / width
	for k := e; k > e-window.SecondBuckets; k-- {
		if c.ref.Bucket(k*width, window.Pass) > 0 {
			bg.Reset = time.Duration(max((k+window.SecondBuckets)*width-now, 0))
			break
		}
	}
	if ok {
		c.noteBudget(ec, bg)
		return
	}
	c.refusedBudget(ec, bg)
}
