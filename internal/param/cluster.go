package param

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/lease"
	"github.com/sluice-go/sluice/internal/ruledef"
	"github.com/sluice-go/sluice/rules"
)

// Remote is what Build needs to enforce cluster param rules
// (rules.Param.Cluster): the engine's lease.Manager and the application
// name that scopes budget keys. A nil *Remote refuses cluster rules.
type Remote struct {
	mgr   *lease.Manager
	app   string
	slots *lease.SlotPool // fleet-wide concurrency; nil when the store keeps none
}

// NewRemote returns the Remote of m for application app, which prefixes
// every budget key.
func NewRemote(m *lease.Manager, app string) *Remote { return &Remote{mgr: m, app: app} }

// errNoCluster is the refusal of a cluster rule by an engine without a
// cluster store.
const errNoCluster = "cluster rules need sluice.WithCluster (the engine has no cluster store)"

// clusterCtl is the cluster side of a controller whose rule has a cluster
// section. Each value has its own budget in the store, named by the rule's
// prefix and a digest of the value (digestLen bytes of SHA-256, in hex), so
// the key is bounded whatever the value and the same on every instance.
//
// A strict rule (the default) keeps nothing per value here: every entry is
// one all-or-nothing request (lease.Manager.Ask). A leasing rule keeps a
// lease.Limiter per value in leases, at most the rule's Capacity of them.
// Either way the local fallback's per-value state is the controller's
// cache, as for a local rule.
type clusterCtl struct {
	mgr         *lease.Manager
	prefix      string // <app>/param/<resource>/<argument>/<behavior>/<ms>ms/
	alg         cluster.Algorithm
	interval    time.Duration
	perInstance bool
	fallback    rules.ClusterFallback
	localT      int64           // LocalThreshold
	slots       *lease.SlotPool // a concurrency rule's; nil otherwise
	leases      *leaseCache
	// fell is the clock reading of this rule's first decision by the
	// fallback since its last decision by the store (0: none): a local
	// share's credit beyond the share itself accrues only from then.
	fell atomic.Int64
	// books: the rule keeps the books of each value's local share (a
	// strict rule whose fallback is local): the store's grants to this
	// instance are charged to the share, its refusals empty it.
	books bool
	// owed is what the local share admitted that the store has not been
	// charged for yet, per value (a strict token-bucket or sliding-window
	// rule whose fallback is local; nil otherwise).
	owed *owed
}

// digestLen is how many bytes of the value's SHA-256 name its budget: 128
// bits. A deterministic digest is needed (every instance must name the same
// budget), and a cryptographic one, since anyone can compute it: with a
// fast hash a client could craft two values that share a budget.
const digestLen = 16

type digest [digestLen]byte

func digestOf(key string) digest {
	sum := sha256.Sum256([]byte(key))
	return digest(sum[:digestLen])
}

// newClusterCtl returns the cluster side of rule r counted in mode m: a
// per-caller rule's (modeWindow) budget per caller is a sliding window,
// under a key of its own ("window" where a token bucket's says "reject").
func newClusterCtl(r *rules.Param, rm *Remote, m mode) *clusterCtl {
	arg := "i" + strconv.Itoa(r.Index)
	if r.Key != "" {
		arg = "k" + r.Key
	}
	behavior := behaviorKey(r)
	if m == modeWindow {
		behavior = "window"
	}
	cc := &clusterCtl{
		mgr: rm.mgr,
		prefix: rm.app + "/param/" + r.Resource + "/" + arg + "/" + behavior + "/" +
			strconv.FormatInt(cmp.Or(r.Duration, ruledef.ParamDuration).Milliseconds(), 10) + "ms/",
		alg:         cluster.TokenBucket,
		interval:    cmp.Or(r.Duration, ruledef.ParamDuration),
		perInstance: r.Cluster.Mode == rules.ClusterPerInstance,
		fallback:    r.Cluster.Fallback,
		localT:      int64(r.Cluster.LocalThreshold),
	}
	if r.Metric == rules.Concurrency { // in-flight slots per value (clusterconc.go)
		cc.prefix, cc.slots = slotsPrefix(rm.app, r), rm.slots
		return cc
	}
	if r.Throttle != nil {
		cc.alg = cluster.Pacing
	} else if m == modeWindow {
		cc.alg = cluster.SlidingWindow
	}
	if r.Cluster.Leases {
		cc.leases = newLeaseCache(cmp.Or(r.Capacity, ruledef.ParamCapacity))
	} else if cmp.Or(cc.fallback, rules.FallbackLocal) == rules.FallbackLocal {
		cc.books = true
		if cc.alg != cluster.Pacing {
			cc.owed = &owed{m: make(map[digest]int64), cap: cmp.Or(r.Capacity, ruledef.ParamCapacity)}
		}
	}
	return cc
}

