package flow

import (
	"cmp"
	"context"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/ruledef"
	"github.com/sluice-go/sluice/internal/window"
	"github.com/sluice-go/sluice/rules"
)

// counted is the admission window of a rule that counts in one: a
// window.Window of ten buckets of StatInterval/10 each.
type counted struct {
	win   *window.Window // nil until attachWindow
	width int64          // ns per bucket
}

// windowed is a checker that counts its admissions in a window.
type windowed interface {
	counter() *counted
}

func (c *counted) counter() *counted { return c }

// bucketWidth returns the bucket width of rule r's window in nanoseconds.
func bucketWidth(r *rules.Flow) int64 {
	return int64(cmp.Or(r.StatInterval, ruledef.StatInterval)) / window.WindowBuckets
}

// attachWindow gives a controller that counts in a window and has none yet
// its resource's own window when that is free (see window.Node.ClaimWindow),
// so a check reads counters next to the ones every call writes, or else a
// window of its own.
func (c *Controller) attachWindow(nodes NodeFunc) {
	w, ok := c.c.(windowed)
	if !ok || w.counter().win != nil {
		return
	}
	k := w.counter()
	if k.win = nodes(c.c.enforced().Resource).ClaimWindow(); k.win == nil {
		k.win = new(window.Window)
	}
}

// releaseWindow gives back the resource's own window if the controller
// holds it; the controller must be out of use (entries that still hold a
// copy may finish counting in it).
func (c *Controller) releaseWindow(nodes NodeFunc) {
	w, ok := c.c.(windowed)
	if !ok || w.counter().win == nil {
		return
	}
	if n := nodes(c.c.enforced().Resource); w.counter().win == n.OwnWindow() {
		n.ReleaseWindow()
	}
}

// admit is the decision of a QPS reject rule: it takes ec's batch from win,
// in the bucket of width nanoseconds that holds ec.Start, if the window's
// total stays within limit. It reports whether it took the batch, and the
// total it found. A caller that took it records an undo ticket, which gives
// the batch back should a later check refuse ec (giveBack).
func admit(ec *entry.Context, win *window.Window, width int64, limit float64) (bool, uint64) {
	return win.TryAdd(ec.Start/width, uint64(ec.Batch), limit)
}

// retryAfter returns how long after ec.Start a batch like ec's would be
// admitted within limit if nothing else were added: when enough of the
// window's oldest buckets have slid out (window.Window.FreeAt). It is zero
// when the batch alone exceeds limit.
func (c *counted) retryAfter(ec *entry.Context, limit float64) time.Duration {
	at, ok := c.win.FreeAt(ec.Start/c.width, uint64(ec.Batch), limit)
	if !ok {
		return 0
	}
	return time.Duration(at*c.width - ec.Start)
}

// giveBack undoes admit for an entry that a later check refused.
func giveBack(win *window.Window, width int64, x entry.ExitInfo) {
	if x.Blocked {
		win.Sub(x.Start/width, uint64(x.Batch))
	}
}

// reject enforces a QPS rule that refuses at once: at most limit
// admissions in the window of the last ten buckets.
type reject struct {
	counted
	limit float64
	base
	// last is the latest refusal, shared by the refusals that would be
	// equal to it (see refusal); never modified once stored.
	last atomic.Pointer[core.BlockError]
}

func (c *reject) check(ctx context.Context, ec *entry.Context, clk core.Clock) *core.BlockError {
	ok, seen := admit(ec, c.win, c.width, c.limit)
	if !ok {
		if ec.Priority == core.PriorityCritical && c.rule.PriorityWait > 0 {
			if be, decided := c.occupy(ctx, ec, clk); decided {
				return be
			}
		}
		return c.refusal(ec, seen)
	}
	if ec.WantBudget {
		c.noteWindow(ec, c.win, c.width, c.limit, seen)
	}
	ec.AddUndo(c)
	return nil
}

// refusal is the rule's refusal of ec, whose check found seen admitted.
//
// A refusal allocates nothing when it would equal the rule's latest one:
// the same resource, the same count seen and the same RetryAfter, which is
// rounded up to the millisecond (retryMs) so that the refusals of one
// millisecond in one window state agree. Such a refusal returns the latest
// one's *BlockError itself, which nothing modifies once made, so that each
// caller owns an error that never changes (docs/design/architecture.md,
// "A refusal allocates nothing").
func (c *reject) refusal(ec *entry.Context, seen uint64) *core.BlockError {
	if ec.WantBudget {
		c.refusedWindow(ec, c.win, c.width, c.limit, seen)
	}
	if be := c.tooLarge(ec, c.limit); be != nil {
		return be
	}
	retry, observed := retryMs(c.retryAfter(ec, c.limit)), float64(seen)
	if be := c.last.Load(); be != nil && be.RetryAfter == retry && be.Observed == observed && be.Resource == ec.Resource {
		return be
	}
	be := c.refuse(ec, observed, c.limit, retry, "")
	c.last.Store(be)
	return be
}

// retryMs is d rounded up to the millisecond (entry.RetryMs): the
// precision of a QPS reject rule's RetryAfter.
func retryMs(d time.Duration) time.Duration { return entry.RetryMs(d) }

func (c *reject) Release(x entry.ExitInfo) { giveBack(c.win, c.width, x) }

func (c *reject) inherit(old checker) { c.win = old.(windowed).counter().win } // *reject or *tiered
