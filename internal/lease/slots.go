package lease

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// SlotStore is implemented by a cluster.Store that keeps fleet-wide
// concurrency slots (the Redis Store does): sets of holders, each with a
// deadline on the store's own clock, at most a limit of them live. A
// holder of n slots is n members: holder, then holder#2 ... holder#n.
type SlotStore interface {
	// AcquireSlot first forgets the members of key whose deadline passed,
	// then adds the n members of holder with a deadline ttl from the
	// store's clock if the live members are at most limit-n; it returns
	// whether it did and the live members after the decision.
	AcquireSlot(ctx context.Context, key, holder string, n, limit int64, ttl time.Duration) (ok bool, used int64, err error)
	// ReleaseSlot removes the n members of holder from key (members that
	// are not there are left alone: an expired lease frees nobody else's).
	ReleaseSlot(ctx context.Context, key, holder string, n int64) error
	// RenewSlots sets the deadline of the members of holders[i] (ns[i] of
	// them, in keys[i]) to ttl from the store's clock, in one round trip.
	// Without add it renews only members still live and returns how many
	// were not (lost leases); with add it adds the missing ones too.
	RenewSlots(ctx context.Context, keys, holders []string, ns []int64, ttl time.Duration, add bool) (missing int64, err error)
}

// SlotTTLFactor is how many renewal intervals a slot's lease lasts: an
// instance that stops renewing (it died, or lost the store) has its slots
// reclaimed at most SlotTTLFactor intervals after its last renewal.
const SlotTTLFactor = 3

// SlotPool holds the fleet-wide concurrency slots of one engine: the
// in-flight entries of every concurrency budget, and the goroutine that
// renews their leases in one round trip every interval. It decides through
// its Manager's mode: in Remote every admission is the store's; in
// Fallback each budget's fallback policy decides (the local share is
// Limit divided by the live instances, at least 1, counting every entry of
// this instance in flight). Slots held when the store failed, and those
// admitted meanwhile, are registered again (reconciled) before the first
// remote admission after recovery, so the store counts every entry still
// in flight, even above the limit: new entries then wait until the count
// falls below it. For a grace of the probe interval and two renewal
// intervals after a recovery, admissions also keep within the local share
// (the other instances may not have reconciled yet). A call late past the
// Manager's deadline that did not trip it is refused (the store may have
// admitted it; the next round removes that slot).
type SlotPool struct {
	m        *Manager
	store    SlotStore
	owner    string
	interval time.Duration
	ttl      time.Duration

	seq atomic.Uint64
	// sync is set when the store may be missing some held slot (a
	// fallback admission, a failed call, a lost lease): the next round
	// adds them all.
	sync atomic.Bool

	// rmu orders releases (read side) before a reconciliation (write
	// side), so a reconciliation never adds back a slot just released.
	rmu   sync.RWMutex
	mu    sync.Mutex
	slots map[string]*slotState // by key
	// orphans are slots the store may hold for an entry that was not
	// admitted (its call was late); the next renewal round removes them.
	orphans []*Hold
	// recovered is the clock reading (ns) of the last reconciliation after
	// an outage; until grace after it, admissions also keep within the
	// local share (the other instances may not have reconciled yet).
	recovered atomic.Int64
	grace     int64
	stats     struct{ renewals, reconciles, missing, errs atomic.Int64 }

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	once   sync.Once
	wg     sync.WaitGroup
}

// slotState is one key's in-flight entries on this instance.
type slotState struct {
	inflight int64 // slots, under SlotPool.mu
	held     map[string]int64
}