// terms are the numbers of a value's budget: its Limit, Burst (token
// bucket) and MaxQueue (pacing), for threshold t with live instances.
type terms struct {
	limit, burst float64
	maxQueue     time.Duration
}

func (c *Controller) termsOf(t int64, live int) terms {
	k := int64(1)
	if c.cl.perInstance {
		k = int64(max(live, 1))
	}
	switch c.cl.alg {
	case cluster.Pacing:
		return terms{limit: float64(t * k), maxQueue: time.Duration(c.maxQueue)}
	case cluster.SlidingWindow: // a per-caller rule: t per window of Duration
		return terms{limit: float64(t * k)}
	}
	// The bucket of a local rule: t per Duration, up to t+Burst stored.
	return terms{limit: float64(t * k), burst: float64((t + c.burst) * k)}
}

// most returns the most permits the budget holds at once: a token
// bucket's Burst, a sliding window's Limit (its burst is zero).
func (tm terms) most() int64 {
	if tm.burst == 0 {
		return int64(tm.limit)
	}
	return int64(tm.burst)
}

func (cc *clusterCtl) budget(d *digest, tm terms) cluster.Budget {
	return cluster.Budget{
		Key: cc.prefix + hex.EncodeToString(d[:]), Algorithm: cc.alg, Limit: tm.limit,
		Interval: cc.interval, Burst: tm.burst, MaxQueue: tm.maxQueue,
	}
}

// checkCluster decides the entry for value key, whose threshold is t, by
// the store: the value's budget, or the rule's fallback while the store
// fails or is late. An admission is a permit of the store's, spent even if
// a later check refuses the entry.
//
// A strict rule with a local fallback keeps the books of each value's
// local share (docs/design/cluster.md, "Fallback"): every permit the store
// grants this instance is charged to the share too, and, with the reject
// behavior, what the share admits is owed to the store, charged at the
// value's next remote decision.
//
// complexity: the store's answer by kind (fallback, cancelled, refused, admitted, a wait), each keeping the share's books
func (c *Controller) checkCluster(ctx context.Context, ec *entry.Context, key string, t int64, clk core.Clock) *core.BlockError {
	cc := c.cl
	if ctx == nil || ctx == context.Background() { // an entry without a context: the engine's life bounds the call
		ctx = ec.Life
		if ctx == nil {
			ctx = context.Background()
		}
	}
	live := cc.mgr.Live()
	tm := c.termsOf(t, live)
	d := digestOf(key)
	var r lease.Result
	if cc.leases == nil {
		// What the share admitted, charged in the same Take ahead of this
		// entry's request: partial, so the store is left with what it
		// held beyond this instance's local admissions, if anything.
		var owe int64
		if cc.owed != nil && cc.mgr.Mode() == lease.Remote {
			owe = min(cc.owed.take(&d), tm.most())
		}
		a := cc.mgr.ChargeAndAsk(ctx, cc.budget(&d, tm), ec.Start, ec.Batch, owe)
		if owe > 0 && a.By == lease.ByFallback {
			cc.owed.add(&d, owe) // not charged (nor, maybe, decided)
		}
		r = a.Result
	} else {
		r = cc.leases.acquire(ctx, cc, &d, tm, ec.Start, ec.Batch)
	}
	if r.By == lease.ByStore && cc.fell.Load() != 0 {
		cc.fell.Store(0)
	}
	switch {
	case r.By == lease.ByFallback:
		// The local share divides by the count the engine keeps for it:
		// the fleet's size as configured until it has been counted. A late
		// call (the engine still remote) is decided by the share as it
		// stands; in fallback the share's credit accrues from the rule's
		// first fallback decision on. What it admits is owed to the store.
		n, _ := cc.mgr.Share()
		since := ec.Start
		if cc.mgr.Mode() == lease.Fallback {
			cc.fell.CompareAndSwap(0, max(ec.Start, 1))
			since = cc.fell.Load()
		}
		be := c.checkFallback(ctx, ec, key, t, n, since, clk)
		if be == nil && cc.owed != nil {
			cc.owed.add(&d, ec.Batch)
		}
		return be
	case r.By == lease.ByContext:
		be := c.clusterBlocked(ec, t, 0, "cancelled while waiting for the cluster store")
		be.Cause = ctx.Err()
		return be
	case !r.Admitted:
		if cc.books {
			// The bucket ran short (the schedule ran ahead): so does the share.
			n, _ := cc.mgr.Share()
			c.chargeShare(key, c.share(key, t, n), 0, ec.Start)
		}
		return c.clusterBlocked(ec, t, r.RetryAfter, "cluster budget exhausted")
	}
	if cc.books {
		n, _ := cc.mgr.Share()
		c.chargeShare(key, c.share(key, t, n), ec.Batch, ec.Start)
	}
	if r.Wait > 0 {
		if err := c.sleep(ctx, ec, clk, r.Wait); err != nil {
			be := c.clusterBlocked(ec, t, 0, "cluster wait of "+r.Wait.String()+" cancelled")
			be.Cause = err
			return be
		}
	}
	return nil
}

