package lease

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-go/sluice/cluster"
)

// acquireStrict asks the Store for n permits, all or nothing, through
// Manager.Ask: in a Take of its own on the caller's goroutine when no other
// strict caller's is under way, else in the Manager's next Take with every
// other request queued meanwhile.
func (l *Limiter) acquireStrict(ctx context.Context, now, n int64) Result {
	if l.isClosed() {
		return l.fallback(n, now)
	}
	r := l.m.Ask(ctx, l.spec.Budget, now, n)
	if r.By == ByFallback {
		if r.timedOut {
			l.stats.timeouts.Add(1)
		}
		return l.fallback(n, r.at)
	}
	if r.By == ByStore {
		l.mu.Lock()
		if r.Admitted {
			l.recent.add(now, n)
		} else {
			l.lastDry = now
		}
		l.mu.Unlock()
	}
	return r.Result
}

// Answer is the outcome of Manager.Ask.
type Answer struct {
	Result
	// at is the clock reading of a fallback decision; timedOut reports
	// that the wait reached the Manager's Timeout.
	at       int64
	timedOut bool
}

// Ask asks the Store for n permits of budget b (n below 1 counts as 1), all
// or nothing, with no Limiter and no lease, and waits for the answer, for
// ctx, or for the Manager's Timeout, whichever is first. now is the
// caller's reading of the Manager's clock.
//
// A caller that finds no other caller's own Take under way sends its
// request alone, in a Take on its own goroutine under a context that ends
// with ctx or after Timeout (no hand-off to the store goroutine and back:
// one round trip is the whole cost). Otherwise the request is queued for
// the Manager's store goroutine, started at once if it is not running,
// whose next Take carries every request queued meanwhile; a grant that
// arrives after the caller stopped waiting goes back to the Store. So two
// strict callers go concurrently, one in each lane, and many share the
// store goroutine's Takes. Either way the Take is bounded by Timeout and
// its failure switches the Manager to Fallback; a lone caller's Take that
// ends because ctx did is the caller's doing, not the Store's: the answer
// is ByContext and the mode stays (the Store may have charged the permits
// of a call cut short: permits lost, never an admission too many).
//
// The answer is the Store's (By ByStore: admitted with the grant's Wait, or
// refused with its RetryAfter), ByContext when ctx ended first, or
// ByFallback, not admitted, when the Store failed or was late, the Manager
// is in Fallback mode (Ask then queues a probe when one is due) or closed:
// the caller decides by its own fallback policy. Budgets decided this way
// are for callers that keep many of them, such as one per parameter value;
// the Manager keeps nothing per budget.
func (m *Manager) Ask(ctx context.Context, b cluster.Budget, now, n int64) Answer {
	if n < 1 {
		n = 1
	}
	if m.Mode() == Fallback {
		m.maybeProbe(now)
		return Answer{Result: Result{By: ByFallback}, at: now}
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return Answer{Result: Result{By: ByFallback}, at: now}
	}
	if !m.alone {
		// This goroutine takes the lone lane (see askAlone).
		m.alone = true
		m.wg.Add(1)
		m.mu.Unlock()
		return m.askAlone(ctx, b, n)
	}
	c := &call{req: cluster.Request{Budget: b, N: n}, done: make(chan struct{})}
	m.queue = append(m.queue, c)
	m.wakeLocked()
	m.mu.Unlock()
	return m.await(ctx, c, n)
}

// ChargeAndAsk is Ask preceded, in the same Take, by a charge of charge
// permits of b, partial, whose grant is spent (counted in Stats.Paid): how
// a caller that keeps its own books charges the Store, once it answers
// again, for what its fallback admitted, ahead of its next request. Both
// go through the store goroutine's queue, never the lone lane, so the
// charge is decided first; the answer is the request's, as Ask's. A
// charge below 1 is Ask.
func (m *Manager) ChargeAndAsk(ctx context.Context, b cluster.Budget, now, n, charge int64) Answer {
	if charge < 1 {
		return m.Ask(ctx, b, now, n)
	}
	if n < 1 {
		n = 1
	}
	if m.Mode() == Fallback {
		m.maybeProbe(now)
		return Answer{Result: Result{By: ByFallback}, at: now}
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return Answer{Result: Result{By: ByFallback}, at: now}
	}
	pc := &call{req: cluster.Request{Budget: b, N: charge, Partial: true}, paid: true, done: make(chan struct{})}
	c := &call{req: cluster.Request{Budget: b, N: n}, done: make(chan struct{})}
	m.queue = append(m.queue, pc, c)
	m.wakeLocked()
	m.mu.Unlock()
	return m.await(ctx, c, n)
}

