package flow

import (
	"cmp"
	"context"
	"math"
	"time"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/ruledef"
	"github.com/sluice-go/sluice/internal/rulewalk"
	"github.com/sluice-go/sluice/internal/window"
	"github.com/sluice-go/sluice/rules"
)

// NodeFunc returns the statistics node of a resource, creating it when
// needed. Controllers use it when they are built: associated-resource rules
// for the resource they measure, window-counting rules for their own
// resource's window.
type NodeFunc func(resource string) *window.Node

// Controller enforces one flow rule. It is a small value holding the rule's
// checker, one type per kind of rule, whose counting state lives behind
// pointers: a copy (the engine keeps copies in its rule sets) shares the
// state and counts exactly as the original does. Its zero value is not
// usable; build controllers with Build or NewController. It is safe for
// concurrent use.
type Controller struct {
	c checker
}

// checker is the behaviour of one kind of flow rule: *reject, *exact,
// *throttle, *warmUp, *warmUpThrottle, *tokenBucket, *tokenBucketThrottle,
// *concurrency, *associated, *clusterRule or *tiered.
// Implementations are safe for concurrent use and are the entry.Ticket of
// what their check reserves: Release gives it back.
//
// Each also has a method
//
//	check(ctx context.Context, ec *entry.Context, clk core.Clock) *core.BlockError
//
// that decides on ec at ec.Start: it returns nil, after recording on ec a
// ticket for anything it reserved, or the refusal; pacing checkers may wait,
// at most MaxQueueing and never past ctx (nil means none), reading clk.
// Controller.Check calls it on the concrete type: through an interface, Go
// would have to assume that ec escapes, and every entry would move to the
// heap.
type checker interface {
	entry.Ticket
	// enforced returns the rule the checker enforces.
	enforced() *rules.Flow
	// inherit takes over the counting state of old, a checker with the same
	// stateKey and therefore of the same type, when rules are reloaded.
	inherit(old checker)
}

// NewController builds the controller of rule r, which must be valid and
// local (cluster rules are built by Build).
func NewController(r rules.Flow, nodes NodeFunc) (*Controller, error) {
	if r.Cluster != nil {
		return nil, &rules.Error{Kind: "flow", Index: -1, Resource: r.Resource, Field: "Cluster", Reason: errNoCluster}
	}
	if err := (&rules.Set{Flow: []rules.Flow{r}}).Validate(); err != nil {
		return nil, err
	}
	c := newController(r, nodes)
	c.attachWindow(nodes)
	return c, nil
}

// newController is NewController without the admission window, which Build
// attaches once it knows which controllers inherit one.
func newController(r rules.Flow, nodes NodeFunc) *Controller {
	b := base{rule: rulewalk.Clone(r)} // shares no cluster section with the caller
	var c checker
	switch {
	case r.Quota != nil:
		c = newQuotaRule(b)
	case r.Cluster != nil:
		c = newClusterChecker(b)
	case r.RefResource != "":
		c = &associated{ref: nodes(r.RefResource), concurrency: r.Metric == rules.Concurrency, limit: r.Threshold, base: b,
			why: "associated resource " + r.RefResource + " over threshold"}
	case r.Adaptive != nil:
		c = newAdaptive(b)
	case r.Metric == rules.Concurrency:
		c = newConcurrency(b)
	case r.Bucket != nil && r.Throttle != nil:
		c = newTokenBucketThrottle(b)
	case r.Bucket != nil:
		c = newTokenBucket(b)
	case r.WarmUp != nil && r.Throttle != nil:
		c = newWarmUpThrottle(b)
	case r.WarmUp != nil:
		c = newWarmUp(b)
	case r.Throttle != nil:
		c = newThrottle(b)
	case r.Exact:
		c = newExact(b)
	case len(r.Tiers) > 0:
		c = newTiered(b, nodes(r.Resource))
	default:
		c = &reject{counted: counted{width: bucketWidth(&r)}, limit: r.Threshold, base: b}
	}
	return &Controller{c: c}
}