// checkFallback decides the entry by the rule's fallback: pass, block, or
// the value's local share (see share) with a local bucket or schedule in
// the cache. since is when the share's credit may start to exceed the
// share itself (see checkShare).
func (c *Controller) checkFallback(ctx context.Context, ec *entry.Context, key string, t int64, live int, since int64, clk core.Clock) *core.BlockError {
	cc := c.cl
	switch cc.fallback {
	case rules.FallbackPass:
		return nil
	case rules.FallbackBlock:
		return c.clusterBlocked(ec, t, 0, "cluster fallback: block")
	}
	sh := c.share(key, t, live)
	var be *core.BlockError
	if c.mode != modeThrottle { // a token bucket, a per-caller window's too
		be = c.checkShare(ec, key, sh, since)
	} else {
		be = c.paceShare(ctx, ec, key, sh, since, clk)
	}
	if be != nil {
		be.Type = core.BlockCluster
		if be.Reason == "" {
			be.Reason = "cluster fallback: local share exhausted"
		} else if !strings.HasPrefix(be.Reason, "cluster fallback: ") {
			be.Reason = "cluster fallback: " + be.Reason
		}
	}
	return be
}

// shareOf is a value's local share, in credits of 1/cost of a request:
// rate credits per Duration, at most rate+burst held (the share's own
// bucket, which it starts with), a request costing cost credits. The
// default share, the value's threshold t divided by the live instances n,
// is t credits per Duration at n credits a request: t/n requests per
// Duration, not rounded, so n instances together earn t per Duration,
// whatever t and n (a share of 1 per minute over ten instances is a tenth
// of a request a minute each, where rounding up gave each a whole one).
type shareOf struct{ rate, burst, cost int64 }

// share returns the local share of value key, whose threshold is t, with
// live instances: LocalThreshold per instance (for values not in
// Exceptions), else the value's threshold divided by the live instances,
// or the threshold itself for a per-instance rule; Burst in proportion.
func (c *Controller) share(key string, t int64, live int) shareOf {
	cc := c.cl
	switch {
	case cc.perInstance:
		return shareOf{t, c.burst, 1}
	case cc.localT > 0 && (c.exc == nil || !hasKey(c.exc, key)):
		return shareOf{cc.localT, c.burst * cc.localT / t, 1}
	}
	return shareOf{t, c.burst, int64(max(live, 1))}
}

