package flow

import (
	"context"
	"math"
	"sync"
	"time"

	"go.uber.org/atomic"

	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/window"
	"github.com/sluice-go/sluice/rules"
)

// NodeFunc returns the statistics node of a resource, creating it when
// needed. Controllers of associated-resource rules use it once, when built.
type NodeFunc func(resource string) *window.Node

type mode uint8

const (
	modeReject     mode = iota // QPS, direct, reject: sliding window
	modeThrottle               // QPS, direct, throttle: pacing
	modeWarmUp                 // QPS, warm-up, reject
	modeWarmUpPace             // QPS, warm-up, throttle
	modeConcurrency
	modeRefQPS
	modeRefConcurrency
)

// Controller enforces one flow rule. It is safe for concurrent use. A
// Controller is also the entry.Ticket its admitted entries hold. Its counting
// state lives behind pointers and the rest never changes after NewController,
// so a copy (the engine keeps copies in its rule sets) shares the state and
// counts exactly as the original does.
type Controller struct {
	// Read by every check: kept together at the start, so a controller
	// copied into a resource's rule set brings them in one cache line.
	mode      mode
	threshold float64
	width     int64          // ns per window bucket
	win       *window.Window // admitted, by bucket (reject modes)

	interval int64          // ns
	inflight *atomic.Int64  // concurrency mode
	latest   *atomic.Uint64 // pacing: float64 bits of the last scheduled pass (ns)
	cost     float64        // pacing: ns per request at threshold
	maxQueue int64          // pacing: ns
	ref      *window.Node   // associated resource
	warm     *warmUp
	rule     rules.Flow
}

var _ entry.Ticket = (*Controller)(nil)

// windowBuckets is the number of buckets of a QPS rule's window.
const windowBuckets = window.WindowBuckets

// NewController builds the controller of rule r, which must be valid.
func NewController(r rules.Flow, nodes NodeFunc) (*Controller, error) {
	c, err := newController(r, nodes)
	if err != nil {
		return nil, err
	}
	c.attachWindow(nodes)
	return c, nil
}

// newController is NewController without the admission window, which Build
// attaches once it knows which controllers inherit one.
func newController(r rules.Flow, nodes NodeFunc) (*Controller, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	c := &Controller{rule: r, threshold: r.Threshold, interval: int64(r.Interval())}
	c.width = c.interval / windowBuckets
	switch {
	case r.RefResource != "" && r.Metric == rules.Concurrency:
		c.mode = modeRefConcurrency
		c.ref = nodes(r.RefResource)
	case r.RefResource != "":
		c.mode = modeRefQPS
		c.ref = nodes(r.RefResource)
	case r.Metric == rules.Concurrency:
		c.mode = modeConcurrency
		c.inflight = atomic.NewInt64(0)
	case r.Strategy == rules.WarmUp:
		c.mode = modeWarmUp
		if r.Behavior == rules.Throttle {
			c.mode = modeWarmUpPace
		}
		c.warm = newWarmUp(&c.rule)
	case r.Behavior == rules.Throttle:
		c.mode = modeThrottle
	default:
		c.mode = modeReject
	}
	switch c.mode {
	case modeThrottle, modeWarmUpPace:
		c.latest = atomic.NewUint64(math.Float64bits(math.Inf(-1)))
		c.cost = float64(c.interval) / c.threshold
		c.maxQueue = int64(r.MaxQueueing)
	}
	return c, nil
}

// countsInWindow reports whether the controller keeps its admissions in a
// window.Window.
func (c *Controller) countsInWindow() bool { return c.mode == modeReject || c.mode == modeWarmUp }

// attachWindow gives a controller that counts in a window and has none yet
// its resource's own window when that is free (see window.Node.ClaimWindow),
// so a check reads counters next to the ones every call writes, or else a
// window of its own.
func (c *Controller) attachWindow(nodes NodeFunc) {
	if !c.countsInWindow() || c.win != nil {
		return
	}
	if c.win = nodes(c.rule.Resource).ClaimWindow(); c.win == nil {
		c.win = new(window.Window)
	}
}

// releaseWindow gives back the resource's own window if the controller
// holds it; the controller must be out of use (entries that still hold a
// copy may finish counting in it).
func (c *Controller) releaseWindow(nodes NodeFunc) {
	if c.win == nil {
		return
	}
	if n := nodes(c.rule.Resource); c.win == n.OwnWindow() {
		n.ReleaseWindow()
	}
}

