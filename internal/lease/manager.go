package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/clock"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/notify"
)

// Defaults of Config.
const (
	// DefaultTimeout bounds every Store call and every wait for one. A
	// call's own deadline follows the Store's latency (see Config.Timeout)
	// and is usually MinTimeout.
	DefaultTimeout = 250 * time.Millisecond
	// MinTimeout is the least deadline of a Store call, with a quarter of
	// Timeout if that is more (and Timeout if that is less).
	MinTimeout = 20 * time.Millisecond
	// DefaultTripAfter is how many Store calls in a row must be late
	// before the Manager decides locally (a dead connection trips at
	// once).
	DefaultTripAfter = 3
	// DefaultProbeInterval is the least time between two probes of a
	// failing Store.
	DefaultProbeInterval = time.Second
	// DefaultProbeKey is the key of the budget a probe takes a permit from.
	DefaultProbeKey = "sluice.probe"
)

// Mode is where a Manager's decisions come from.
type Mode uint32

const (
	// Remote is the normal mode: the Store decides, through leases or, for
	// strict budgets, one request per call.
	Remote Mode = iota
	// Fallback is the mode after a Store call failed: every decision is
	// the budget's fallback policy's and no request touches the Store,
	// until a probe succeeds.
	Fallback
)

// String returns "remote" or "fallback".
func (m Mode) String() string {
	switch m {
	case Remote:
		return "remote"
	case Fallback:
		return "fallback"
	}
	return "unknown"
}

// Transition is a change of a Manager's Mode, as its listener sees it,
// or, with From and To both Fallback, a change of the failure that keeps
// it in Fallback (a probe failed otherwise than the last call: a Redis
// that restarted, EOF, now refuses the password).
type Transition struct {
	// From and To are the modes before and after.
	From, To Mode
	// At is the Manager's clock reading (ns) when it changed.
	At int64
	// Err is, when To is Fallback, the Store failure that caused it
	// (prefixed "sluice: "); nil on recovery.
	Err error
}

// Config configures a Manager. Only Store is required.
type Config struct {
	// Store shares the budgets.
	Store cluster.Store
	// Clock measures lease lifetimes, demand, deadlines and probe
	// intervals. Nil means clock.System(). The Store's own clock, not
	// this one, decides grants.
	Clock core.Clock
	// Timeout bounds every Store call but a probe (its context ends after
	// Timeout on Clock at the latest; a probe's after probeFactor
	// Timeouts) and every request's wait for one: no Acquire
	// waits longer, whatever the Store does. Zero means DefaultTimeout.
	// Each call's own deadline follows the Store's latency: latencyFactor
	// times a recent high percentile of the successful calls (the second
	// slowest of the last latencySamples), at least MinTimeout and
	// Timeout/4, at most Timeout; Timeout before any call succeeded.
	Timeout time.Duration
	// TripAfter is how many late Store calls in a row switch the Manager
	// to Fallback (a late call's own requests are decided by the fallback
	// policy either way). A call that fails otherwise (a refused or broken
	// connection, an error reply) switches at once. Zero means
	// DefaultTripAfter.
	TripAfter int
	// OnRecover, when set, is called after a probe succeeded and before
	// the Manager returns to Remote, on the store goroutine, with a
	// context that ends after Timeout. The engine beats there, so a Store
	// that restarted empty counts the instance before its first remote
	// decision.
	OnRecover func(context.Context)
	// ProbeInterval is the least time, on Clock, between two probes of a
	// failing Store. Zero means DefaultProbeInterval.
	ProbeInterval time.Duration
	// ProbeKey is the key of the budget a probe takes one permit from (a
	// token bucket of 2^30 permits per second, so a probe never runs
	// short). Empty means DefaultProbeKey.
	ProbeKey string
	// OnTransition, when set, is called after every change of mode, in
	// order, outside the Manager's locks, on the goroutine that made the
	// Store call, or on a goroutine already telling an earlier transition:
	// transitions are told one at a time, in the order the mode changed. It
	// must return quickly (the Store call that failed or the probe waits
	// for it) and must not call Acquire or Close.
	OnTransition func(Transition)
}

