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
	if l.m.Mode() == Fallback || l.isClosed() {
		return l.fallback(n, now)
	}
	c := &call{req: cluster.Request{Budget: l.spec.Budget, N: n}, done: make(chan struct{})}
	if !l.m.submit(c) {
		return l.fallback(n, now)
	}
	t := l.clock.NewTimer(l.m.timeout)
	select {
	case <-c.done:
		t.Stop()
	case <-ctx.Done():
		t.Stop()
		if c.state.CompareAndSwap(callPending, callAbandoned) {
			return Result{By: ByContext}
		}
		<-c.done
	case <-t.C():
		if c.state.CompareAndSwap(callPending, callAbandoned) {
			l.stats.timeouts.Add(1)
			return l.fallback(n, l.clock.Nanotime())
		}
		<-c.done
	}
	if c.err != nil {
		return l.fallback(n, l.clock.Nanotime())
	}
	if c.grant.N >= n {
		return Result{Admitted: true, Wait: c.grant.Wait}
	}
	return Result{RetryAfter: c.grant.RetryAfter}
}

func (l *Limiter) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}