// Check decides on one entry at ec.Start. It returns nil and records a
// ticket on ec when the entry may pass, or a block error. Throttling
// controllers may wait, at most MaxQueueing and never past ctx, reading clk.
func (c *Controller) Check(ctx context.Context, ec *entry.Context, clk core.Clock) *core.BlockError {
	switch k := c.c.(type) {
	case *reject:
		return k.check(ctx, ec, clk)
	case *exact:
		return k.check(ctx, ec, clk)
	case *throttle:
		return k.check(ctx, ec, clk)
	case *warmUp:
		return k.check(ctx, ec, clk)
	case *warmUpThrottle:
		return k.check(ctx, ec, clk)
	case *tokenBucket:
		return k.check(ctx, ec, clk)
	case *tokenBucketThrottle:
		return k.check(ctx, ec, clk)
	case *concurrency:
		return k.check(ctx, ec, clk)
	case *adaptiveRule:
		return k.check(ctx, ec, clk)
	case *associated:
		return k.check(ctx, ec, clk)
	case *clusterRule:
		return k.check(ctx, ec, clk)
	case *clusterConc:
		return k.check(ctx, ec, clk)
	case *tiered:
		return k.check(ctx, ec, clk)
	case *quotaRule:
		return k.check(ctx, ec, clk)
	}
	panic("sluice: flow controller without a checker")
}

// Rule returns the rule the controller enforces.
func (c *Controller) Rule() rules.Flow { return *c.c.enforced() }

// stateKey identifies the counting state a controller can hand to its
// successor when rules are reloaded: same resource, same kind of counting,
// same window. Equal keys imply checkers of the same type, or *reject and
// *tiered (tiers choose the limit, not how it counts).
type stateKey struct {
	resource, ref string
	metric        rules.FlowMetric
	kind          string // kindOf
	throttle      bool
	exact         bool
	adaptive      bool
	interval      time.Duration
	cluster       clusterTerms // zero for a local rule
	quota         quotaTerms   // zero without a quota
}

func (c *Controller) key() stateKey {
	r := c.c.enforced()
	return stateKey{
		resource: r.Resource, ref: r.RefResource,
		metric: cmp.Or(r.Metric, rules.QPS), kind: kindOf(r), throttle: r.Throttle != nil, exact: r.Exact, adaptive: r.Adaptive != nil,
		interval: cmp.Or(r.StatInterval, ruledef.StatInterval), cluster: termsOf(r), quota: quotaTermsOf(r),
	}
}

// base is what every checker keeps: its rule, which refusals point to.
type base struct {
	rule rules.Flow
}

func (b *base) enforced() *rules.Flow { return &b.rule }

// refuse returns the rule's block error for ec: the rule measured observed
// against limit, and a retry after retry may pass (0: retrying cannot
// help, or the rule cannot tell when it would).
func (b *base) refuse(ec *entry.Context, observed, limit float64, retry time.Duration, reason string) *core.BlockError {
	return &core.BlockError{
		Type:       core.BlockFlow,
		Resource:   ec.Resource,
		Rule:       core.RuleRef{ID: b.rule.ID, Metric: string(cmp.Or(b.rule.Metric, rules.QPS))},
		Observed:   observed,
		Threshold:  limit,
		RetryAfter: retry,
		Reason:     reason,
		Shadow:     b.rule.Shadow,
	}
}

// sleep waits d for ec's turn as ec.Sleep does, except for a rule in shadow
// mode, which never makes a request wait: its entry takes the turn it was
// given (the schedule moves as the enforced rule's would) and goes on at
// once.
func (b *base) sleep(ctx context.Context, ec *entry.Context, clk core.Clock, d time.Duration) error {
	if b.rule.Shadow {
		return nil
	}
	return ec.Sleep(ctx, clk, d)
}

