package param

import (
	"cmp"
	"context"
	"maps"
	"math"
	"math/bits"
	"time"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/ruledef"
	"github.com/sluice-go/sluice/internal/rulewalk"
	"github.com/sluice-go/sluice/rules"
)

type mode uint8

const (
	modeReject      mode = iota // QPS, reject: token bucket per value
	modeThrottle                // QPS, throttle: pacer per value
	modeConcurrency             // in-flight counter per value
	modeWindow                  // QPS, reject, per caller: a sliding window of two buckets per value (window.go)
)

// Controller enforces one param rule. It is safe for concurrent use.
type Controller struct {
	rule     rules.Param
	mode     mode
	window   uint64           // Duration in ns (QPS)
	burst    int64            // Burst
	maxQueue int64            // MaxQueueing in ns (throttle)
	exc      map[string]int64 // own copy of Exceptions; nil when empty
	cache    *cache
	cl       *clusterCtl // nil for a local rule
	q        *quotaCtl   // nil without a quota
	// refusals shares a local rule's equal refusals (see refused).
	refusals entry.Refusals
}

// NewController builds the controller of local rule r, tracking no value
// yet. Cluster rules are built by Build.
func NewController(r rules.Param) (*Controller, error) {
	if err := (&rules.Set{Param: []rules.Param{r}}).Validate(); err != nil {
		return nil, err
	}
	if r.Cluster != nil {
		return nil, &rules.Error{Kind: "param", Resource: r.Resource, Field: "Cluster", Reason: errNoCluster}
	}
	c := newController(r)
	c.cache = newCache(cmp.Or(r.Capacity, ruledef.ParamCapacity), c.mode)
	if r.Quota != nil {
		c.q = newQuotaCtl(&c.rule, nil)
	}
	return c, nil
}

// newController builds the controller of the valid rule r, without a cache.
func newController(r rules.Param) *Controller {
	c := &Controller{
		rule:     rulewalk.Clone(r),
		window:   uint64(cmp.Or(r.Duration, ruledef.ParamDuration)),
		burst:    r.Burst,
		maxQueue: int64(maxQueueing(&r)),
	}
	if len(r.Exceptions) > 0 {
		c.exc = maps.Clone(r.Exceptions)
	}
	switch {
	case r.Metric == rules.Concurrency:
		c.mode = modeConcurrency
	case r.Throttle != nil:
		c.mode = modeThrottle
	default:
		c.mode = modeReject
	}
	return c
}

// Rule returns (a copy of) the rule the controller enforces.
func (c *Controller) Rule() rules.Param { return rulewalk.Clone(c.rule) }

// Tracked returns the number of distinct values whose state the controller
// holds.
func (c *Controller) Tracked() int { return c.cache.len() }

// InFlight returns the number of requests in flight for the value whose
// string form is v (concurrency rules; zero for others or untracked values).
func (c *Controller) InFlight(v string) int64 {
	if e, ok := c.cache.lookup(v); ok {
		return e.inflight()
	}
	return 0
}

// Tokens returns the tokens the bucket of value v would hold at now without
// taking any (QPS reject rules), and false when the value is not tracked, in
// which case its bucket is full. For observation and tests.
func (c *Controller) Tokens(v string, now int64) (int64, bool) {
	if c.mode != modeReject {
		return 0, false
	}
	s, r := c.cache.locate(v)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.find(&r)
	if e == nil {
		return 0, false
	}
	refill(e, now, c.threshold(v), c.burst, c.window)
	return e.tokens, true
}

func (c *Controller) threshold(key string) int64 {
	if c.exc != nil {
		if t, ok := c.exc[key]; ok {
			return t
		}
	}
	return c.rule.Threshold
}

// Check decides on one entry at ec.Start, for the value of the rule's
// argument in args: the attachment named Key, or else positional argument
// Index (a typed argument before WithArgs'). It returns nil (recording a
// ticket on ec when the entry holds something) or a block error.
// Throttling rules may wait, at most MaxQueueing and never past ctx, on clk.
// Entries without the argument pass.
//
// Check reads args and keeps nothing reachable from them (a new value is
// copied or fingerprinted), so arguments stay on the caller's stack.
func (c *Controller) Check(ctx context.Context, ec *entry.Context, args entry.Args, clk core.Clock) *core.BlockError {
	var (
		buf keyBuf
		key string
		ok  bool
	)
	if c.rule.Key != "" {
		key, ok = keyOf(args.Named(c.rule.Key), &buf)
	} else if v, x := args.At(c.rule.Index); v != nil {
		key, ok = keyOf(v, &buf)
	} else {
		key, ok = anyKey(x, &buf)
	}
	if !ok {
		return nil
	}
	return c.CheckKey(ctx, ec, key, clk)
}