// checkShare decides n requests of value key by its local share sh (a
// token-bucket rule): a bucket of credits in the value's cache slot, which
// the store's grants to this instance are charged to as well (chargeShare),
// so the share is what this instance has not used. A share below one
// request (rate+burst < cost) could never admit one: its credit may grow
// to one request, but only from since on (the rule's first decision in
// this fallback; a late call's since is now, so there the share holds
// only its own bucket). So the instances' shares admit together, from the
// start of a fallback, at most the budget's terms over its span: its
// bucket and the refills since, t + Burst + t × span / Duration, less what
// the store granted them in the bucket's time. The share is spent even if
// a later check refuses the entry, like the store's permits.
func (c *Controller) checkShare(ec *entry.Context, key string, sh shareOf, since int64) *core.BlockError {
	now, n := ec.Start, ec.Batch
	size := sh.rate + sh.burst
	top := max(size, sh.cost)
	need := n * sh.cost
	if need > top {
		return c.blocked(ec, float64(n), float64(top/sh.cost), 0, "cluster fallback: batch larger than the local share")
	}
	s, r := c.cache.locate(key)
	s.mu.Lock()
	e := s.get(&r, size, now)
	limit := top
	if since >= now {
		limit = size // a late call, or an entry that began before the fallback
	}
	if limit > size && e.last < since {
		refill(e, since, sh.rate, sh.burst, c.window)
	}
	refill(e, now, sh.rate, limit-sh.rate, c.window)
	if e.tokens >= need {
		e.tokens -= need
		s.mu.Unlock()
		return nil
	}
	have, part, last := e.tokens, e.part, e.last
	s.mu.Unlock()
	retry := satAdd(c.wait(need-have, part, sh.rate), last-now)
	return c.blocked(ec, float64(top-have)/float64(sh.cost), float64(top)/float64(sh.cost), retry, "")
}

// chargeShare charges n requests the store granted this instance at now to
// value key's local share sh, or, for n = 0 (the store refused the value),
// empties it: the store's bucket ran short, so the fleet has used it, and
// the share holds only what it earns from now on. The share may go into
// debt, at most its own size: an instance that served more of the value
// than its share holds nothing while the store fails, until the debt is
// refilled. A throttle rule's share is a schedule: see chargePace.
func (c *Controller) chargeShare(key string, sh shareOf, n, now int64) {
	if c.mode == modeThrottle {
		c.chargePace(key, sh, n, now)
		return
	}
	size := sh.rate + sh.burst
	s, r := c.cache.locate(key)
	s.mu.Lock()
	e := s.get(&r, size, now)
	refill(e, now, sh.rate, sh.burst, c.window)
	if n == 0 {
		e.tokens = min(e.tokens, 0)
	} else {
		e.tokens = max(e.tokens-n*sh.cost, -size)
	}
	s.mu.Unlock()
}

// paceShare decides the entry by value key's local share sh, a throttle
// rule's: a schedule in the value's cache slot whose slots are
// Duration × cost / rate long (Duration × N / t for the default share: t/N
// requests per Duration, not rounded, so n instances together pace t per
// Duration whatever t and n; rounded down to at least 1 as it was until
// 2026-12-02, ten instances sharing 1 per minute paced ten). An idle
// schedule admits at once only a share of at least one request per
// Duration: a smaller share holds rate/cost of a request, as a
// token-bucket share does, and its credit grows to one request only from
// since on (the rule's first decision in this fallback; a late call's
// since is now, so there it holds only that fraction). Its first slot is
// then since + Duration × (cost - rate) / rate at the earliest. A batch
// larger than the share rounded down (at least 1) is refused.
func (c *Controller) paceShare(ctx context.Context, ec *entry.Context, key string, sh shareOf, since int64, clk core.Clock) *core.BlockError {
	now, n := ec.Start, ec.Batch
	if top := max(sh.rate/sh.cost, 1); n > top {
		return c.blocked(ec, float64(n), float64(top), 0, "cluster fallback: batch larger than the local share")
	}
	w := c.shareWindow(sh)
	floor := now
	if sh.cost > sh.rate {
		lead := int64((w+uint64(sh.rate)-1)/uint64(sh.rate) - c.window) // one slot less a Duration
		floor = max(now, min(since, now)+lead)
	}
	s, r := c.cache.locate(key)
	return c.pace(ctx, ec, clk, s, &r, sh.rate, w, floor)
}

