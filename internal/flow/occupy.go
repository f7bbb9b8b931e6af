package flow

import (
	"context"
	"time"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
)

// occupy admits a critical entry that c's window refused in the window's
// next bucket, if that bucket starts within the rule's PriorityWait (and
// the context's deadline) and the window ending with it has room: the
// entry takes its batch from that bucket now and waits for the bucket to
// start (Sentinel's occupy-future-window). It reports decided false when
// the entry cannot borrow, and the caller refuses it as usual.
//
// Only the next bucket is ever borrowed, so every borrowed count lies in
// the bucket after the current one, which window.Window.TryAdd counts in
// every check: a check of the current bucket sees the borrowed counts, and
// the borrow itself is checked against the whole window it will belong to.
// The limit therefore holds in every window of ten buckets, borrowed
// admissions included, and the long-run rate stays the rule's.
func (c *reject) occupy(ctx context.Context, ec *entry.Context, clk core.Clock) (*core.BlockError, bool) {
	next := ec.Start/c.width + 1
	wait := next*c.width - ec.Start
	bound, _ := waitBound(ctx, int64(c.rule.PriorityWait))
	if wait > bound || clk == nil {
		return nil, false
	}
	if ok, _ := c.win.TryAdd(next, uint64(ec.Batch), c.limit); !ok {
		return nil, false
	}
	if err := ec.Sleep(ctx, clk, time.Duration(wait)); err != nil {
		c.win.Sub(next, uint64(ec.Batch))
		return c.cancelled(ec, float64(wait), int64(c.rule.PriorityWait), err), true
	}
	// Given back from the bucket it took, should a later check refuse it.
	ec.AddUndo(&borrowed{win: c, epoch: next})
	return nil, true
}

// borrowed is the undo ticket of an occupied admission: the bucket it was
// counted in.
type borrowed struct {
	win   *reject
	epoch int64
}

func (b *borrowed) Release(x entry.ExitInfo) {
	if x.Blocked {
		b.win.win.Sub(b.epoch, uint64(x.Batch))
	}
}