// Rule returns the rule the controller enforces.
func (c *Controller) Rule() rules.Flow { return c.rule }

// stateKey identifies the counting state a controller can hand to its
// successor when rules are reloaded: same resource, same kind of counting,
// same window.
type stateKey struct {
	resource, ref string
	mode          mode
	interval      int64
}

func (c *Controller) key() stateKey {
	return stateKey{resource: c.rule.Resource, ref: c.rule.RefResource, mode: c.mode, interval: c.interval}
}

// inherit takes over old's counting state: the window of admitted requests,
// the in-flight count, the pacing schedule and, for an identical rule, the
// warm-up tokens. A threshold change therefore neither forgets what was
// admitted nor lets a new burst through.
func (c *Controller) inherit(old *Controller) {
	if c.countsInWindow() && old.win != nil {
		c.win = old.win
	}
	if c.inflight != nil && old.inflight != nil {
		c.inflight = old.inflight
	}
	if c.latest != nil && old.latest != nil {
		c.latest = old.latest
	}
	if c.warm != nil && old.warm != nil && c.rule == old.rule {
		c.warm = old.warm
	}
}

// Check decides on one entry at ec.Start. It returns nil and records a
// ticket on ec when the entry may pass, or a block error. Throttling
// controllers may wait, at most MaxQueueing and never past ctx, reading clk.
func (c *Controller) Check(ctx context.Context, ec *entry.Context, clk core.Clock) *core.BlockError {
	now, n := ec.Start, ec.Batch
	switch c.mode {
	case modeReject:
		ep := now / c.width
		ok, seen := c.win.TryAdd(ep, uint64(n), c.threshold)
		if !ok {
			return c.Refusal(ec, seen)
		}
		ec.AddUndo(c)
		return nil
	case modeConcurrency:
		for {
			cur := c.inflight.Load()
			if float64(cur+n) > c.threshold {
				return c.blocked(ec, float64(cur), 0, "")
			}
			if c.inflight.CompareAndSwap(cur, cur+n) {
				ec.AddTicket(c)
				return nil
			}
		}
	case modeRefQPS:
		if v := c.ref.QPS(now, window.Pass); v > c.threshold {
			return c.blocked(ec, v, int64(window.BucketWidth)-now%int64(window.BucketWidth), "associated resource "+c.rule.RefResource+" over threshold")
		}
		return nil
	case modeRefConcurrency:
		if v := c.ref.Concurrency(); float64(v) > c.threshold {
			return c.blocked(ec, float64(v), 0, "associated resource "+c.rule.RefResource+" over threshold")
		}
		return nil
	case modeThrottle:
		return c.pace(ctx, ec, clk, c.cost*float64(n))
	case modeWarmUp:
		return c.warm.check(c, ec)
	case modeWarmUpPace:
		return c.warm.pace(ctx, c, ec, clk)
	}
	return nil
}

// OwnWindowLimit reports whether the controller's whole check is a
// check-and-add against its threshold, returned, in n's own window
// (window.Node.OwnWindow) with n's bucket width: a QPS reject rule with the
// default one-second interval whose resource is n. An engine may then make
// that check itself, on the node it has in hand, give the batch back with
// Sub on the window if a later check refuses the entry, and build the
// refusal with Refusal.
func (c *Controller) OwnWindowLimit(n *window.Node) (float64, bool) {
	return c.threshold, c.mode == modeReject && c.win == n.OwnWindow() && c.width == int64(window.BucketWidth)
}

// Refusal is the error of a reject-mode check of ec that found seen
// admitted in the window.
func (c *Controller) Refusal(ec *entry.Context, seen uint64) *core.BlockError {
	return Refusal(ec, &c.rule, c.threshold, seen, c.width)
}

// Refusal is the error of a QPS reject check of ec, by rule (nil when
// unknown), that found seen admitted in a window of buckets width
// nanoseconds wide, against limit.
func Refusal(ec *entry.Context, rule *rules.Flow, limit float64, seen uint64, width int64) *core.BlockError {
	if n := float64(ec.Batch); n > limit {
		return refusal(ec, rule, n, limit, 0, "batch larger than threshold")
	}
	return refusal(ec, rule, float64(seen), limit, width-ec.Start%width, "")
}