// NewSlotPool returns the pool of Manager m on store, whose holders are
// named after owner (the instance ID), renewing every interval (zero:
// DefaultBeatInterval); a lease lasts SlotTTLFactor intervals. It starts
// the renewal goroutine, which Close stops.
func NewSlotPool(m *Manager, store SlotStore, owner string, interval time.Duration) *SlotPool {
	if interval <= 0 {
		interval = DefaultBeatInterval
	}
	p := &SlotPool{
		m: m, store: store, owner: owner + ":" + strconv.FormatInt(m.clock.Nanotime(), 36) + ":",
		interval: interval, ttl: SlotTTLFactor * interval,
		grace: m.probeEvery + int64(2*interval),
		slots: make(map[string]*slotState),
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.renewLoop()
	return p
}

// TTL is the lease of a slot: how long after an instance's last renewal
// its slots are reclaimed.
func (p *SlotPool) TTL() time.Duration { return p.ttl }

// SlotSpec is one concurrency budget.
type SlotSpec struct {
	// Key names the budget in the store.
	Key string
	// Limit is the fleet's in-flight maximum.
	Limit int64
	// Fallback is the policy while the store fails.
	Fallback FallbackPolicy
	// LocalLimit is, for FallbackLocal, this instance's in-flight maximum
	// while the store fails; zero means LocalShare(Limit, live).
	LocalLimit int64
}

// LocalShare is the fallback share of a limit among live instances:
// limit/live rounded down, at least 1.
func LocalShare(limit int64, live int) int64 { return max(1, limit/int64(max(live, 1))) }

// Hold is one admitted entry's slots; Release gives them back.
type Hold struct {
	p      *SlotPool
	key    string
	holder string
	n      int64
	done   atomic.Bool
}

// Acquire asks for n slots of s for one entry, under ctx. It returns the
// entry's Hold when admitted, and the Result (By tells the store from the
// fallback).
func (p *SlotPool) Acquire(ctx context.Context, s *SlotSpec, n int64) (*Hold, Result) {
	h := &Hold{p: p, key: s.Key, holder: p.owner + strconv.FormatUint(p.seq.Add(1), 36), n: n}
	if p.m.Mode() == Remote && p.sync.Load() {
		p.reconcileIfNeeded(ctx)
	}
	if p.m.Mode() == Remote {
		if p.inGrace() && !p.withinShare(s, n) {
			return nil, Result{}
		}
		epoch := p.m.epoch.Load()
		start := p.m.clock.Nanotime()
		tctx, cancel := callContext(ctx, p.m.clock, p.m.deadline())
		// Held only once the store admitted it: a renewal round that
		// starts meanwhile leaves it out (its lease is fresh) rather than
		// finding it missing, and a reconciliation never adds a slot the
		// store then refuses.
		ok, _, err := p.store.AcquireSlot(tctx, s.Key, h.holder, n, s.Limit, p.ttl)
		now := p.m.clock.Nanotime()
		switch {
		case err == nil:
			cancel()
			p.m.observeLatency(now - start)
			if ok {
				p.add(h)
				return h, Result{Admitted: true}
			}
			return nil, Result{}
		case ctx.Err() != nil:
			cancel()
			p.orphan(h) // the store may have added the slot
			return nil, Result{By: ByContext}
		}
		p.orphan(h)
		p.stats.errs.Add(1)
		p.sync.Store(true)
		p.m.failed(tctx, start, now, epoch, fmt.Errorf("sluice: cluster store: acquire slot: %w", err))
		cancel()
		p.m.trs.Drain()
		if p.m.Mode() != Fallback {
			// A late call that did not trip the breaker: the store may
			// have added the slot (its lease runs out within the TTL), so
			// a local admission now could pass the limit. Refused.
			return nil, Result{By: ByFallback}
		}
		p.m.maybeProbe(now)
	} else {
		p.m.maybeProbe(p.m.clock.Nanotime())
	}
	return p.fallback(s, h)
}

// fallback decides h by s's fallback policy.
func (p *SlotPool) fallback(s *SlotSpec, h *Hold) (*Hold, Result) {
	switch s.Fallback {
	case FallbackPass:
	case FallbackBlock:
		return nil, Result{By: ByFallback}
	default:
		p.mu.Lock()
		if !p.withinShareLocked(s, h.n) {
			p.mu.Unlock()
			return nil, Result{By: ByFallback}
		}
		p.addLocked(h)
		p.mu.Unlock()
		p.sync.Store(true)
		return h, Result{Admitted: true, By: ByFallback}
	}
	p.add(h)
	p.sync.Store(true)
	return h, Result{Admitted: true, By: ByFallback}
}

// share is s's local share: LocalLimit, or LocalShare of the live count.
func (p *SlotPool) share(s *SlotSpec) int64 {
	if s.LocalLimit > 0 {
		return s.LocalLimit
	}
	return LocalShare(s.Limit, p.m.shareLive())
}

// withinShare reports whether n more slots of s keep this instance within
// its local share.
func (p *SlotPool) withinShare(s *SlotSpec, n int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.withinShareLocked(s, n)
}

func (p *SlotPool) withinShareLocked(s *SlotSpec, n int64) bool {
	var used int64
	if st := p.slots[s.Key]; st != nil {
		used = st.inflight
	}
	return used+n <= p.share(s)
}

// inGrace reports whether the last recovery was less than grace ago.
func (p *SlotPool) inGrace() bool {
	at := p.recovered.Load()
	return at != 0 && p.m.clock.Nanotime()+1-at < p.grace
}

// orphan queues h's slots for removal from the store at the next round.
func (p *SlotPool) orphan(h *Hold) {
	p.mu.Lock()
	p.orphans = append(p.orphans, h)
	p.mu.Unlock()
}

// releaseOrphans removes the queued orphans' slots from the store, while
// it answers; those it cannot remove run out with their leases.
func (p *SlotPool) releaseOrphans(ctx context.Context) {
	p.mu.Lock()
	os := p.orphans
	p.orphans = nil
	p.mu.Unlock()
	for _, h := range os {
		cctx, cancel := callContext(ctx, p.m.clock, p.m.timeout)
		err := p.store.ReleaseSlot(cctx, h.key, h.holder, h.n)
		cancel()
		if err != nil {
			p.stats.errs.Add(1)
			return
		}
	}
}

// InFlight returns this instance's slots in flight under key.
func (p *SlotPool) InFlight(key string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st := p.slots[key]; st != nil {
		return st.inflight
	}
	return 0
}

func (p *SlotPool) add(h *Hold) {
	p.mu.Lock()
	p.addLocked(h)
	p.mu.Unlock()
}

func (p *SlotPool) addLocked(h *Hold) {
	st := p.slots[h.key]
	if st == nil {
		st = &slotState{held: make(map[string]int64)}
		p.slots[h.key] = st
	}
	st.inflight += h.n
	st.held[h.holder] = h.n
}

// remove forgets h; it reports whether h was held.
func (p *SlotPool) remove(h *Hold) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.slots[h.key]
	if st == nil {
		return false
	}
	if _, ok := st.held[h.holder]; !ok {
		return false
	}
	delete(st.held, h.holder)
	st.inflight -= h.n
	if len(st.held) == 0 {
		delete(p.slots, h.key)
	}
	return true
}

