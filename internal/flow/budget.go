package flow

import (
	"cmp"
	"math"
	"time"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/window"
	"github.com/sluice-go/sluice/rules"
)

// The remaining budget of a rate rule (core.Budget), computed only for an
// entry that asked for it (entry.Context.WantBudget), so that the pass path
// of every other entry pays one test of a flag per rule. Each kind of rule
// says what its Limit, Remaining, Reset and Window are where it computes
// them; docs/rules.md ("Remaining budget") states them for users.

// ruleRef is the RuleRef of the rule, as its refusals carry it.
func (b *base) ruleRef() core.RuleRef {
	return core.RuleRef{ID: b.rule.ID, Metric: string(cmp.Or(b.rule.Metric, rules.QPS))}
}

// noteBudget records the budget the rule leaves after admitting ec (the
// tightest is kept: entry.Context.NoteBudget). A rule in shadow mode
// enforces nothing and tells nothing.
func (b *base) noteBudget(ec *entry.Context, bg core.Budget) {
	if b.rule.Shadow {
		return
	}
	bg.Rule = b.ruleRef()
	ec.NoteBudget(bg)
}

// refusedBudget records the budget of the rule refusing ec: whatever
// earlier rules noted, the refusing rule's is the one the entry hears.
func (b *base) refusedBudget(ec *entry.Context, bg core.Budget) {
	if b.rule.Shadow {
		return
	}
	bg.Rule = b.ruleRef()
	ec.Budget = bg
}

// floorCount returns floor(x) as a request count, at least 0 and at most
// 2^62 (a limit too large to mean anything as a count).
func floorCount(x float64) int64 {
	switch {
	case !(x > 0):
		return 0
	case x >= 1<<62:
		return 1 << 62
	}
	return int64(x)
}

// ceilDuration returns ns nanoseconds rounded up, as a saturated duration.
func ceilDuration(ns float64) time.Duration {
	if !(ns > 0) {
		return 0
	}
	return saturated(math.Ceil(ns))
}

// windowBudget is the budget of a rule that counts in a sliding window
// (reject, tiered, warm-up, the Gate): Limit is the allowance limit per
// interval, Remaining what the window has room for with total counted in
// it, and Reset the time until the newest bucket holding a count has left
// the window (the window is then empty, if nothing else comes). total
// includes the entry's batch when it passed.
func windowBudget(ec *entry.Context, win *window.Window, width int64, limit float64, total uint64) core.Budget {
	bg := core.Budget{Limit: limit, Remaining: floorCount(limit - float64(total)), Window: time.Duration(width * window.WindowBuckets)}
	if last, ok := win.LastCounted(ec.Start / width); ok {
		bg.Reset = time.Duration(max((last+window.WindowBuckets)*width-ec.Start, 0))
	}
	return bg
}

// noteWindow notes the window budget of a passed entry, which found seen
// counted before its batch.
func (b *base) noteWindow(ec *entry.Context, win *window.Window, width int64, limit float64, seen uint64) {
	b.noteBudget(ec, windowBudget(ec, win, width, limit, seen+uint64(ec.Batch)))
}

// refusedWindow records the window budget of a refused entry, which found
// seen counted.
func (b *base) refusedWindow(ec *entry.Context, win *window.Window, width int64, limit float64, seen uint64) {
	b.refusedBudget(ec, windowBudget(ec, win, width, limit, seen))
}

// queueBudget is the budget of a pacing rule (throttle, warm-up throttle):
// one request every cost ns, each waiting at most maxQueue ns. Limit is the
// requests an idle schedule admits at once (the one that goes at once and
// those that fit in the queue), Remaining those that still would with the
// schedule busy until busy ns from now (one after another, the j-th
// waiting busy + j×cost), Reset the time until the schedule is idle, and
// Window the time Limit requests take.
func queueBudget(cost float64, maxQueue int64, busy float64) core.Budget {
	limit := float64(floorCount(float64(maxQueue)/cost) + 1)
	bg := core.Budget{Limit: limit, Reset: ceilDuration(busy), Window: saturated(limit * cost)}
	busy = math.Max(busy, 0)
	if busy <= float64(maxQueue) {
		bg.Remaining = min(floorCount((float64(maxQueue)-busy)/cost)+1, int64(limit))
	}
	return bg
}

// bucketBudget is the budget of a token bucket of burst tokens refilled at
// rate, which admits admits more requests at the decision (after the
// entry's tokens when it passed) and is full untilFull ns later, whose
// requests may go into debt for at most maxQueue ns (0: refuse at once).
// Limit is the requests a full bucket admits at once, Remaining those it
// admits now, Reset the time until it is full, Window the time it takes to
// refill Limit tokens.
func bucketBudget(rate refill, burst float64, admits int64, untilFull float64, maxQueue int64) core.Budget {
	debt := rate.tokens(float64(maxQueue)) // the tokens a wait of maxQueue covers
	limit := float64(floorCount(burst + debt))
	return core.Budget{
		Limit:     limit,
		Remaining: min(admits, int64(limit)),
		Reset:     ceilDuration(untilFull),
		Window:    saturated(rate.ns(limit)),
	}
}