// Release gives back what an entry holds: its in-flight slot, or, when a
// later check refused the entry, its place in the window or the schedule.
func (c *Controller) Release(x entry.ExitInfo) {
	switch c.mode {
	case modeConcurrency:
		c.inflight.Sub(x.Batch)
	case modeReject:
		if x.Blocked {
			c.win.Sub(x.Start/c.width, uint64(x.Batch))
		}
	case modeWarmUp:
		if x.Blocked {
			c.win.Sub(x.Start/c.width, uint64(x.Batch))
			c.warm.mu.Lock()
			c.warm.give(float64(x.Batch))
			c.warm.mu.Unlock()
		}
	case modeThrottle:
		if x.Blocked {
			c.unschedule(c.cost * float64(x.Batch))
		}
	case modeWarmUpPace:
		if x.Blocked {
			w := c.warm
			w.mu.Lock()
			w.latest -= int64(math.Round(float64(w.interval) / w.limit() * float64(x.Batch)))
			w.give(float64(x.Batch))
			w.mu.Unlock()
		}
	}
}

// InFlight returns the number of requests holding a slot of a concurrency
// rule (zero for other rules).
func (c *Controller) InFlight() int64 {
	if c.inflight == nil {
		return 0
	}
	return c.inflight.Load()
}

func (c *Controller) blocked(ec *entry.Context, observed float64, retry int64, reason string) *core.BlockError {
	return refusal(ec, &c.rule, observed, c.threshold, retry, reason)
}

// refusal is a flow rule's block error; rule may be nil (unknown), which
// leaves BlockError.Rule a nil interface.
func refusal(ec *entry.Context, rule *rules.Flow, observed, limit float64, retry int64, reason string) *core.BlockError {
	be := &core.BlockError{
		Type:       core.BlockFlow,
		Resource:   ec.Resource,
		Observed:   observed,
		Threshold:  limit,
		RetryAfter: time.Duration(retry),
		Reason:     reason,
	}
	if rule != nil {
		be.Rule = rule
	}
	return be
}

// pace schedules the entry cost nanoseconds after the previously scheduled
// one (or now, when the schedule is behind), and waits for its turn. A wait
// longer than MaxQueueing is refused at once. The schedule is kept in
// floating-point nanoseconds, so slot k of a rate R is at exactly k/R s
// whatever R (no rounding drift above 1,000/s, or at 7,000/s).
func (c *Controller) pace(ctx context.Context, ec *entry.Context, clk core.Clock, cost float64) *core.BlockError {
	now := ec.Start
	var next float64
	var wait int64
	for {
		lastBits := c.latest.Load()
		next = math.Max(math.Float64frombits(lastBits)+cost, float64(now))
		wait = int64(math.Round(next)) - now
		if wait > c.maxQueue {
			be := c.blocked(ec, float64(wait)/1e6, wait-c.maxQueue, "wait exceeds max queueing")
			be.Threshold = float64(c.maxQueue) / 1e6
			return be
		}
		if c.latest.CompareAndSwap(lastBits, math.Float64bits(next)) {
			break
		}
	}
	if wait > 0 {
		if err := ec.Sleep(ctx, clk, time.Duration(wait)); err != nil {
			c.unschedule(cost) // give the slot back: the next caller takes it
			be := c.blocked(ec, float64(wait)/1e6, 0, "wait cancelled")
			be.Threshold = float64(c.maxQueue) / 1e6
			be.Cause = err
			return be
		}
	}
	ec.AddUndo(c)
	return nil
}

// unschedule moves the pacing schedule one request of the given cost back.
func (c *Controller) unschedule(cost float64) {
	for {
		old := c.latest.Load()
		if c.latest.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)-cost)) {
			return
		}
	}
}