// Release gives h's slots back: at once here, and in the store while it
// answers (otherwise the store's lease runs out within the TTL). A second
// Release does nothing.
func (h *Hold) Release() {
	if h == nil || !h.done.CompareAndSwap(false, true) {
		return
	}
	p := h.p
	p.rmu.RLock()
	defer p.rmu.RUnlock()
	if !p.remove(h) || p.m.Mode() != Remote {
		return
	}
	ctx, cancel := callContext(context.Background(), p.m.clock, p.m.deadline())
	err := p.store.ReleaseSlot(ctx, h.key, h.holder, h.n)
	cancel()
	if err != nil {
		// Not a reason to trip: the lease runs out on its own.
		p.stats.errs.Add(1)
	}
}

// snapshot returns every held slot: keys, holders and counts.
func (p *SlotPool) snapshot() (keys, holders []string, ns []int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, st := range p.slots {
		for h, n := range st.held {
			keys, holders, ns = append(keys, k), append(holders, h), append(ns, n)
		}
	}
	return keys, holders, ns
}

// Reconcile registers every slot this instance holds in the store (adding
// those it lacks: admitted by the fallback, or lost with the store's data
// or an expired lease), with a fresh deadline. The Manager's recovery
// calls it before its first remote decision.
func (p *SlotPool) Reconcile(ctx context.Context) {
	p.rmu.Lock()
	defer p.rmu.Unlock()
	p.round(ctx, true)
	p.recovered.Store(p.m.clock.Nanotime() + 1) // 0: never recovered
}

// reconcileIfNeeded is Reconcile unless another caller did it since sync
// was set.
func (p *SlotPool) reconcileIfNeeded(ctx context.Context) {
	p.rmu.Lock()
	defer p.rmu.Unlock()
	if p.sync.Load() {
		p.round(ctx, true)
	}
}

// round renews (add: reconciles) every held slot in one store call.
func (p *SlotPool) round(ctx context.Context, add bool) {
	if add {
		p.sync.Store(false)
	}
	keys, holders, ns := p.snapshot()
	if len(keys) == 0 {
		return
	}
	epoch := p.m.epoch.Load()
	start := p.m.clock.Nanotime()
	tctx, cancel := callContext(ctx, p.m.clock, p.m.timeout)
	missing, err := p.store.RenewSlots(tctx, keys, holders, ns, p.ttl, add)
	now := p.m.clock.Nanotime()
	if err != nil {
		p.sync.Store(true)
		if ctx.Err() == nil {
			p.m.failed(tctx, start, now, epoch, fmt.Errorf("sluice: cluster store: renew slots: %w", err))
		}
		cancel()
		p.m.trs.Drain()
		p.stats.errs.Add(1)
		return
	}
	cancel()
	if add {
		p.stats.reconciles.Add(1)
	} else {
		p.stats.renewals.Add(1)
	}
	if missing > 0 {
		p.stats.missing.Add(missing)
		p.sync.Store(true)
	}
}

// renewLoop renews every held slot every interval while the Manager is
// Remote (reconciling when sync is set), until Close.
func (p *SlotPool) renewLoop() {
	defer p.wg.Done()
	ctx := p.ctx
	for {
		t := p.m.clock.NewTimer(p.interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		if p.m.Mode() != Remote {
			p.m.maybeProbe(p.m.clock.Nanotime())
			continue
		}
		if p.sync.Load() {
			p.reconcileIfNeeded(ctx)
		} else {
			p.round(ctx, false)
		}
		p.releaseOrphans(ctx)
	}
}

// SlotStats counts a pool's renewal rounds, reconciliations, lost leases
// found by renewals and failed store calls.
type SlotStats struct{ Renewals, Reconciles, Missing, Errors int64 }

// Stats returns the pool's counts.
func (p *SlotPool) Stats() SlotStats {
	return SlotStats{p.stats.renewals.Load(), p.stats.reconciles.Load(), p.stats.missing.Load(), p.stats.errs.Load()}
}

// Close stops the renewal goroutine. Entries still in flight give their
// slots back at their Release; until then their leases are no longer
// renewed and run out within the TTL.
func (p *SlotPool) Close() {
	p.once.Do(func() {
		p.cancel()
		p.wg.Wait()
	})
}
