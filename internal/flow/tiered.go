package flow

import (
	"cmp"
	"context"
	"github.com/sluice-go/sluice/internal/rulewalk"
	"math"
	"strconv"
	"sync/atomic"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/window"
	"github.com/sluice-go/sluice/rules"
)

// TierEvery is how often a tiered rule reads its metric: at the first entry
// of each period of this length (one bucket of the node's second-level
// window). The metric is the resource's over the last second (RT, errors)
// or the last CPU sample, so a change of the metric shows in the tier
// within a second and TierEvery of the change, for a step change of RT or
// errors, or a sample interval and TierEvery for CPU.
const TierEvery = int64(window.BucketWidth)

// TierChange is one move of a tiered rule from step From to step To (0: the
// rule's own Threshold, i: Tiers[i-1]) at At, when its metric read Value.
type TierChange struct {
	Rule     rules.Flow
	From, To int
	Value    float64
	At       int64
}

// TierHooks connect a tiered rule to its engine: CPU reads the process's
// CPU usage (NaN when unknown) for TierCPU rules, and Changed hears of every
// move between steps (on the goroutine of the entry that made it). Either
// may be nil.
type TierHooks struct {
	CPU     func() float64
	Changed func(TierChange)
}

// tiered enforces a QPS reject rule with Tiers: the decision of reject
// against the limit of the current step, which the first entry of each
// TierEvery period recomputes from the metric (the others read it with one
// atomic load).
type tiered struct {
	counted
	node   *window.Node // the resource's node, whose RT and errors the metric reads
	limits []float64    // limits[0] the rule's Threshold (+Inf for 0), limits[i] Tiers[i-1].Threshold
	st     *tierState
	base
}

// tierState is what a tiered rule hands to its successor across reloads:
// the step it is on (the hysteresis needs it) and when it reads next.
type tierState struct {
	cur   atomic.Int32
	limit atomic.Uint64 // float64 bits of the current step's limit
	next  atomic.Int64  // the TierEvery period at which to read the metric next
	hooks atomic.Pointer[TierHooks]
}

func newTiered(b base, node *window.Node) *tiered {
	limits := make([]float64, len(b.rule.Tiers)+1)
	limits[0] = b.rule.Threshold
	if limits[0] == 0 {
		limits[0] = math.Inf(1)
	}
	for i, t := range b.rule.Tiers {
		limits[i+1] = t.Threshold
	}
	c := &tiered{counted: counted{width: bucketWidth(&b.rule)}, node: node, limits: limits, st: new(tierState), base: b}
	c.st.limit.Store(math.Float64bits(limits[0]))
	c.st.hooks.Store(&TierHooks{})
	if node != nil && cmp.Or(b.rule.TierMetric, rules.TierAvgRT) == rules.TierAvgRT {
		node.TimeExits() // the metric is the exits' RT
	}
	return c
}

func (c *tiered) check(_ context.Context, ec *entry.Context, _ core.Clock) *core.BlockError {
	st := c.st
	if p := ec.Start / TierEvery; p >= st.next.Load() {
		c.evaluate(ec.Start, p)
	}
	limit := math.Float64frombits(st.limit.Load())
	ok, seen := admit(ec, c.win, c.width, limit)
	if ec.WantBudget {
		c.tieredBudget(ec, ok, limit, seen)
	}
	if !ok {
		if be := c.tooLarge(ec, limit); be != nil {
			return be
		}
		be := c.refuse(ec, float64(seen), limit, c.retryAfter(ec, limit), "")
		be.Reason = "tier " + strconv.Itoa(int(st.cur.Load()))
		return be
	}
	ec.AddUndo(c)
	return nil
}

// evaluate reads the metric at now, in period p, and moves the rule's step
// (one caller per period: the one whose compare-and-swap moves next).
func (c *tiered) evaluate(now, p int64) {
	st := c.st
	old := st.next.Load()
	if p < old || !st.next.CompareAndSwap(old, p+1) {
		return
	}
	h := st.hooks.Load()
	v := c.metric(now, h)
	if math.IsNaN(v) {
		return // nothing measured: the step stays
	}
	from := int(st.cur.Load())
	to := nextTier(c.rule.Tiers, from, v)
	if to == from {
		return
	}
	st.cur.Store(int32(to))
	st.limit.Store(math.Float64bits(c.limits[to]))
	if h.Changed != nil {
		h.Changed(TierChange{Rule: rulewalk.Clone(c.rule), From: from, To: to, Value: v, At: now})
	}
}

// nextTier is the step after cur for metric value v: up past every Above
// that v exceeds, or else down past every Below that v is under.
func nextTier(tiers []rules.Tier, cur int, v float64) int {
	k := cur
	for k < len(tiers) && v > tiers[k].Above {
		k++
	}
	if k != cur {
		return k
	}
	for k > 0 && v < cmp.Or(tiers[k-1].Below, tiers[k-1].Above) {
		k--
	}
	return k
}

// metric reads the rule's metric at now: NaN when there is nothing to read
// (no call completed in the last second, no CPU reading).
func (c *tiered) metric(now int64, h *TierHooks) float64 {
	switch cmp.Or(c.rule.TierMetric, rules.TierAvgRT) {
	case rules.TierCPU:
		if h.CPU == nil {
			return math.NaN()
		}
		return h.CPU()
	case rules.TierErrorRatio:
		done := c.node.Sum(now, window.Complete)
		if done == 0 {
			return math.NaN()
		}
		return float64(c.node.Sum(now, window.Error)) / float64(done)
	}
	if c.node.Sum(now, window.Complete) == c.node.Sum(now, window.Untimed) {
		return math.NaN() // no timed exit (the rule times them from its load on)
	}
	return c.node.AvgRT(now) / 1000 // ms
}

func (c *tiered) Release(x entry.ExitInfo) { giveBack(c.win, c.width, x) }

// inherit takes over the window and the step (capped at the new rule's
// last), read again at the next entry.
func (c *tiered) inherit(old checker) {
	c.win = old.(windowed).counter().win
	o, ok := old.(*tiered) // or a *reject, without tiers
	if !ok {
		return
	}
	st := o.st
	cur := min(int(st.cur.Load()), len(c.limits)-1)
	st.cur.Store(int32(cur))
	st.limit.Store(math.Float64bits(c.limits[cur]))
	st.next.Store(0)
	c.st = st
}

// SetTierHooks gives the tiered rules among cs their engine's hooks.
func SetTierHooks(cs map[string][]*Controller, h TierHooks) {
	for _, l := range cs {
		for _, c := range l {
			if t, ok := c.c.(*tiered); ok {
				t.st.hooks.Store(&h)
			}
		}
	}
}

// Tier returns the step the tiered rule among cs is on, and false when none
// of them is tiered.
func Tier(cs []Controller) (int, bool) {
	for i := range cs {
		if t, ok := cs[i].c.(*tiered); ok {
			return int(t.st.cur.Load()), true
		}
	}
	return 0, false
}

// tieredBudget notes (ok: the entry passed) or records the window budget
// at the current tier's limit.
func (c *tiered) tieredBudget(ec *entry.Context, ok bool, limit float64, seen uint64) {
	if ok {
		c.noteWindow(ec, c.win, c.width, limit, seen)
	} else {
		c.refusedWindow(ec, c.win, c.width, limit, seen)
	}
}