// await waits for the queued strict call c for n permits, for ctx, or for
// the Manager's Timeout, whichever is first, and returns its answer.
func (m *Manager) await(ctx context.Context, c *call, n int64) Answer {
	t := m.clock.NewTimer(m.timeout)
	select {
	case <-c.done:
		t.Stop()
	case <-ctx.Done():
		t.Stop()
		if c.state.CompareAndSwap(callPending, callAbandoned) {
			return Answer{Result: Result{By: ByContext}}
		}
		<-c.done
	case <-t.C():
		if c.state.CompareAndSwap(callPending, callAbandoned) {
			return Answer{Result: Result{By: ByFallback}, at: m.clock.Nanotime(), timedOut: true}
		}
		<-c.done
	}
	if c.err != nil {
		now := m.clock.Nanotime()
		if m.Mode() == Fallback {
			m.maybeProbe(now)
		}
		return Answer{Result: Result{By: ByFallback}, at: now}
	}
	return grantAnswer(c.grant, n)
}

// askAlone sends one request in a Take of its own on the caller's
// goroutine, which holds the lone lane meanwhile (m.alone, counted in m.wg
// so that Close waits for the call).
func (m *Manager) askAlone(ctx context.Context, b cluster.Budget, n int64) Answer {
	defer m.release()
	epoch := m.epoch.Load()
	if m.Mode() == Fallback { // a Take failed since Ask looked
		now := m.clock.Nanotime()
		m.maybeProbe(now)
		return Answer{Result: Result{By: ByFallback}, at: now}
	}
	if ctx.Err() != nil {
		return Answer{Result: Result{By: ByContext}}
	}
	// The lane's buffers are this goroutine's while it holds the lane.
	reqs, grants := m.loneReq[:], m.loneGrant[:]
	reqs[0], grants[0] = cluster.Request{Budget: b, N: n}, cluster.Grant{}
	m.stats.takes.Add(1)
	m.stats.requests.Add(1)
	start := m.clock.Nanotime()
	tctx, cancel := callContext(ctx, m.clock, m.deadline())
	err := m.store.Take(tctx, reqs, grants)
	late := err != nil && errors.Is(context.Cause(tctx), context.DeadlineExceeded)
	now := m.clock.Nanotime()
	g := grants[0]
	reqs[0] = cluster.Request{}
	if err != nil {
		if ctx.Err() != nil {
			cancel()
			// The caller's context ended the call: the Store is not to
			// blame, and what it may have charged is lost.
			return Answer{Result: Result{By: ByContext}}
		}
		m.stats.takeErrs.Add(1)
		m.failed(tctx, start, now, epoch, fmt.Errorf("sluice: cluster store: take: %w", err))
		cancel()
		m.trs.Drain()
		if m.Mode() == Fallback {
			m.maybeProbe(now)
		}
		return Answer{Result: Result{By: ByFallback}, at: now, timedOut: late}
	}
	cancel()
	m.observeRTT(now - start)
	m.observeLatency(now - start)
	return grantAnswer(g, n)
}

// release gives up the lone lane askAlone took.
func (m *Manager) release() {
	m.mu.Lock()
	m.alone = false
	m.idle.Broadcast()
	m.mu.Unlock()
	m.wg.Done()
}

// grantAnswer is the answer of a request for n permits that got g.
func grantAnswer(g cluster.Grant, n int64) Answer {
	if g.N >= n {
		return Answer{Result: Result{Admitted: true, Wait: g.Wait}}
	}
	return Answer{Result: Result{RetryAfter: g.RetryAfter}}
}

func (l *Limiter) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}