// CheckKey is Check for a value given by its string form. key is not kept.
func (c *Controller) CheckKey(ctx context.Context, ec *entry.Context, key string, clk core.Clock) *core.BlockError {
	t := c.threshold(key)
	if t == 0 {
		return c.refused(ec, 0, 0, 0, "value refused by its exception")
	}
	// The largest batch a value can ever pass: its bucket's size (Burst is
	// zero unless the rule is QPS Reject), its window's worth of slots or its
	// in-flight limit. Retrying cannot help a larger one.
	if limit := t + c.burst; ec.Batch > limit {
		return c.refused(ec, float64(ec.Batch), float64(limit), 0, "batch larger than threshold")
	}
	if c.q != nil {
		return c.checkQuota(ctx, ec, key, t, clk)
	}
	if c.cl != nil && c.cl.slots != nil {
		return c.checkSlots(ctx, ec, key, t)
	}
	if c.cl != nil {
		be := c.checkCluster(ctx, ec, key, t, clk)
		if ec.WantBudget {
			c.clusterBudget(ec, be, key, t)
		}
		return be
	}
	return c.checkLocal(ctx, ec, key, t, c.burst, clk)
}

// checkLocal decides the entry in this process for value key with
// threshold t and burst: the rule's own, or a cluster rule's local share
// while its store fails.
func (c *Controller) checkLocal(ctx context.Context, ec *entry.Context, key string, t, burst int64, clk core.Clock) *core.BlockError {
	now, n := ec.Start, ec.Batch
	s, r := c.cache.locate(key)
	switch c.mode {
	case modeReject:
		size := t + burst
		s.mu.Lock()
		e := s.get(&r, size, now)
		refill(e, now, t, burst, c.window)
		if e.tokens >= n {
			e.tokens -= n
			if c.wantBudget(ec) {
				c.bucketBudget(ec, true, e.tokens, e.part, t, burst)
			}
			s.mu.Unlock()
			// The tokens come back only if a later check refuses the entry:
			// an exit that passed touches nothing of the value.
			ec.AddUndo(e)
			return nil
		}
		have, part, last := e.tokens, e.part, e.last
		if c.wantBudget(ec) {
			c.bucketBudget(ec, false, have, part, t, burst)
		}
		s.mu.Unlock()
		// The bucket holds have+part/window tokens at last, which is after
		// now when an entry that started later took the lock first.
		retry := satAdd(c.wait(n-have, part, t), last-now)
		return c.refused(ec, float64(size-have), float64(size), retry, "")
	case modeWindow:
		return c.checkWindow(ec, s, &r, t)
	case modeConcurrency:
		s.mu.Lock()
		e := s.get(&r, 0, 0)
		cur := e.tokens // in flight
		if cur+n > t {
			s.mu.Unlock()
			return c.refused(ec, float64(cur), float64(t), 0, "")
		}
		e.tokens += n
		s.mu.Unlock()
		// Giving the slot back reads neither the RT nor the instant.
		ec.AddTicketClock(e, entry.ExitUntimed)
		return nil
	default:
		return c.pace(ctx, ec, clk, s, &r, t, c.window, now)
	}
}