// Manager holds the leases and the strict requests of every shared budget
// of one engine against one Store, and the breaker around that Store. It is
// safe for concurrent use.
//
// Store calls are made in two lanes, at most one call in each. The
// Manager's store goroutine, which exists only while there is work, makes
// Take, Give and the probe one at a time and sends all the Take requests
// queued meanwhile (lease refills of any budget, strict requests) in one
// Take. Beside it, one strict caller at a time sends its request alone, on
// its own goroutine, with no hand-off (see Ask): two strict callers go
// concurrently, as two callers of a per-call limiter would. The breaker
// takes either lane's failure, a failure of a call started before the last
// transition is not counted twice, and transitions are told in order.
// Close waits for both lanes.
type Manager struct {
	store      cluster.Store
	clock      core.Clock
	wallOff    func() int64 // what turns a reading of clock into Unix ns, now
	timeout    time.Duration
	floor      time.Duration // least deadline of a call
	tripAfter  int64
	onRecover  func(context.Context)
	probeEvery int64
	probe      cluster.Budget
	trs        notify.Hub[Transition] // OnTransition's queue
	// probeCtx ends at Close, cutting a probe under way short (a probe
	// may take longer than Timeout, see runProbe).
	probeCtx  context.Context
	probeStop context.CancelFunc

	// tmu orders mode changes: epoch counts them, so a call that started
	// before the last one does not switch the mode on its failure.
	tmu   sync.Mutex
	epoch atomic.Uint64

	mode    atomic.Uint32
	probeAt atomic.Int64 // clock ns: the next probe is allowed at or after
	live    atomic.Int64 // >= 1
	rtt     atomic.Int64 // ns, moving average of successful Take calls
	late    atomic.Int64 // late calls in a row
	dl      atomic.Int64 // ns: the deadline of the next call
	share   atomic.Int64 // the count local shares divide by; 0: live
	source  atomic.Uint32

	// cause is, in Fallback, the failure of the call that tripped or of
	// the last probe (see probeFailed).
	cause atomic.Pointer[error]

	latMu sync.Mutex
	lat   [latencySamples]int64 // ns of recent successful calls, a ring
	latN  int

	mu       sync.Mutex
	idle     sync.Cond // signalled when the store goroutine exits
	limiters map[*Limiter]struct{}
	queue    []*call
	gives    []give
	probing  bool // a probe is queued
	working  bool // the store goroutine runs
	alone    bool // a strict caller's own Take is under way (see Ask)
	closed   bool // no new Take or probe
	done     bool // no new store goroutine
	wg       sync.WaitGroup

	// Buffers of the store goroutine: spare and gspare between runs
	// (under mu), reqs and grants while it runs; loneReq and loneGrant are
	// the lone strict caller's (m.alone).
	spare     []*call
	gspare    []give
	reqs      []cluster.Request
	grants    []cluster.Grant
	loneReq   [1]cluster.Request
	loneGrant [1]cluster.Grant

	stats struct {
		takes, takeErrs, requests atomic.Int64
		gives, given, dropped     atomic.Int64
		probes                    atomic.Int64
		late, paid                atomic.Int64
	}
}

// latencySamples is how many successful calls the deadline follows, and
// latencyFactor the multiple of their second slowest it allows.
const (
	latencySamples = 32
	latencyFactor  = 4
)

// probeFactor is a probe's deadline in Timeouts (see runProbe).
const probeFactor = 4

// call is one request in a Take: a lease refill (lim set) or a strict
// request.
type call struct {
	req   cluster.Request
	grant cluster.Grant
	err   error
	lim   *Limiter      // the limiter whose lease this refills; nil if strict
	sent  int64         // clock ns when the Take carrying it was sent
	paid  bool          // a payback (see Limiter.payback): the grant is spent
	state atomic.Uint32 // strict: callPending, callDone or callAbandoned
	done  chan struct{} // closed once grant and err are final
}

const (
	callPending uint32 = iota
	callDone
	callAbandoned
)

type give struct {
	b     cluster.Budget
	n     int64
	until int64 // clock ns: the Store must decide it before (see Manager.give); noEnd for no bound
}

// noEnd is the until of a give that the Store may decide whenever.
const noEnd = int64(math.MaxInt64)

