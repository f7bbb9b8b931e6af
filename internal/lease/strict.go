package lease

import (
	"context"

	"github.com/sluice-go/sluice/cluster"
)

// acquireStrict sends a request for n permits, all or nothing, in the
// Manager's next Take (with every other request queued meanwhile) and waits
// for the answer, for ctx, or for the Manager's Timeout, whichever is
// first. A grant that arrives after its caller stopped waiting goes back to
// the Store.
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
// or nothing, with no Limiter and no lease: the request goes in the
// Manager's next Take, with every other request queued meanwhile, and Ask
// waits for the answer, for ctx, or for the Manager's Timeout, whichever is
// first; a grant that arrives after the caller stopped waiting goes back to
// the Store. now is the caller's reading of the Manager's clock.
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
	c := &call{req: cluster.Request{Budget: b, N: n}, done: make(chan struct{})}
	if !m.submit(c) {
		return Answer{Result: Result{By: ByFallback}, at: now}
	}
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
	if c.grant.N >= n {
		return Answer{Result: Result{Admitted: true, Wait: c.grant.Wait}}
	}
	return Answer{Result: Result{RetryAfter: c.grant.RetryAfter}}
}

func (l *Limiter) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}