// satAdd returns a+b for non-negative a, or math.MaxInt64 when that
// overflows; a negative b adds nothing.
func satAdd(a, b int64) int64 {
	if b <= 0 {
		return a
	}
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// refill adds the tokens value e has earned since its last refill, at t per
// window, exactly: the product elapsed×t and the carried remainder are kept
// in 128 bits, the whole tokens are added and the rest carried in part, so t
// tokens are earned per window however t and the window divide. The bucket
// never holds more than t+burst. Must hold e's shard lock.
func refill(e *keyState, now, t, burst int64, window uint64) {
	size := t + burst
	if e.tokens >= size {
		e.tokens, e.part = size, 0
	}
	el := now - e.last
	if el <= 0 {
		return // another entry with a later start refilled already
	}
	e.last = now
	if e.tokens == size {
		return
	}
	hi, lo := bits.Mul64(uint64(el), uint64(t))
	var carry uint64
	lo, carry = bits.Add64(lo, e.part, 0)
	hi += carry
	if hi >= window { // more than 2^64 tokens: full
		e.tokens, e.part = size, 0
		return
	}
	q, r := bits.Div64(hi, lo, window)
	if q >= uint64(size-e.tokens) {
		e.tokens, e.part = size, 0
		return
	}
	e.tokens += int64(q)
	e.part = r
}

// wait returns the nanoseconds until a bucket short of need tokens, holding
// part/window of the next one, has earned them at t per window (rounded up).
func (c *Controller) wait(need int64, part uint64, t int64) int64 {
	hi, lo := bits.Mul64(uint64(need), c.window)
	var borrow uint64
	lo, borrow = bits.Sub64(lo, part, 0)
	hi -= borrow
	lo, carry := bits.Add64(lo, uint64(t-1), 0) // round up
	hi += carry
	if hi >= uint64(t) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(t))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// pace gives the entry the next n slots of the value's schedule, each
// window/t nanoseconds long, and waits for the first of them. The schedule
// is the instant its last slot ends, last + part/t (part < t): exact, the
// fraction of a nanosecond carried. An idle schedule (ended at or before
// floor, which is at or after now: now for a local rule) starts afresh at
// floor, so an entry never waits behind slots nobody used, and a batch of
// n holds n slots whether the schedule was idle or not. window is the
// rule's Duration for a local rule; a cluster rule's local share passes
// Duration × N (see paceShare).
// The entry passes at the first whole nanosecond at or after its first
// slot, never before. A wait longer than MaxQueueing is refused at once
// (RetryAfter: the wait beyond MaxQueueing); a cancelled wait gives its
// slots back when no later entry of the value has been scheduled behind
// it. n must be at most t, and window at most 2^62.
func (c *Controller) pace(ctx context.Context, ec *entry.Context, clk core.Clock, s *shard, r *ref, t int64, window uint64, floor int64) *core.BlockError {
	now, n := ec.Start, ec.Batch
	s.mu.Lock()
	e := s.get(r, 0, math.MinInt64/2)
	last, part := e.last, e.part
	if part >= uint64(t) {
		// Carried in the units of a former threshold (a reload changed it):
		// less than a nanosecond either way, rounded up to one.
		last, part = last+1, 0
	}
	begin := last
	if part > 0 {
		begin++
	}
	if begin <= floor {
		begin, last, part = floor, floor, 0
	}
	wait := begin - now
	if wait > c.maxQueue {
		s.mu.Unlock()
		if c.wantBudget(ec) {
			c.paceBudget(ec, false, wait, t, window)
		}
		return c.blocked(ec, float64(wait)/1e6, float64(c.maxQueue)/1e6, wait-c.maxQueue, "wait exceeds max queueing")
	}
	// n slots: window×n/t ns. With n <= t the quotient is at most window,
	// so hi < t and Div64 cannot overflow.
	hi, lo := bits.Mul64(window, uint64(n))
	var carry uint64
	lo, carry = bits.Add64(lo, part, 0)
	hi += carry
	q, rem := bits.Div64(hi, lo, uint64(t))
	prevLast, prevPart := e.last, e.part
	endLast, endPart := last+int64(q), rem
	e.last, e.part = endLast, endPart
	s.mu.Unlock()
	if c.wantBudget(ec) {
		busy := endLast - now
		if endPart > 0 {
			busy++
		}
		c.paceBudget(ec, true, busy, t, window)
	}
	if wait > 0 {
		if ctx == nil {
			ctx = context.Background()
		}
		if err := c.sleep(ctx, ec, clk, time.Duration(wait)); err != nil {
			s.mu.Lock()
			if e := s.resolve(e); e != nil && e.last == endLast && e.part == endPart {
				e.last, e.part = prevLast, prevPart
			}
			s.mu.Unlock()
			be := c.blocked(ec, float64(wait)/1e6, float64(c.maxQueue)/1e6, 0, "wait cancelled: "+err.Error())
			be.Cause = err // errors.Is(be, context.DeadlineExceeded), as the flow rules' waits
			return be
		}
	}
	return nil
}

func (c *Controller) blocked(ec *entry.Context, observed, threshold float64, retry int64, reason string) *core.BlockError {
	return &core.BlockError{
		Type:       core.BlockParam,
		Resource:   ec.Resource,
		Rule:       core.RuleRef{ID: c.rule.ID, Metric: string(cmp.Or(c.rule.Metric, rules.QPS))},
		Observed:   observed,
		Threshold:  threshold,
		RetryAfter: time.Duration(retry),
		Reason:     reason,
		Shadow:     c.rule.Shadow,
	}
}

// sleep waits d for ec's turn as ec.Sleep does, except for a rule in shadow
// mode, which never makes a request wait (see flow's base.sleep).
func (c *Controller) sleep(ctx context.Context, ec *entry.Context, clk core.Clock, d time.Duration) error {
	if c.rule.Shadow {
		return nil
	}
	return ec.Sleep(ctx, clk, d)
}

// stateKey identifies the per-value state a controller can hand to its
// successor when rules are reloaded: same resource, same argument, same
// kind of counting, same window and capacity. Threshold, Burst, Exceptions,
// MaxQueueing and ID may differ: the successor applies its own to the values
// already tracked.
type stateKey struct {
	resource, key string
	index         int
	mode          mode
	window        uint64
	capacity      int
	cluster       bool
	quota         string // the quota's calendar, "" for none
}

func (c *Controller) stateKey() stateKey {
	return stateKey{resource: c.rule.Resource, key: c.rule.Key, index: c.rule.Index, mode: c.mode,
		window: c.window, capacity: cmp.Or(c.rule.Capacity, ruledef.ParamCapacity), cluster: c.rule.Cluster != nil, quota: quotaSpec(&c.rule)}
}

// Build validates every rule first and, only if all are valid, returns the
// controllers grouped by resource, in rule order. A rule that counts the
// same way as a controller in old (same resource, argument, metric,
// behavior, duration and capacity, both local or both cluster rules) takes
// over that controller's per-value state (buckets, schedules, in-flight
// counts), so an equivalent reload — including one that only changes
// thresholds, burst or exceptions — neither forgets a value nor hands out a
// fresh burst. Each old controller is inherited at most once.
//
// A cluster rule (rules.Param.Cluster set) asks rm's Manager; a leasing one
// also takes over its predecessor's per-value Limiters (each is replaced
// when the terms of its value's budget change). When Build succeeds, the
// Limiters of old leasing rules that no rule inherited are closed (their
// unused permits go back to the store): old must then go out of force, as
// it does right after a successful build. A nil rm refuses cluster rules.
//
// The error names the offending rule's index, resource and field (an
// *rules.Error).
func Build(rs []rules.Param, old map[string][]*Controller, rm *Remote) (map[string][]*Controller, error) {
	return build(rs, old, rm, false)
}

// BuildCallers is Build for the param rules that count per caller what a
// per-caller flow rule counts (rules.Flow.Caller): a QPS rule with the
// reject behavior counts each caller in a sliding window of its Duration
// made of two buckets (modeWindow, see window.go), as Sentinel counts an
// origin in its origin node, instead of a token bucket; a cluster one asks
// the store for a sliding-window budget per caller. Throttle and
// concurrency rules are Build's.
func BuildCallers(rs []rules.Param, old map[string][]*Controller, rm *Remote) (map[string][]*Controller, error) {
	return build(rs, old, rm, true)
}

// complexity: validates each rule, builds its controller and carries state over from the old one
func build(rs []rules.Param, old map[string][]*Controller, rm *Remote, callers bool) (map[string][]*Controller, error) {
	for i := range rs {
		if err := (&rules.Set{Param: rs[i : i+1]}).Validate(); err != nil {
			err.(*rules.Error).Index = i
			return nil, err
		}
		if rs[i].Cluster != nil && rm == nil {
			return nil, &rules.Error{Kind: "param", Index: i, Resource: rs[i].Resource, Field: "Cluster", Reason: errNoCluster}
		}
		if rs[i].Cluster != nil && rs[i].Metric == rules.Concurrency && rm.slots == nil {
			return nil, &rules.Error{Kind: "param", Index: i, Resource: rs[i].Resource, Field: "Cluster", Reason: errNoSlots}
		}
	}
	pool := make(map[stateKey][]*Controller)
	for _, cs := range old {
		for _, c := range cs {
			k := c.stateKey()
			pool[k] = append(pool[k], c)
		}
	}
	kept := make(map[*leaseCache]bool)
	out := make(map[string][]*Controller, len(rs))
	for i := range rs {
		c := newController(rs[i])
		if callers && c.mode == modeReject && rs[i].Quota == nil {
			c.mode = modeWindow
		}
		if rs[i].Quota != nil {
			c.q = newQuotaCtl(&c.rule, rm)
		} else if rs[i].Cluster != nil {
			c.cl = newClusterCtl(&c.rule, rm, c.mode)
		}
		k := c.stateKey()
		if prev := pool[k]; len(prev) > 0 {
			c.cache = prev[0].cache
			if c.q != nil && prev[0].q != nil {
				c.q.table = prev[0].q.table
			}
			if c.cl != nil && c.cl.leases != nil && prev[0].cl.leases != nil {
				c.cl.leases = prev[0].cl.leases
				kept[c.cl.leases] = true
			}
			if c.cl != nil && c.cl.owed != nil && prev[0].cl.owed != nil {
				c.cl.owed = prev[0].cl.owed // what the shares admitted stays owed
			}
			pool[k] = prev[1:]
		} else {
			c.cache = newCache(cmp.Or(rs[i].Capacity, ruledef.ParamCapacity), c.mode)
			for j := range c.cache.shards {
				c.cache.shards[j].window = int64(c.window)
			}
		}
		out[c.rule.Resource] = append(out[c.rule.Resource], c)
	}
	for _, cs := range old {
		for _, c := range cs {
			if c.cl != nil && c.cl.leases != nil && !kept[c.cl.leases] {
				c.cl.close()
			}
		}
	}
	return out, nil
}