// wallOffset returns what turns a reading of c into Unix ns at the time of
// the call: for the system clock, from a fresh reading of the wall clock,
// so that a stepped or slewed wall clock (which the Store's clock follows)
// is followed too; for any other clock, clock.WallOffset (a manual clock
// is read as Unix ns).
func wallOffset(c core.Clock) func() int64 {
	if c == clock.System() {
		return func() int64 {
			r := c.Nanotime()
			return time.Now().UnixNano() - r
		}
	}
	off := clock.WallOffset(c)
	return func() int64 { return off }
}

var (
	errClosed = errors.New("sluice: lease manager closed")
	errOpen   = errors.New("sluice: cluster store in fallback")
)

// New returns a Manager for cfg.
func New(cfg Config) (*Manager, error) {
	if cfg.Store == nil {
		return nil, errors.New("sluice: lease: nil Store")
	}
	if cfg.Timeout < 0 || cfg.ProbeInterval < 0 || cfg.TripAfter < 0 {
		return nil, errors.New("sluice: lease: negative Timeout, ProbeInterval or TripAfter")
	}
	m := &Manager{
		store:    cfg.Store,
		clock:    cfg.Clock,
		timeout:  cfg.Timeout,
		limiters: make(map[*Limiter]struct{}),
	}
	if m.clock == nil {
		m.clock = clock.System()
	}
	m.wallOff = wallOffset(m.clock)
	if m.timeout == 0 {
		m.timeout = DefaultTimeout
	}
	m.floor = min(max(MinTimeout, m.timeout/4), m.timeout)
	m.dl.Store(int64(m.timeout))
	m.tripAfter = int64(cfg.TripAfter)
	if m.tripAfter == 0 {
		m.tripAfter = DefaultTripAfter
	}
	m.onRecover = cfg.OnRecover
	m.source.Store(uint32(SourceCounted))
	m.probeEvery = int64(cfg.ProbeInterval)
	if m.probeEvery == 0 {
		m.probeEvery = int64(DefaultProbeInterval)
	}
	key := cfg.ProbeKey
	if key == "" {
		key = DefaultProbeKey
	}
	m.probe = cluster.Budget{Key: key, Algorithm: cluster.TokenBucket, Limit: 1 << 30, Interval: time.Second}
	m.idle.L = &m.mu
	m.probeCtx, m.probeStop = context.WithCancel(context.Background())
	m.trs.Listen(cfg.OnTransition)
	m.live.Store(1)
	return m, nil
}

// Mode returns the current mode.
func (m *Manager) Mode() Mode { return Mode(m.mode.Load()) }

// SetLive sets the number of live instances sharing the budgets (at least
// 1; smaller values count as 1), which caps lease sizes and sets local
// fallback shares. A Heartbeat keeps it with OnLive: m.SetLive.
func (m *Manager) SetLive(n int) {
	if n < 1 {
		n = 1
	}
	m.live.Store(int64(n))
}

// Live returns the live instance count last set, at least 1.
func (m *Manager) Live() int { return int(m.live.Load()) }

// SetShare sets the count local fallback shares divide by and where it
// comes from (a Heartbeat keeps it with OnShare: m.SetShare); the shares
// use the larger of it and Live.
func (m *Manager) SetShare(n int, src Source) {
	m.share.Store(int64(max(n, 1)))
	m.source.Store(uint32(src))
}

// Share returns the count local fallback shares divide by, at least Live,
// and its source (SourceCounted when nothing was set).
func (m *Manager) Share() (int, Source) {
	return int(max(m.share.Load(), m.live.Load())), Source(m.source.Load())
}

// shareLive is Share's count.
func (m *Manager) shareLive() int { return int(max(m.share.Load(), m.live.Load())) }

// deadline is the deadline of the next Store call.
func (m *Manager) deadline() time.Duration { return time.Duration(m.dl.Load()) }

// observeLatency folds the duration d of a successful call into the
// deadline: latencyFactor times the second slowest of the last
// latencySamples, within [floor, Timeout]. A late call the Store answers
// slowly is thus given the time the Store has lately needed, so a busy
// host does not trip the breaker, and a dead Store costs a call little.
func (m *Manager) observeLatency(d int64) {
	m.late.Store(0)
	m.sample(d)
}

