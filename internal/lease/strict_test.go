package lease

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
)

// TestStrictExact: 20 per hour per user is exact: one all-or-nothing
// request per call, no lease.
func TestStrictExact(t *testing.T) {
	e := newEnv(t, Config{})
	b := cluster.Budget{Key: "user:42", Algorithm: cluster.SlidingWindow, Limit: 20, Interval: time.Hour}
	l := e.limiter(t, Spec{Budget: b, Strict: true})
	admitted := 0
	for i := 0; i < 25; i++ {
		e.clk.Advance(time.Minute)
		r := l.acq(bg, 1)
		switch {
		case r.Fallback():
			t.Fatalf("call %d: %+v", i, r)
		case r.Admitted:
			admitted++
		case i == 20 && r.RetryAfter != 40*time.Minute:
			// The first grant, at minute 1, leaves the window at minute
			// 61; the 21st call comes at minute 21.
			t.Fatalf("call %d: retry after %v, want 40m", i, r.RetryAfter)
		case r.RetryAfter <= 0:
			t.Fatalf("call %d: %+v", i, r)
		}
	}
	if admitted != 20 {
		t.Fatalf("admitted %d, want 20", admitted)
	}
	for _, batch := range e.st.requests() {
		if len(batch) != 1 || batch[0].N != 1 || batch[0].Partial {
			t.Fatalf("request %+v, want one permit, all or nothing", batch)
		}
	}
	if takes, _, _ := e.st.counts(b.Key); takes != 25 {
		t.Fatalf("%d Take calls for 25 sequential calls", takes)
	}
	e.clk.Advance(time.Hour)
	if r := l.acq(bg, 1); !r.Admitted {
		t.Fatalf("an hour later: %+v", r)
	}
}

// TestStrictCoalesce: concurrent strict calls share Take round trips: while
// one Take is under way the others queue, and the next Take carries them
// all.
func TestStrictCoalesce(t *testing.T) {
	e := newEnv(t, Config{})
	b := cluster.Budget{Key: "posts", Algorithm: cluster.TokenBucket, Limit: 50, Interval: time.Hour}
	l := e.limiter(t, Spec{Budget: b, Strict: true})
	e.st.set(gated)
	const g = 64
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for i := 0; i < g; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := l.acq(bg, 1)
			if r.Fallback() {
				t.Errorf("%+v", r)
			}
			if r.Admitted {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		}()
	}
	e.blockUntil(t, g+1) // every caller's deadline, and the first Take's
	e.st.open()
	wg.Wait()
	if admitted != 50 {
		t.Fatalf("admitted %d, want 50", admitted)
	}
	reqs := e.st.requests()
	n := 0
	for _, batch := range reqs {
		n += len(batch)
	}
	if len(reqs) > 2 || n != g {
		t.Fatalf("%d Take calls carrying %d requests, want at most 2 carrying %d", len(reqs), n, g)
	}
}

// TestStrictPacing: a strict Pacing budget returns the Store's wait.
func TestStrictPacing(t *testing.T) {
	e := newEnv(t, Config{})
	b := cluster.Budget{Key: "sp", Algorithm: cluster.Pacing, Limit: 10, Interval: time.Second, MaxQueue: 250 * time.Millisecond}
	l := e.limiter(t, Spec{Budget: b, Strict: true})
	for i := 0; i < 3; i++ {
		if r := l.acq(bg, 1); !r.Admitted || r.Wait != time.Duration(i)*100*time.Millisecond {
			t.Fatalf("call %d: %+v", i, r)
		}
	}
	if r := l.acq(bg, 1); r.Admitted || r.RetryAfter != 50*time.Millisecond {
		t.Fatalf("4th call: %+v, want refused, retry after 50ms", r)
	}
}

// TestAsk: Manager.Ask decides one budget without a Limiter: the Store's
// answer, or ByFallback (not admitted, for the caller's own policy) when
// the Store fails, from the first failure on, with probes queued while in
// Fallback; a cancelled wait is ByContext.
func TestAsk(t *testing.T) {
	e := newEnv(t, Config{ProbeInterval: time.Second})
	b := cluster.Budget{Key: "user:1", Algorithm: cluster.TokenBucket, Limit: 3, Interval: time.Minute}
	now := e.clk.Nanotime
	for i := 0; i < 3; i++ {
		if r := e.m.Ask(bg, b, now(), 1); !r.Admitted || r.By != ByStore {
			t.Fatalf("ask %d: %+v", i, r)
		}
	}
	if r := e.m.Ask(bg, b, now(), 1); r.Admitted || r.By != ByStore || r.RetryAfter != 20*time.Second {
		t.Fatalf("4th ask: %+v, want the store's refusal, retry after 20s", r)
	}
	if r := e.m.Ask(bg, b, now(), 0); r.Admitted {
		t.Fatalf("n = 0 counts as 1: %+v", r)
	}
	e.st.set(fail)
	if r := e.m.Ask(bg, b, now(), 1); r.Admitted || r.By != ByFallback {
		t.Fatalf("failing store: %+v, want ByFallback", r)
	}
	if e.m.Mode() != Fallback {
		t.Fatal("no fallback after the first failure")
	}
	e.st.set(answer)
	if r := e.m.Ask(bg, b, now(), 1); r.By != ByFallback {
		t.Fatalf("in fallback before the probe interval: %+v", r)
	}
	e.clk.Advance(time.Second)
	e.m.Ask(bg, b, now(), 1) // queues the probe
	e.m.waitIdle()
	if e.m.Mode() != Remote {
		t.Fatal("the probe did not bring the store back")
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	e.st.set(hang)
	if r := e.m.Ask(ctx, b, now(), 1); r.By != ByContext {
		t.Fatalf("cancelled: %+v", r)
	}
}
