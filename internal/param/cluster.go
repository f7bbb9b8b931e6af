package param

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/lease"
	"github.com/sluice-go/sluice/internal/ruledef"
	"github.com/sluice-go/sluice/rules"
)

// Remote is what Build needs to enforce cluster param rules
// (rules.Param.Cluster): the engine's lease.Manager and the application
// name that scopes budget keys. A nil *Remote refuses cluster rules.
type Remote struct {
	mgr *lease.Manager
	app string
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
	localT      int64 // LocalThreshold
	leases      *leaseCache
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

func newClusterCtl(r *rules.Param, rm *Remote) *clusterCtl {
	arg := "i" + strconv.Itoa(r.Index)
	if r.Key != "" {
		arg = "k" + r.Key
	}
	cc := &clusterCtl{
		mgr: rm.mgr,
		prefix: rm.app + "/param/" + r.Resource + "/" + arg + "/" + string(cmp.Or(r.Behavior, rules.Reject)) + "/" +
			strconv.FormatInt(cmp.Or(r.Duration, ruledef.ParamDuration).Milliseconds(), 10) + "ms/",
		alg:         cluster.TokenBucket,
		interval:    cmp.Or(r.Duration, ruledef.ParamDuration),
		perInstance: r.Cluster.Mode == rules.ClusterPerInstance,
		fallback:    r.Cluster.Fallback,
		localT:      int64(r.Cluster.LocalThreshold),
	}
	if r.Behavior == rules.Throttle {
		cc.alg = cluster.Pacing
	}
	if r.Cluster.Leases {
		cc.leases = newLeaseCache(cmp.Or(r.Capacity, ruledef.ParamCapacity))
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
	if c.cl.alg == cluster.Pacing {
		return terms{limit: float64(t * k), maxQueue: time.Duration(c.maxQueue)}
	}
	// The bucket of a local rule: t per Duration, up to t+Burst stored.
	return terms{limit: float64(t * k), burst: float64((t + c.burst) * k)}
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
		r = cc.mgr.Ask(ctx, cc.budget(&d, tm), ec.Start, ec.Batch).Result
	} else {
		r = cc.leases.acquire(ctx, cc, &d, tm, ec.Start, ec.Batch)
	}
	switch {
	case r.By == lease.ByFallback:
		// The local share divides by the count the engine keeps for it:
		// the fleet's size as configured until it has been counted.
		n, _ := cc.mgr.Share()
		return c.checkFallback(ctx, ec, key, t, n, clk)
	case r.By == lease.ByContext:
		be := c.clusterBlocked(ec, t, 0, "cancelled while waiting for the cluster store")
		be.Cause = ctx.Err()
		return be
	case !r.Admitted:
		return c.clusterBlocked(ec, t, r.RetryAfter, "cluster budget exhausted")
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
// the value's local share with a local bucket or schedule in the cache.
// The share is LocalThreshold (for values not in Exceptions), else the
// value's threshold divided by the live instances (whole requests, at
// least 1), or the threshold itself for a per-instance rule; Burst is
// shared in proportion.
func (c *Controller) checkFallback(ctx context.Context, ec *entry.Context, key string, t int64, live int, clk core.Clock) *core.BlockError {
	cc := c.cl
	switch cc.fallback {
	case rules.FallbackPass:
		return nil
	case rules.FallbackBlock:
		return c.clusterBlocked(ec, t, 0, "cluster fallback: block")
	}
	share, burst := c.share(key, t, live)
	if ec.Batch > share+burst {
		return c.clusterBlocked(ec, t, 0, "cluster fallback: batch larger than the local share")
	}
	be := c.checkLocal(ctx, ec, key, share, burst, clk)
	if be != nil {
		be.Type = core.BlockCluster
		if be.Reason == "" {
			be.Reason = "cluster fallback: local share exhausted"
		} else {
			be.Reason = "cluster fallback: " + be.Reason
		}
	}
	return be
}

// share returns the local share of value key, whose threshold is t, and
// its burst.
func (c *Controller) share(key string, t int64, live int) (share, burst int64) {
	cc := c.cl
	switch {
	case cc.perInstance:
		return t, c.burst
	case cc.localT > 0 && (c.exc == nil || !hasKey(c.exc, key)):
		share = cc.localT
	default:
		share = max(t/int64(max(live, 1)), 1)
	}
	if c.burst > 0 {
		burst = c.burst * share / t
	}
	return share, burst
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