// sample adds d to the latency samples and sets the deadline from them.
func (m *Manager) sample(d int64) {
	m.latMu.Lock()
	m.lat[m.latN%latencySamples] = max(d, 0)
	m.latN++
	var a, b int64 // the slowest and second slowest
	for _, v := range m.lat[:min(m.latN, latencySamples)] {
		switch {
		case v > a:
			a, b = v, a
		case v > b:
			b = v
		}
	}
	if m.latN < 2 {
		b = a
	}
	m.latMu.Unlock()
	m.dl.Store(clampInt(latencyFactor*b, int64(m.floor), int64(m.timeout)))
}

// observeLateness folds a call that passed its deadline after d into the
// deadline as if it had succeeded in d: a Store that became slower than
// the deadline gives no successful samples, so without this the deadline
// would stay below its latency and every call would be late for as long
// as it stays slow. Two late calls make d the second slowest sample, and
// the next call's deadline is then latencyFactor times d (at most
// Timeout). Unlike observeLatency it keeps the count of late calls.
func (m *Manager) observeLateness(d int64) { m.sample(d) }

// restartLatency forgets the samples from before the outage, which
// describe a Store that may be slower now, and keeps d, the latency of
// the probe that found the Store answering again, as two samples: the
// deadline is latencyFactor times d (within [floor, Timeout]) until two
// faster calls have succeeded.
func (m *Manager) restartLatency(d int64) {
	m.latMu.Lock()
	m.latN = 0
	m.latMu.Unlock()
	m.sample(d)
	m.sample(d)
}

// isLate reports whether a call under ctx failed by passing its deadline
// (or a socket timeout of the client) rather than on a dead connection
// or an error reply.
func isLate(ctx context.Context, err error) bool {
	if errors.Is(context.Cause(ctx), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout()
}

// failed takes the failure err of a call that started in epoch at start
// and ran under ctx: a late call raises the deadline (observeLateness) and
// switches to Fallback only as the TripAfter-th
// late call in a row, any other failure at once.
func (m *Manager) failed(ctx context.Context, start, now int64, epoch uint64, err error) {
	if isLate(ctx, err) {
		m.stats.late.Add(1)
		m.observeLateness(now - start)
		if m.late.Add(1) < m.tripAfter {
			return
		}
	}
	m.trip(now, epoch, err)
}

// ManagerStats counts a Manager's Store traffic since New.
type ManagerStats struct {
	// Takes is the number of Take calls, TakeErrors how many of them
	// failed, and Requests the number of requests they carried.
	Takes, TakeErrors, Requests int64
	// Gives is the number of Give calls and Given the permits they
	// returned; Dropped is the unused permits that could not go back (the
	// Store was failing, or they were too old to give back).
	Gives, Given, Dropped int64
	// Probes is the number of probes sent.
	Probes int64
	// Late is the number of calls that passed their deadline; Paid the
	// permits charged to the Store on recovery for the local admissions
	// of the fallback, and again for a sliding-window Give not answered
	// before its aligned interval ended (see Manager.give).
	Late, Paid int64
}

// Stats returns the Manager's counters.
func (m *Manager) Stats() ManagerStats {
	return ManagerStats{
		Takes: m.stats.takes.Load(), TakeErrors: m.stats.takeErrs.Load(), Requests: m.stats.requests.Load(),
		Gives: m.stats.gives.Load(), Given: m.stats.given.Load(), Dropped: m.stats.dropped.Load(),
		Probes: m.stats.probes.Load(), Late: m.stats.late.Load(), Paid: m.stats.paid.Load(),
	}
}

// Close releases every Limiter of the Manager (their unused permits go back
// to the Store), waits for the Store calls under way and queued, each
// bounded by Timeout, and stops the Manager's goroutine. Limiters decide by
// their fallback policy afterwards. Close is idempotent.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		m.wg.Wait()
		return nil
	}
	m.closed = true
	ls := m.limiterList()
	m.mu.Unlock()
	m.probeStop()
	for _, l := range ls {
		l.Close()
	}
	m.mu.Lock()
	m.done = true
	m.mu.Unlock()
	m.wg.Wait()
	return nil
}

// limiterList returns the registered limiters. m.mu must be held.
func (m *Manager) limiterList() []*Limiter {
	ls := make([]*Limiter, 0, len(m.limiters))
	for l := range m.limiters {
		ls = append(ls, l)
	}
	return ls
}

func (m *Manager) register(l *Limiter) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errClosed
	}
	m.limiters[l] = struct{}{}
	return nil
}

