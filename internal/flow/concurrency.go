package flow

import (
	"context"
	"time"

	"sync/atomic"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/window"
)

// concurrency enforces a concurrency rule: at most limit requests (by
// batch) in flight, each holding its slot until Exit.
type concurrency struct {
	inflight *atomic.Int64
	limit    float64
	base
	// refusals shares the rule's equal refusals (the in-flight count
	// seen, or a batch too large).
	refusals entry.Refusals
}

func newConcurrency(b base) *concurrency {
	return &concurrency{inflight: new(atomic.Int64), limit: b.rule.Threshold, base: b}
}

func (c *concurrency) check(_ context.Context, ec *entry.Context, _ core.Clock) *core.BlockError {
	n := ec.Batch
	for {
		cur := c.inflight.Load()
		if float64(cur+n) > c.limit {
			if n := float64(ec.Batch); n > c.limit {
				return c.shared(&c.refusals, ec, n, c.limit, 0, reasonTooLarge)
			}
			return c.shared(&c.refusals, ec, float64(cur), c.limit, 0, "")
		}
		if c.inflight.CompareAndSwap(cur, cur+n) {
			// Giving the slots back reads neither the RT nor the instant.
			ec.AddTicketClock(c, entry.ExitUntimed)
			return nil
		}
	}
}

// Release gives the entry's slots back, when it exits or a later check
// refuses it.
func (c *concurrency) Release(x entry.ExitInfo) { c.inflight.Add(-x.Batch) }

func (c *concurrency) inherit(old checker) { c.inflight = old.(*concurrency).inflight }

// associated enforces a rule on another resource's traffic: its resource is
// refused while the other resource's pass QPS (or, for the concurrency
// metric, its concurrency) is over limit. It reserves nothing.
type associated struct {
	ref         *window.Node
	concurrency bool
	limit       float64
	base
	// why is the refusals' reason (made once); refusals shares the equal
	// ones (the other resource's figure and the wait agree).
	why      string
	refusals entry.Refusals
}

func (c *associated) check(_ context.Context, ec *entry.Context, _ core.Clock) *core.BlockError {
	if c.concurrency {
		if v := c.ref.Concurrency(); float64(v) > c.limit {
			return c.shared(&c.refusals, ec, float64(v), c.limit, 0, c.reason())
		}
		return nil
	}
	now := ec.Start
	v := c.ref.QPS(now, window.Pass)
	if ec.WantBudget {
		c.refBudget(ec, v <= c.limit, uint64(v))
	}
	if v > c.limit {
		// When the other resource's window, given no more traffic, is
		// back within the threshold: a best guess, since its traffic
		// goes on; rounded up to the millisecond, as a reject rule's, so
		// that the refusals of one millisecond share their error.
		retry := entry.RetryMs(time.Duration(c.ref.FreeAt(now, window.Pass, c.limit) - now))
		return c.shared(&c.refusals, ec, v, c.limit, retry, c.reason())
	}
	return nil
}

func (c *associated) reason() string {
	if c.why == "" {
		return "associated resource " + c.rule.RefResource + " over threshold"
	}
	return c.why
}

// Release does nothing: the check reserves nothing.
func (c *associated) Release(entry.ExitInfo) {}

func (c *associated) inherit(checker) {}
