package flow

import (
	"cmp"
	"context"
	"strconv"
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

// Leases is what Build needs to enforce cluster rules (rules.Flow.Cluster):
// the engine's lease.Manager and the application name that scopes budget
// keys. A nil *Leases refuses cluster rules. Build it with NewLeases.
type Leases struct {
	mgr   *lease.Manager
	app   string
	slots *lease.SlotPool // fleet-wide concurrency; nil when the store keeps none

	// mu guards perInstance and orders SetLive's rebuilds with the
	// Limiters' Close.
	mu          sync.Mutex
	live        int
	perInstance map[*limiterRef]*rules.Flow
}

// NewLeases returns the Leases of m for application app, which prefixes
// every budget key, so applications sharing one store (and one key
// prefix) never share a budget by accident.
func NewLeases(m *lease.Manager, app string) *Leases {
	return &Leases{mgr: m, app: app, live: m.Live(), perInstance: make(map[*limiterRef]*rules.Flow)}
}

// SetLive sets the live instance count on the Manager and, when it
// changed, gives every per-instance rule (rules.ClusterPerInstance) a new
// Limiter for its new budget, Threshold times n; the old one's unused
// permits go back. A Heartbeat calls it after every beat.
func (l *Leases) SetLive(n int) {
	n = max(n, 1)
	l.mu.Lock()
	if n != l.live {
		l.live = n
		for ref, r := range l.perInstance {
			lim, err := l.mgr.NewLimiter(clusterSpec(l.app, r, n))
			if err != nil { // the Manager closed: the engine is closing
				continue
			}
			ref.p.Swap(lim).Close()
		}
	}
	l.mu.Unlock()
	// After the rebuilds: who reads the Manager's count sees them done.
	l.mgr.SetLive(n)
}

// newLimiter returns a limiterRef holding a new Limiter for cluster rule r.
func (l *Leases) newLimiter(r *rules.Flow) (*limiterRef, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, err := l.mgr.NewLimiter(clusterSpec(l.app, r, l.live))
	if err != nil {
		return nil, err
	}
	ref := &limiterRef{l: l}
	ref.p.Store(lim)
	if r.Cluster.Mode == rules.ClusterPerInstance {
		l.perInstance[ref] = r
	}
	return ref, nil
}

// limiterRef holds a cluster rule's Limiter, which SetLive replaces for
// per-instance rules. Controllers that inherit the rule share it.
type limiterRef struct {
	p atomic.Pointer[lease.Limiter]
	l *Leases
}

// close closes the Limiter (its unused permits go back) and forgets it.
func (ref *limiterRef) close() {
	ref.l.mu.Lock()
	defer ref.l.mu.Unlock()
	delete(ref.l.perInstance, ref)
	ref.p.Load().Close()
}

// errNoCluster is the refusal of a cluster rule by an engine without a
// cluster store.
const errNoCluster = "cluster rules need sluice.WithCluster (the engine has no cluster store)"

// clusterTerms is what identifies a cluster rule's budget beyond its
// stateKey: a rule whose terms change gets a new Limiter (the old one gives
// its unused permits back).
type clusterTerms struct {
	on        bool
	threshold float64
	maxQueue  time.Duration
	section   clusterSection
}

// clusterSection is a cluster section's terms that decide the budget, with
// its defaults: comparable, so a stateKey can hold it. Cluster.Apps is not
// among them: it is checked by the engine before any rule counts, so a
// reload changing it keeps the budget and its counts.
type clusterSection struct {
	mode           rules.ClusterMode
	fallback       rules.ClusterFallback
	localThreshold float64
	strict, leases bool
}

func termsOf(r *rules.Flow) clusterTerms {
	if r.Cluster == nil {
		return clusterTerms{}
	}
	cl := r.Cluster
	sec := clusterSection{mode: cmp.Or(cl.Mode, rules.ClusterTotal), fallback: cmp.Or(cl.Fallback, rules.FallbackLocal),
		localThreshold: cl.LocalThreshold, strict: cl.Strict, leases: cl.Leases}
	return clusterTerms{on: true, threshold: r.Threshold, maxQueue: maxQueueing(r), section: sec}
}

// budgetKey is the store key of rule r's budget in application app: the
// fields that make a rule unique in a valid list (rules.Set.Validate),
// so every instance running the rule names the same budget, and an
// unchanged rule keeps its key across reloads whatever its position.
func budgetKey(app string, r *rules.Flow) string {
	return app + "/flow/" + r.Resource + "/" + kindOf(r) + "/" + strconv.FormatInt(cmp.Or(r.StatInterval, ruledef.StatInterval).Milliseconds(), 10) + "ms"
}

// clusterSpec is the lease.Spec of cluster rule r with live instances:
// the budget is Threshold, or Threshold × live for a per-instance rule.
func clusterSpec(app string, r *rules.Flow, live int) lease.Spec {
	limit := r.Threshold
	if r.Cluster.Mode == rules.ClusterPerInstance {
		limit *= float64(max(live, 1))
	}
	b := cluster.Budget{Key: budgetKey(app, r), Algorithm: cluster.SlidingWindow, Limit: limit, Interval: cmp.Or(r.StatInterval, ruledef.StatInterval)}
	switch {
	case r.Bucket != nil:
		// The same bucket as a local token-bucket rule: Threshold per
		// StatInterval, up to Burst stored (zero: Threshold).
		b.Algorithm = cluster.TokenBucket
		b.Burst = burst(r)
		if r.Cluster.Mode == rules.ClusterPerInstance && b.Burst != 0 {
			b.Burst *= float64(max(live, 1))
		}
	case r.Throttle != nil:
		b.Algorithm = cluster.Pacing
		b.MaxQueue = maxQueueing(r)
	}
	return lease.Spec{
		Budget:     b,
		Strict:     r.Cluster.Strict,
		Fallback:   fallbackPolicy[r.Cluster.Fallback],
		LocalLimit: r.Cluster.LocalThreshold,
	}
}

// fallbackPolicy maps a rule's fallback to the lease manager's ("" and
// FallbackLocal to its zero value).
var fallbackPolicy = map[rules.ClusterFallback]lease.FallbackPolicy{
	rules.FallbackPass: lease.FallbackPass, rules.FallbackBlock: lease.FallbackBlock,
}

// clusterRule enforces a flow rule whose budget the cluster store shares:
// a sliding window of Threshold per StatInterval (reject behavior) or a
// schedule of one request every StatInterval/Threshold (throttle), through
// a lease.Limiter. Admissions are permits of the store's; a permit is spent
// once admitted, even when a later check refuses the entry (a lease cannot
// take single permits back), so it reserves nothing to release.
type clusterRule struct {
	lim   *limiterRef // set by Build: inherited, or new
	pace  bool
	limit float64
	base
}

func newClusterRule(b base) *clusterRule {
	return &clusterRule{pace: b.rule.Throttle != nil, limit: b.rule.Threshold, base: b}
}

func (c *clusterRule) check(ctx context.Context, ec *entry.Context, clk core.Clock) *core.BlockError {
	var be *core.BlockError
	if c.pace {
		be = c.tooLargeToPace(ec, c.limit)
	} else {
		be = c.tooLarge(ec, c.limit)
	}
	if be != nil {
		be.Type = core.BlockCluster
		return be
	}
	if ctx == nil || ctx == context.Background() { // an entry without a context: the engine's life bounds the call
		ctx = ec.Life
		if ctx == nil {
			ctx = context.Background()
		}
	}
	lim := c.lim.p.Load()
	r := lim.Acquire(ctx, ec.Start, ec.Batch)
	if ec.WantBudget {
		c.clusterBudget(ec, r, lim)
	}
	if !r.Admitted {
		return c.clusterRefusal(ec, r, ctx)
	}
	if r.Wait > 0 {
		if err := c.sleep(ctx, ec, clk, r.Wait); err != nil {
			be := c.clusterRefusal(ec, lease.Result{By: lease.ByContext}, ctx)
			be.Reason = "cluster wait of " + r.Wait.String() + " cancelled"
			be.Cause = err
			return be
		}
	}
	return nil
}

// clusterRefusal explains refusal r of ec: a block error of type
// core.BlockCluster with the rule's Threshold, Observed zero (the fleet's
// count is the store's, unknown here) and the RetryAfter of r.
func (c *clusterRule) clusterRefusal(ec *entry.Context, r lease.Result, ctx context.Context) *core.BlockError {
	be := c.refuse(ec, 0, c.limit, r.RetryAfter, "cluster budget exhausted")
	be.Type = core.BlockCluster
	switch r.By {
	case lease.ByFallback:
		if c.rule.Cluster.Fallback == rules.FallbackBlock {
			be.Reason = "cluster fallback: block"
		} else {
			be.Reason = "cluster fallback: local share exhausted"
		}
	case lease.ByContext:
		be.Reason = "cancelled while waiting for the cluster store"
		be.Cause = ctx.Err()
	}
	return be
}

// Release gives nothing back: see clusterRule.
func (c *clusterRule) Release(entry.ExitInfo) {}

func (c *clusterRule) inherit(old checker) { c.lim = old.(*clusterRule).lim }

// close gives the rule's unused permits back to the store.
func (c *clusterRule) close() {
	if c.lim != nil {
		c.lim.close()
	}
}

// clusterBudget notes (r admitted the entry) or records the budget of a
// cluster rule as this instance knows it: Limit and Window are the fleet's
// (Threshold per StatInterval), Remaining the permits this instance holds
// in its leases (the fleet may have more left in the store, or less once
// other instances spend theirs), and Reset the refusal's RetryAfter, or
// on a pass the interval (every count of a window leaves it within one
// interval; this instance cannot see when the fleet's do).
func (c *clusterRule) clusterBudget(ec *entry.Context, r lease.Result, lim *lease.Limiter) {
	ival := cmp.Or(c.rule.StatInterval, ruledef.StatInterval)
	bg := core.Budget{Limit: c.limit, Window: ival}
	if !r.Admitted {
		bg.Reset = r.RetryAfter
		c.refusedBudget(ec, bg)
		return
	}
	bg.Remaining = min(lim.Held(), floorCount(c.limit))
	bg.Reset = ival
	c.noteBudget(ec, bg)
}