func ctxOrBackground(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

// warmUp is the token state of a warm-up rule: Sentinel's WarmUpController
// (after Guava's SmoothWarmingUp) counted in statistic intervals rather than
// seconds. Admissions consume stored tokens at once; at each interval
// boundary a resource used at less than threshold/coldFactor in the previous
// interval refills threshold tokens per elapsed interval (cooling towards
// maxToken), and a busier one below the warning level refills up to the
// warning level only. While more than warningToken tokens are stored the
// resource is cold and admits less than the threshold.
type warmUp struct {
	mu sync.Mutex

	threshold    float64
	coldFactor   float64
	warningToken float64
	maxToken     float64
	slope        float64
	interval     int64

	stored     float64
	lastFilled int64 // interval index of the last refill
	cur        int64 // interval index being counted
	curCount   float64
	prevCount  float64
	latest     int64 // pacing, for warm-up throttle
	primed     bool
}

func newWarmUp(r *rules.Flow) *warmUp {
	t := r.Threshold
	cf := r.Cold()
	periods := float64(r.WarmUpPeriod) / float64(r.Interval())
	w := &warmUp{threshold: t, coldFactor: cf, interval: int64(r.Interval()), latest: math.MinInt64 / 2}
	w.warningToken = periods * t / (cf - 1)
	w.maxToken = w.warningToken + 2*periods*t/(1+cf)
	w.slope = (cf - 1) / t / (w.maxToken - w.warningToken)
	return w
}

// sync rolls the interval counters forward to now and refills tokens at an
// interval boundary. Must hold mu.
func (w *warmUp) sync(now int64) {
	idx := now / w.interval
	if !w.primed {
		w.primed = true
		w.cur = idx
		w.lastFilled = idx - 1
		w.stored = w.maxToken
		return
	}
	if idx != w.cur {
		if idx == w.cur+1 {
			w.prevCount = w.curCount
		} else {
			w.prevCount = 0
		}
		w.curCount = 0
		w.cur = idx
	}
	if idx <= w.lastFilled {
		return
	}
	old := w.stored
	v := old
	refill := float64(idx-w.lastFilled) * w.threshold
	if w.prevCount < math.Floor(w.threshold/w.coldFactor) {
		// Lightly used (or idle): cool down towards maxToken.
		v = old + refill
	} else if old < w.warningToken {
		// Busy and warm: top up, but never past the warning level, so a
		// resource at full load stays warm.
		v = math.Min(old+refill, w.warningToken)
	}
	w.stored = math.Min(v, w.maxToken)
	w.lastFilled = idx
}

// take records n admitted requests: they count towards this interval and
// consume stored tokens at once (Sentinel deducts them only at the next
// interval's refill, which makes its warm-up lag one interval behind
// Guava's; consuming at admission reaches the threshold exactly at the end
// of the warm-up period). Must hold mu.
func (w *warmUp) take(n float64) {
	w.curCount += n
	w.stored = math.Max(w.stored-n, 0)
}

// give undoes take for a request that did not go through after all. Must
// hold mu.
func (w *warmUp) give(n float64) {
	w.curCount -= n
	w.stored = math.Min(w.stored+n, w.maxToken)
}

// limit returns the number of requests allowed per interval in the current
// token state. Must hold mu.
func (w *warmUp) limit() float64 {
	if w.stored >= w.warningToken {
		above := w.stored - w.warningToken
		return 1 / (above*w.slope + 1/w.threshold)
	}
	return w.threshold
}

// Limit returns the rule's current allowance per interval at now (for
// observation and tests).
func (c *Controller) Limit(now int64) float64 {
	if c.warm == nil {
		return c.threshold
	}
	c.warm.mu.Lock()
	defer c.warm.mu.Unlock()
	c.warm.sync(now)
	return c.warm.limit()
}

func (w *warmUp) check(c *Controller, ec *entry.Context) *core.BlockError {
	now, n := ec.Start, ec.Batch
	w.mu.Lock()
	w.sync(now)
	lim := w.limit()
	ok, seen := c.win.TryAdd(now/c.width, uint64(n), lim)
	if ok {
		w.take(float64(n))
	}
	w.mu.Unlock()
	if !ok {
		be := c.blocked(ec, float64(seen), c.width-now%c.width, "warming up")
		be.Threshold = lim
		return be
	}
	ec.AddUndo(c)
	return nil
}

func (w *warmUp) pace(ctx context.Context, c *Controller, ec *entry.Context, clk core.Clock) *core.BlockError {
	now, n := ec.Start, ec.Batch
	w.mu.Lock()
	w.sync(now)
	step := int64(math.Round(float64(w.interval) / w.limit() * float64(n)))
	next := w.latest + step
	if next < now {
		next = now
	}
	wait := next - now
	if wait > c.maxQueue {
		w.mu.Unlock()
		be := c.blocked(ec, float64(wait)/1e6, wait-c.maxQueue, "wait exceeds max queueing")
		be.Threshold = float64(c.maxQueue) / 1e6
		return be
	}
	w.latest = next
	w.take(float64(n))
	w.mu.Unlock()
	if wait > 0 {
		if err := ec.Sleep(ctx, clk, time.Duration(wait)); err != nil {
			w.mu.Lock()
			w.latest -= step
			w.give(float64(n))
			w.mu.Unlock()
			be := c.blocked(ec, float64(wait)/1e6, 0, "wait cancelled")
			be.Threshold = float64(c.maxQueue) / 1e6
			be.Cause = err
			return be
		}
	}
	ec.AddUndo(c)
	return nil
}