func (m *Manager) unregister(l *Limiter) {
	m.mu.Lock()
	delete(m.limiters, l)
	m.mu.Unlock()
}

// submit queues c for the next Take. It reports false, queueing nothing,
// when the Manager is closed.
func (m *Manager) submit(c *call) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.queue = append(m.queue, c)
	m.wakeLocked()
	return true
}

// giveBack queues n unused permits of b for a Give that the Store must
// decide before until (clock ns; noEnd for no bound, see give). Permits are
// dropped (counted in Stats.Dropped) while the Store is failing and once
// the Manager has stopped.
func (m *Manager) giveBack(b cluster.Budget, n, until int64) {
	if n <= 0 {
		return
	}
	if m.Mode() == Fallback {
		m.stats.dropped.Add(n)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done && !m.working {
		m.stats.dropped.Add(n)
		return
	}
	for i := range m.gives {
		if m.gives[i].b == b && m.gives[i].until == until {
			m.gives[i].n += n
			return
		}
	}
	m.gives = append(m.gives, give{b, n, until})
	m.wakeLocked()
}

// maybeProbe queues a probe of the failing Store if none was sent in the
// last probe interval. It never blocks on the Store.
func (m *Manager) maybeProbe(now int64) {
	at := m.probeAt.Load()
	if now < at || !m.probeAt.CompareAndSwap(at, now+m.probeEvery) {
		return
	}
	m.mu.Lock()
	if !m.closed {
		m.probing = true
		m.wakeLocked()
	}
	m.mu.Unlock()
}

// wakeLocked starts the store goroutine unless it runs. m.mu must be held;
// once the Manager is done only a running goroutine takes new work.
func (m *Manager) wakeLocked() {
	if m.working || m.done {
		return
	}
	m.working = true
	m.wg.Add(1)
	go m.work()
}

// waitIdle waits until the store goroutine has finished all queued work
// and no strict caller's own Take is under way. For tests.
func (m *Manager) waitIdle() {
	m.mu.Lock()
	for m.working || m.alone {
		m.idle.Wait()
	}
	m.mu.Unlock()
}

// work is the store goroutine: it sends the queued Take requests in one
// Take, then the queued Gives, then a probe if one is wanted, and repeats
// until nothing is queued.
func (m *Manager) work() {
	defer m.wg.Done()
	m.mu.Lock()
	batch, gives := m.spare, m.gspare // the buffers of the last run
	m.spare, m.gspare = nil, nil
	for {
		batch, m.queue = m.queue, batch[:0]
		gives, m.gives = m.gives, gives[:0]
		probe := m.probing
		m.probing = false
		if len(batch) == 0 && len(gives) == 0 && !probe {
			m.spare, m.gspare = batch, gives
			m.working = false
			m.idle.Broadcast()
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
		if len(batch) > 0 {
			m.take(batch)
		}
		for _, g := range gives {
			m.give(g)
		}
		if probe {
			m.runProbe()
		}
		clear(batch)
		clear(gives)
		m.mu.Lock()
	}
}

// take sends batch in one Take and delivers the answers.
func (m *Manager) take(batch []*call) {
	if m.Mode() == Fallback {
		m.finish(batch, errOpen, m.clock.Nanotime())
		return
	}
	reqs := m.reqs[:0]
	for _, c := range batch {
		reqs = append(reqs, c.req)
	}
	grants := slices.Grow(m.grants[:0], len(reqs))[:len(reqs)]
	clear(grants)
	m.stats.takes.Add(1)
	m.stats.requests.Add(int64(len(reqs)))
	epoch := m.epoch.Load()
	start := m.clock.Nanotime()
	for _, c := range batch {
		c.sent = start
	}
	ctx, cancel := callContext(context.Background(), m.clock, m.deadline())
	err := m.store.Take(ctx, reqs, grants)
	now := m.clock.Nanotime()
	clear(reqs)
	m.reqs, m.grants = reqs, grants
	if err != nil {
		m.stats.takeErrs.Add(1)
		err = fmt.Errorf("sluice: cluster store: take: %w", err)
		m.failed(ctx, start, now, epoch, err)
		cancel()
		m.finish(batch, err, now)
		m.trs.Drain()
		return
	}
	cancel()
	m.observeRTT(now - start)
	m.observeLatency(now - start)
	for i, c := range batch {
		c.grant = grants[i]
		m.deliver(c, now)
	}
}

// finish decides every call of batch as failed with err.
func (m *Manager) finish(batch []*call, err error, now int64) {
	for _, c := range batch {
		c.err = err
		m.deliver(c, now)
	}
}

// deliver hands a decided call to its limiter or its waiting caller. A
// strict grant whose caller has given up goes back to the Store.
func (m *Manager) deliver(c *call, now int64) {
	if c.lim != nil {
		c.lim.refilled(c, now)
		return
	}
	if c.paid && c.err == nil {
		m.stats.paid.Add(c.grant.N)
	}
	if !c.state.CompareAndSwap(callPending, callDone) && c.err == nil {
		m.giveBack(c.req.Budget, c.grant.N, noEnd)
	}
	close(c.done)
}

// give sends one Give.
//
// A Give with an until (a sliding-window lease's leftovers, see the
// package's Accuracy) must be decided by the Store before until: the Store
// takes back the window's newest permits, which after until may be the
// next aligned interval's grants to other instances. It is sent only if
// its deadline ends before until, else dropped; and if it is not answered
// before until (it failed, or passed its deadline: the Store may still
// decide it later), its permits are charged again with a Take whose grant
// is spent, like a payback, queued at once.
func (m *Manager) give(g give) {
	if m.Mode() == Fallback {
		m.stats.dropped.Add(g.n)
		return
	}
	epoch := m.epoch.Load()
	start := m.clock.Nanotime()
	dl := m.deadline()
	if g.until != noEnd && start+int64(dl) >= g.until {
		m.stats.dropped.Add(g.n)
		return
	}
	m.stats.gives.Add(1)
	ctx, cancel := callContext(context.Background(), m.clock, dl)
	err := m.store.Give(ctx, g.b, g.n)
	now := m.clock.Nanotime()
	if g.until != noEnd && (err != nil || now >= g.until) {
		m.submit(&call{req: cluster.Request{Budget: g.b, N: g.n, Partial: true}, paid: true, done: make(chan struct{})})
	}
	if err != nil {
		m.stats.dropped.Add(g.n)
		m.failed(ctx, start, now, epoch, fmt.Errorf("sluice: cluster store: give: %w", err))
		cancel()
		m.trs.Drain()
		return
	}
	cancel()
	m.observeLatency(now - start)
	m.stats.given.Add(g.n)
}

// runProbe takes one permit of the probe budget and, if the Store answers,
// returns to Remote.
func (m *Manager) runProbe() {
	if m.Mode() != Fallback {
		return
	}
	m.stats.probes.Add(1)
	reqs := [1]cluster.Request{{Budget: m.probe, N: 1, Partial: true}}
	var grants [1]cluster.Grant
	// A probe has probeFactor times Timeout (not the deadline, which may
	// have been learned from a faster Store): no entry waits for it, and a
	// Store that answers within Timeout may need several round trips
	// more on a new connection (go-redis sends HELLO and two CLIENT
	// SETINFO before the first command), which a probe cut off at Timeout
	// would never complete, the client dropping the half-made connection
	// each time. Its latency is the first sample of the deadline after the
	// outage.
	start := m.clock.Nanotime()
	ctx, cancel := callContext(m.probeCtx, m.clock, probeFactor*m.timeout)
	err := m.store.Take(ctx, reqs[:], grants[:])
	cancel()
	if err != nil {
		m.probeFailed(fmt.Errorf("sluice: cluster store: probe: %w", err))
		return
	}
	m.restartLatency(m.clock.Nanotime() - start)
	m.late.Store(0)
	if m.onRecover != nil {
		ctx, cancel := callContext(context.Background(), m.clock, m.timeout)
		m.onRecover(ctx)
		cancel()
	}
	// Before any remote decision: the local admissions of the fallback
	// are charged to the shared budgets (see Limiter.payback), in the
	// next Take, ahead of any refill.
	now := m.clock.Nanotime()
	m.mu.Lock()
	ls := m.limiterList()
	m.mu.Unlock()
	for _, l := range ls {
		l.payback(now)
	}
	m.tmu.Lock()
	if m.mode.CompareAndSwap(uint32(Fallback), uint32(Remote)) {
		m.cause.Store(nil)
		m.epoch.Add(1)
		m.trs.Enqueue(Transition{From: Fallback, To: Remote, At: m.clock.Nanotime()})
	}
	m.tmu.Unlock()
	m.trs.Drain()
}

// trip switches to Fallback after a failed Store call that started in
// mode epoch epoch: leases are dropped (their permits cannot go back to a
// failing Store) and the first probe is allowed one probe interval later.
// The transition is queued for OnTransition (the caller drains it once it
// has decided its requests). A call that started before the last change
// of mode changes nothing: its failure was seen already, or came before
// a probe that succeeded since.
func (m *Manager) trip(now int64, epoch uint64, err error) {
	m.tmu.Lock()
	defer m.tmu.Unlock()
	if m.epoch.Load() != epoch || !m.mode.CompareAndSwap(uint32(Remote), uint32(Fallback)) {
		return
	}
	m.epoch.Add(1)
	m.cause.Store(&err)
	m.late.Store(0)
	m.probeAt.Store(now + m.probeEvery)
	m.mu.Lock()
	ls := m.limiterList()
	m.mu.Unlock()
	for _, l := range ls {
		l.dropLeases(now)
	}
	m.trs.Enqueue(Transition{From: Remote, To: Fallback, At: now, Err: err})
}

// probeFailed takes the failure err of a probe: when it is of another
// kind than the failure that keeps the Manager in Fallback (see
// failureKind), it becomes the cause and a Fallback to Fallback
// transition tells it, so that a Redis that came back refusing the
// password is reported, not the EOF of its restart.
func (m *Manager) probeFailed(err error) {
	m.tmu.Lock()
	if m.Mode() != Fallback {
		m.tmu.Unlock()
		return
	}
	if p := m.cause.Load(); p != nil && failureKind(*p) == failureKind(err) {
		m.cause.Store(&err) // the latest of its kind, for Err
		m.tmu.Unlock()
		return
	}
	m.cause.Store(&err)
	m.trs.Enqueue(Transition{From: Fallback, To: Fallback, At: m.clock.Nanotime(), Err: err})
	m.tmu.Unlock()
	m.trs.Drain()
}

// Err returns, in Fallback, the failure that keeps the Manager there: that
// of the call that tripped it, or of the last probe if that failed
// otherwise since; nil in Remote.
func (m *Manager) Err() error {
	if m.Mode() != Fallback {
		return nil
	}
	if p := m.cause.Load(); p != nil {
		return *p
	}
	return nil
}

// failureKind names the kind of a Store failure, leaving out what differs
// between two failures of one kind (addresses, ports, message details):
// the first word of an error reply from the server (WRONGPASS, NOAUTH,
// LOADING...), a deadline (the context's or a socket timeout), EOF, the operation and system error of a
// network failure (dial: connect: connection refused), or else the
// innermost error's text.
func failureKind(err error) string {
	var reply interface{ RedisError() }
	if errors.As(err, &reply) {
		msg := reply.(error).Error()
		if i := strings.IndexByte(msg, ' '); i > 0 {
			msg = msg[:i]
		}
		return "reply " + msg
	}
	var ne *net.OpError
	var te interface{ Timeout() bool }
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &te) && te.Timeout():
		return "deadline" // the context's or a socket's: late either way
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "EOF"
	case errors.As(err, &ne):
		if ne.Err != nil {
			return ne.Op + ": " + ne.Err.Error()
		}
		return ne.Op
	}
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error()
		}
		err = next
	}
}

// observeRTT folds the duration d of a successful Take into the moving
// average that sets lease low-water marks.
func (m *Manager) observeRTT(d int64) {
	if d < 0 {
		d = 0
	}
	old := m.rtt.Load()
	if old == 0 {
		m.rtt.Store(d)
		return
	}
	m.rtt.Store(old + (d-old)/4)
}

// ceilDiv returns ceil(a/b) for b > 0 and a >= 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// clampInt clamps v into [lo, hi].
func clampInt(v, lo, hi int64) int64 { return max(lo, min(v, hi)) }

// toInt converts a non-negative float to int64, saturating.
func toInt(f float64) int64 {
	if !(f < math.MaxInt64/2) {
		return math.MaxInt64 / 2
	}
	return int64(f)
}
