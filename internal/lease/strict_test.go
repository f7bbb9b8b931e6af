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

// TestStrictCoalesce: concurrent strict calls share Take round trips: the
// first caller sends its own request in the lone lane; the second, queued,
// starts the store goroutine, whose Take carries it; the others queue
// while those two are under way, and the store goroutine's next Take
// carries them all.
func TestStrictCoalesce(t *testing.T) {
	e := newEnv(t, Config{})
	b := cluster.Budget{Key: "posts", Algorithm: cluster.TokenBucket, Limit: 50, Interval: time.Hour}
	l := e.limiter(t, Spec{Budget: b, Strict: true})
	e.st.set(gated)
	const g = 64
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	start := func() {
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
	start()
	e.st.waitTakeCalls(t, 1) // the lone lane
	start()
	e.st.waitTakeCalls(t, 2) // the store goroutine, beside it
	for i := 2; i < g; i++ {
		start()
	}
	e.blockUntil(t, g+1) // both Takes' deadlines, every queued caller's
	e.st.open()
	wg.Wait()
	if admitted != 50 {
		t.Fatalf("admitted %d, want 50", admitted)
	}
	e.m.waitIdle()
	reqs := e.st.requests()
	n := 0
	for _, batch := range reqs {
		n += len(batch)
	}
	if len(reqs) != 3 || len(reqs[0]) != 1 || len(reqs[1]) != 1 || len(reqs[2]) != g-2 {
		t.Fatalf("%d Take calls carrying %d requests, want two with 1 then one with %d", len(reqs), n, g-2)
	}
	if st := e.m.Stats(); st.Takes != 3 || st.Requests != g || st.TakeErrors != 0 {
		t.Fatalf("stats %+v", st)
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

// TestChargeAndAsk: the charge goes in the same Take as the request,
// ahead of it, partial and spent; a charge larger than the bucket takes
// what it holds and the request is refused; a failing store decides
// neither.
func TestChargeAndAsk(t *testing.T) {
	e := newEnv(t, Config{ProbeInterval: time.Second})
	b := cluster.Budget{Key: "user:1", Algorithm: cluster.TokenBucket, Limit: 5, Interval: time.Minute}
	now := e.clk.Nanotime
	if r := e.m.ChargeAndAsk(bg, b, now(), 1, 2); !r.Admitted || r.By != ByStore {
		t.Fatalf("charge 2, ask 1 of 5: %+v", r)
	}
	if st := e.m.Stats(); st.Takes != 1 || st.Requests != 2 || st.Paid != 2 {
		t.Fatalf("stats %+v, want one Take of two requests, 2 paid", st)
	}
	// 2 left: a charge of 10 takes them, and the request finds nothing.
	if r := e.m.ChargeAndAsk(bg, b, now(), 1, 10); r.Admitted || r.By != ByStore {
		t.Fatalf("charge 10, ask 1 of 2: %+v, want the store's refusal", r)
	}
	if st := e.m.Stats(); st.Paid != 4 {
		t.Fatalf("paid %d, want 4", st.Paid)
	}
	if r := e.m.ChargeAndAsk(bg, b, now(), 1, 0); r.Admitted {
		t.Fatalf("no charge is Ask: %+v", r)
	}
	e.st.set(fail)
	if r := e.m.ChargeAndAsk(bg, b, now(), 1, 1); r.Admitted || r.By != ByFallback {
		t.Fatalf("failing store: %+v, want ByFallback", r)
	}
	if st := e.m.Stats(); st.Paid != 4 {
		t.Fatalf("paid %d after a failed Take, want 4", st.Paid)
	}
}

// TestStrictAloneDirect: a strict caller that finds no Store call under way
// sends its request itself, under its own context (the Store sees the
// caller's values), one Take per call, with no store goroutine; the
// Manager is idle as soon as the call returns.
func TestStrictAloneDirect(t *testing.T) {
	e := newEnv(t, Config{})
	b := cluster.Budget{Key: "alone", Algorithm: cluster.TokenBucket, Limit: 3, Interval: time.Minute}
	l := e.limiter(t, Spec{Budget: b, Strict: true})
	for i := 0; i < 5; i++ {
		ctx := context.WithValue(bg, callerKey{}, i)
		r := l.acq(ctx, 1)
		if want := i < 3; r.Admitted != want || r.Fallback() {
			t.Fatalf("call %d: %+v, want admitted %v by the store", i, r, want)
		}
		e.m.mu.Lock()
		working, alone := e.m.working, e.m.alone
		e.m.mu.Unlock()
		if working || alone {
			t.Fatalf("call %d: store goroutine %v, lone lane held %v after the call returned", i, working, alone)
		}
	}
	callers := e.st.takeCallers()
	if len(callers) != 5 {
		t.Fatalf("%d Take calls, want 5", len(callers))
	}
	for i, c := range callers {
		if c != i {
			t.Fatalf("Take %d ran under the context of caller %v, want %d's", i, c, i)
		}
	}
	if st := e.m.Stats(); st.Takes != 5 || st.Requests != 5 || st.TakeErrors != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Ask without a Limiter takes the same path.
	if r := e.m.Ask(context.WithValue(bg, callerKey{}, "ask"), b, e.clk.Nanotime(), 1); r.Admitted || r.By != ByStore {
		t.Fatalf("ask: %+v, want the store's refusal", r)
	}
	if c := e.st.takeCallers(); c[len(c)-1] != "ask" {
		t.Fatalf("Ask's Take ran under %v", c[len(c)-1])
	}
}

// TestStrictQueued: two strict callers go concurrently, one in the lone
// lane on its own goroutine, the other on the store goroutine (under no
// caller's context), started at once; callers that arrive while both are
// under way queue and share the store goroutine's next Take, with a lease
// refill queued meanwhile.
func TestStrictQueued(t *testing.T) {
	e := newEnv(t, Config{})
	b := cluster.Budget{Key: "q", Algorithm: cluster.TokenBucket, Limit: 1000, Interval: time.Second}
	s := e.limiter(t, Spec{Budget: b, Strict: true})
	l := e.limiter(t, Spec{Budget: bucket("lease", 1000)})
	e.st.set(gated)
	first := make(chan Result)
	go func() { first <- s.acq(context.WithValue(bg, callerKey{}, "first"), 1) }()
	e.st.waitTakeCalls(t, 1)
	second := make(chan Result)
	go func() { second <- s.acq(context.WithValue(bg, callerKey{}, "second"), 1) }()
	e.st.waitTakeCalls(t, 2) // both under way at once
	const g = 8
	results := make(chan Result, g+1)
	for i := 0; i < g; i++ {
		go func() { results <- s.acq(context.WithValue(bg, callerKey{}, "queued"), 1) }()
	}
	go func() { results <- l.acq(bg, 1) }()
	e.blockUntil(t, 2+1+g+1) // two Takes' deadlines, the second's and g+1 callers' waits
	e.st.open()
	for _, ch := range []chan Result{first, second} {
		if r := <-ch; !r.Admitted || r.Fallback() {
			t.Fatalf("first two: %+v", r)
		}
	}
	for i := 0; i < g+1; i++ {
		if r := <-results; !r.Admitted || r.Fallback() {
			t.Fatalf("queued: %+v", r)
		}
	}
	e.m.waitIdle()
	reqs, callers := e.st.requests(), e.st.takeCallers()
	if len(reqs) != 3 || len(reqs[0]) != 1 || len(reqs[1]) != 1 || len(reqs[2]) != g+1 {
		t.Fatalf("Take calls %v, want two with 1 request then one with %d", reqs, g+1)
	}
	if callers[0] != "first" || callers[1] != nil || callers[2] != nil {
		t.Fatalf("Take contexts %v, want the first caller's, then the store goroutine's", callers)
	}
}

// TestStrictQueuedCallerDeadline: a queued strict caller whose context ends
// leaves at once; the grant its request got later goes back to the Store.
func TestStrictQueuedCallerDeadline(t *testing.T) {
	e := newEnv(t, Config{})
	b := bucket("qc", 100)
	l := e.limiter(t, Spec{Budget: b, Strict: true})
	e.st.set(gated)
	first := make(chan Result)
	go func() { first <- l.acq(bg, 1) }()
	e.st.waitTakeCalls(t, 1)
	ctx, cancel := context.WithCancel(bg)
	done := make(chan Result)
	go func() { done <- l.acq(ctx, 1) }()
	e.blockUntil(t, 2) // the first Take's deadline and the queued caller's
	cancel()
	if r := <-done; r.Admitted || r.Fallback() || r.By != ByContext {
		t.Fatalf("%+v, want refused with context.Canceled", r)
	}
	e.st.open()
	if r := <-first; !r.Admitted {
		t.Fatalf("first: %+v", r)
	}
	e.m.waitIdle()
	if _, granted, given := e.st.counts("qc"); granted != 2 || given != 1 {
		t.Fatalf("granted %d, given back %d; want 2 and 1", granted, given)
	}
	if e.m.Mode() != Remote {
		t.Fatalf("mode %v", e.m.Mode())
	}
}

// TestStrictQueuedTimeout: a lone caller's Take and the store goroutine's
// beside it both hang: both callers return at the Timeout, decided by the
// fallback, and the two failed Takes switch to Fallback once.
func TestStrictQueuedTimeout(t *testing.T) {
	var trs transitions
	e := newEnv(t, Config{OnTransition: trs.add, TripAfter: 1})
	l := e.limiter(t, Spec{Budget: bucket("qt", 100), Strict: true})
	e.st.set(hang)
	var wg sync.WaitGroup
	rs := make([]Result, 2)
	wg.Add(1)
	go func() { defer wg.Done(); rs[0] = l.acq(bg, 1) }()
	e.st.waitTakeCalls(t, 1)
	wg.Add(1)
	go func() { defer wg.Done(); rs[1] = l.acq(bg, 1) }()
	e.st.waitTakeCalls(t, 2)
	e.blockUntil(t, 3) // two Takes' deadlines, the second caller's wait
	e.clk.Advance(DefaultTimeout)
	wg.Wait()
	for i, r := range rs {
		if !r.Fallback() || !r.Admitted {
			t.Fatalf("caller %d: %+v, want admitted by the fallback", i, r)
		}
	}
	if e.clk.Elapsed() != DefaultTimeout {
		t.Fatalf("returned at %v", e.clk.Elapsed())
	}
	e.m.waitIdle()
	if got := trs.modes(); got != "remote>fallback" {
		t.Fatalf("transitions %q", got)
	}
	if st := e.m.Stats(); st.Takes != 2 || st.TakeErrors != 2 {
		t.Fatalf("stats %+v, want two failed Takes", st)
	}
	// The lone caller's Take passed its deadline: a timeout. The queued
	// caller's deadline fired at the same instant as the failure's answer
	// to its request, and either may have woken it.
	if st := l.Stats(); st.Timeouts < 1 || st.Timeouts > 2 {
		t.Fatalf("limiter stats %+v, want 1 or 2 timeouts", st)
	}
}

// TestStaleFailureKeepsRecovery: a lone caller's Take that started before
// a switch to Fallback and a recovery fails after both: the failure is
// older than the recovery and does not switch the mode again.
func TestStaleFailureKeepsRecovery(t *testing.T) {
	var trs transitions
	e := newEnv(t, Config{OnTransition: trs.add, Timeout: 10 * time.Second, ProbeInterval: time.Second})
	l := e.limiter(t, Spec{Budget: bucket("sf", 100), Strict: true})
	e.st.set(hang)
	lone := make(chan Result)
	go func() { lone <- l.acq(bg, 1) }()
	e.st.waitTakeCalls(t, 1)
	e.st.set(fail)
	if r := l.acq(bg, 1); !r.Fallback() { // the store goroutine's Take fails
		t.Fatalf("%+v, want decided by the fallback", r)
	}
	if e.m.Mode() != Fallback {
		t.Fatalf("mode %v after a failed Take", e.m.Mode())
	}
	e.st.set(answer)
	e.blockUntil(t, 1) // the lone Take's deadline
	e.clk.Advance(time.Second)
	l.acq(bg, 1) // due: a probe runs behind it, and succeeds
	for deadline := time.Now().Add(30 * time.Second); e.m.Mode() != Remote; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no recovery")
		}
	}
	e.clk.Advance(9 * time.Second) // the lone Take's deadline
	if r := <-lone; !r.Fallback() {
		t.Fatalf("lone caller: %+v, want decided by the fallback", r)
	}
	e.m.waitIdle()
	if e.m.Mode() != Remote {
		t.Fatalf("mode %v: the stale failure switched it", e.m.Mode())
	}
	if got := trs.modes(); got != "remote>fallback fallback>remote" {
		t.Fatalf("transitions %q", got)
	}
	if r := l.acq(bg, 1); r.Fallback() || !r.Admitted {
		t.Fatalf("%+v after recovery", r)
	}
}