// queueRefusal is the refusal of a pacing rule whose turn for ec is wait
// nanoseconds away, more than maxQueue allows. Observed and Threshold are
// the wait and the bound in milliseconds; the reason gives both with their
// units, and RetryAfter is when the wait will be within the bound, if
// nothing else is scheduled meanwhile.
func (b *base) queueRefusal(ec *entry.Context, wait float64, maxQueue int64) *core.BlockError {
	return b.refuse(ec, wait/1e6, float64(maxQueue)/1e6, saturated(wait-float64(maxQueue)),
		"wait "+describe(wait)+" exceeds max queueing "+time.Duration(maxQueue).String())
}

// cancelled is the refusal of a pacing rule's entry whose wait of wait
// nanoseconds ended with ctx (err), before its turn.
func (b *base) cancelled(ec *entry.Context, wait float64, maxQueue int64, err error) *core.BlockError {
	be := b.refuse(ec, wait/1e6, float64(maxQueue)/1e6, 0, "wait of "+describe(wait)+" cancelled")
	be.Cause = err
	return be
}

// waitBound returns the longest wait a pacing rule may give an entry whose
// context is ctx (nil: none): maxQueue, or less when the context's deadline
// leaves less, and then short. The deadline is read against the wall clock
// (time.Until), on which the context ends whatever clock the engine reads.
// A deadline already past still admits an entry that need not wait.
func waitBound(ctx context.Context, maxQueue int64) (bound int64, short bool) {
	if ctx == nil {
		return maxQueue, false
	}
	d, ok := ctx.Deadline()
	if !ok {
		return maxQueue, false
	}
	if left := int64(time.Until(d)); left < maxQueue {
		return max(left, 0), true
	}
	return maxQueue, false
}

// pastDeadline is the refusal of a pacing rule's entry whose turn, wait
// nanoseconds away, comes after its context's deadline, left nanoseconds
// away: refused at once, holding nothing, as rate.Limiter.WaitN does, so
// the turn stays free for a caller that can wait for it. It matches
// context.DeadlineExceeded (its Cause) as well as ErrBlocked. Observed and
// Threshold are the wait and the time left, in milliseconds.
func (b *base) pastDeadline(ec *entry.Context, wait float64, left int64) *core.BlockError {
	be := b.refuse(ec, wait/1e6, float64(left)/1e6, 0,
		"wait "+describe(wait)+" exceeds the context's deadline ("+describe(float64(left))+" left)")
	be.Cause = context.DeadlineExceeded
	return be
}

// saturated converts ns nanoseconds to a time.Duration, saturating at the
// longest one (about 292 years) instead of wrapping around. A wait that
// long comes from a threshold far below one request per interval.
func saturated(ns float64) time.Duration {
	switch {
	case ns >= math.MaxInt64: // 2^63 as a float64: the first value out of range
		return math.MaxInt64
	case ns <= math.MinInt64:
		return math.MinInt64
	}
	return time.Duration(ns)
}

// describe renders ns nanoseconds for a message: rounded to four
// significant digits, and as "more than" the longest duration when it
// saturates.
func describe(ns float64) string {
	d := saturated(ns)
	if d == math.MaxInt64 {
		return "more than " + d.String()
	}
	unit := time.Duration(1)
	for d/unit >= 10000 {
		unit *= 10
	}
	return d.Round(unit).String()
}

// reasonTooLarge is the reason of a refusal of a batch that the rule could
// never admit.
const reasonTooLarge = "batch larger than threshold"

// tooLarge returns the refusal of ec when its batch is larger than limit,
// the rule's threshold: no wait can admit it, so it comes without a
// RetryAfter. It returns nil for a batch within limit.
func (b *base) tooLarge(ec *entry.Context, limit float64) *core.BlockError {
	if n := float64(ec.Batch); n > limit {
		return b.refuse(ec, n, limit, 0, reasonTooLarge)
	}
	return nil
}

// tooLargeToPace is tooLarge for a pacing rule, which admits a single
// request every interval/threshold however long that is (a threshold below
// one paces requests more than an interval apart): only a batch of more
// than one request can be too large.
func (b *base) tooLargeToPace(ec *entry.Context, limit float64) *core.BlockError {
	if ec.Batch == 1 {
		return nil
	}
	return b.tooLarge(ec, limit)
}