// shareWindow is the numerator of a throttle share's slot, Duration × cost
// ns (a slot is that over rate), at most 2^62 (292 years × cost/rate).
func (c *Controller) shareWindow(sh shareOf) uint64 {
	hi, lo := bits.Mul64(c.window, uint64(sh.cost))
	if hi != 0 || lo > 1<<62 {
		return 1 << 62
	}
	return lo
}

// chargePace charges n requests the store granted this instance at now to
// value key's throttle share sh: n slots of the share's schedule, from its
// end or from now if it is idle; or, for n = 0 (the store refused the
// value: its schedule is beyond MaxQueueing), empties it: its next slot is
// a slot away. The schedule runs at most a slot and a Duration ahead of
// now (the debt of a token-bucket share, its size).
func (c *Controller) chargePace(key string, sh shareOf, n, now int64) {
	w := c.shareWindow(sh)
	slot := int64((w + uint64(sh.rate) - 1) / uint64(sh.rate))
	s, r := c.cache.locate(key)
	s.mu.Lock()
	e := s.get(&r, 0, math.MinInt64/2)
	end := e.last
	if e.part > 0 {
		end++ // rounded up to the next whole nanosecond
	}
	end = max(end, now)
	if n == 0 {
		end = max(end, satAdd(now, slot))
	} else {
		end = satAdd(end, satMul(n, slot))
	}
	e.last, e.part = min(end, satAdd(satAdd(now, slot), int64(c.window))), 0
	s.mu.Unlock()
}

// satMul returns a×b for non-negative a and b, or math.MaxInt64 when that
// overflows.
func satMul(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// owed holds, per value, the requests a strict rule's local share admitted
// (while the store failed, or after a late call) that the store has not
// been charged for. The value's next remote decision charges them to the
// store first, in the same Take (lease.Manager.ChargeAndAsk), partial, at
// most the bucket (a per-caller rule's sliding window: at most its Limit,
// counted in the window at the charge, later than they passed): so a
// store that kept its buckets, refilled on its clock while the shares
// admitted, is left with what it holds beyond the fleet's local
// admissions, as if it had decided them (each instance charges its own,
// and the shares were charged with the store's grants). A late request
// may have been charged by the store too: permits lost, never one too
// many. At most cap values owe; beyond that, the admissions of a new value
// go uncharged.
type owed struct {
	n   atomic.Int64 // len(m)
	mu  sync.Mutex
	m   map[digest]int64
	cap int
}

func (o *owed) add(d *digest, k int64) {
	o.mu.Lock()
	if v, ok := o.m[*d]; ok || len(o.m) < o.cap {
		if !ok {
			o.n.Add(1)
		}
		o.m[*d] = min(v+k, maxOwed)
	}
	o.mu.Unlock()
}

// maxOwed bounds a value's debt, far beyond any bucket's refills.
const maxOwed = 1 << 40

// take returns what value d owes and forgets it.
func (o *owed) take(d *digest) int64 {
	if o.n.Load() == 0 {
		return 0
	}
	o.mu.Lock()
	k, ok := o.m[*d]
	if ok {
		delete(o.m, *d)
		o.n.Add(-1)
	}
	o.mu.Unlock()
	return k
}

func hasKey(m map[string]int64, k string) bool { _, ok := m[k]; return ok }

func (c *Controller) clusterBlocked(ec *entry.Context, t int64, retry time.Duration, reason string) *core.BlockError {
	be := c.blocked(ec, 0, float64(t), int64(retry), reason)
	be.Type = core.BlockCluster
	return be
}

// close gives back what the rule's budgets hold: the unused permits of
// every value's leases.
func (cc *clusterCtl) close() {
	if cc != nil && cc.leases != nil {
		cc.leases.drain()
	}
}

// leaseCache holds the lease.Limiter of each value of a leasing cluster
// rule, at most cap of them, keyed by the value's digest. When it is full a
// new value takes the place of one not used since the clock hand last
// passed it (CLOCK), whose Limiter is closed: its unused permits go back to
// the store. A value's Limiter is replaced, the old one closed, when the
// terms of its budget change (a reload that changes Threshold, Burst,
// Exceptions or MaxQueueing, or the live count of a per-instance rule).
type leaseCache struct {
	mu   sync.Mutex
	m    map[digest]*leaseEntry
	ring []*leaseEntry
	hand int
	cap  int
}

type leaseEntry struct {
	d    digest
	lim  *lease.Limiter
	tm   terms
	used atomic.Bool
}

// maxLeaseLifetime caps the lifetime of a value's leases: with the flow
// rules' Interval/10, a per-day budget's lease would keep its permits from
// the other instances for 2.4 hours.
const maxLeaseLifetime = time.Second

func leaseLifetime(interval time.Duration) time.Duration {
	return max(min(interval/10, maxLeaseLifetime), time.Millisecond)
}

func newLeaseCache(capacity int) *leaseCache {
	return &leaseCache{m: make(map[digest]*leaseEntry), cap: max(capacity, 1)}
}

// acquire decides n permits of the value whose digest is d, with terms tm,
// from its Limiter.
func (lc *leaseCache) acquire(ctx context.Context, cc *clusterCtl, d *digest, tm terms, now, n int64) lease.Result {
	for try := 0; ; try++ {
		lim, stale := lc.limiter(cc, d, tm)
		for _, l := range stale {
			l.Close()
		}
		if lim == nil { // the Manager is closed
			return lease.Result{By: lease.ByFallback}
		}
		r := lim.Acquire(ctx, now, n)
		// A Limiter closed since we got it (its value was evicted, or the
		// rule reloaded) decides by its fallback, which here is pass:
		// never take that for the store's failure. Ask again; when values
		// churn so fast that the value's Limiter keeps being evicted,
		// the store decides this entry alone, as for a strict rule.
		if r.By == lease.ByFallback && lim.Closed() && cc.mgr.Mode() == lease.Remote {
			if try < 2 {
				continue
			}
			return cc.mgr.Ask(ctx, cc.budget(d, tm), now, n).Result
		}
		return r
	}
}

// limiter returns the Limiter of d for terms tm, making one (and evicting
// another value) if needed, and the Limiters the caller must close once
// the cache's lock is released.
func (lc *leaseCache) limiter(cc *clusterCtl, d *digest, tm terms) (*lease.Limiter, []*lease.Limiter) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	e := lc.m[*d]
	if e != nil && e.tm == tm && !e.lim.Closed() {
		e.used.Store(true)
		return e.lim, nil
	}
	var stale []*lease.Limiter
	lim, err := cc.mgr.NewLimiter(lease.Spec{Budget: cc.budget(d, tm), Fallback: lease.FallbackPass, Lifetime: leaseLifetime(cc.interval)})
	if err != nil {
		return nil, nil
	}
	if e != nil {
		stale = append(stale, e.lim)
		e.lim, e.tm = lim, tm
		e.used.Store(true)
		return lim, stale
	}
	e = &leaseEntry{d: *d, lim: lim, tm: tm}
	if len(lc.ring) < lc.cap {
		lc.ring = append(lc.ring, e)
	} else {
		for {
			old := lc.ring[lc.hand]
			if old.used.Swap(false) {
				lc.hand = (lc.hand + 1) % len(lc.ring)
				continue
			}
			delete(lc.m, old.d)
			stale = append(stale, old.lim)
			lc.ring[lc.hand] = e
			lc.hand = (lc.hand + 1) % len(lc.ring)
			break
		}
	}
	lc.m[*d] = e
	return lim, stale
}

// len returns the number of values holding a Limiter.
func (lc *leaseCache) len() int {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return len(lc.m)
}

// drain closes every Limiter (their unused permits go back) and forgets
// them.
func (lc *leaseCache) drain() {
	lc.mu.Lock()
	ring := lc.ring
	lc.ring, lc.hand = nil, 0
	clear(lc.m)
	lc.mu.Unlock()
	for _, e := range ring {
		e.lim.Close()
	}
}
