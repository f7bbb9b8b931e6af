package lease

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/sluicetest"
)

var bg = context.Background()

// env is a Manager on a memStore, both on one manual clock.
type env struct {
	clk *sluicetest.ManualClock
	st  *memStore
	m   *Manager
}

func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	e := &env{clk: sluicetest.NewManualClock(0)}
	e.st = newMemStore(e.clk)
	if cfg.Store == nil {
		cfg.Store = e.st
	}
	cfg.Clock = e.clk
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.m = m
	t.Cleanup(func() {
		e.st.release()
		_ = m.Close()
	})
	return e
}

func (e *env) limiter(t *testing.T, s Spec) *Limiter {
	t.Helper()
	l, err := e.m.NewLimiter(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// blockUntil waits until n timers are pending on the clock: goroutines
// parked on it.
func (e *env) blockUntil(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	if err := e.clk.BlockUntil(ctx, n); err != nil {
		t.Fatalf("waiting for %d timers: %v (have %d)", n, err, e.clk.Waiters())
	}
}

func bucket(key string, limit float64) cluster.Budget {
	return cluster.Budget{Key: key, Algorithm: cluster.TokenBucket, Limit: limit, Interval: time.Second}
}

func window(key string, limit float64) cluster.Budget {
	return cluster.Budget{Key: key, Algorithm: cluster.SlidingWindow, Limit: limit, Interval: time.Second}
}

// acquire calls l.acq(1) count times, one after the other, and returns
// how many were admitted. Every refusal must say when to retry and no
// decision may come from the fallback.
func acquire(t *testing.T, l *Limiter, count int) int {
	t.Helper()
	admitted := 0
	for i := 0; i < count; i++ {
		r := l.acq(bg, 1)
		if r.By != ByStore {
			t.Fatalf("call %d: %+v, want a Store decision", i, r)
		}
		if r.Admitted {
			admitted++
		} else if r.RetryAfter <= 0 {
			t.Fatalf("call %d refused without RetryAfter: %+v", i, r)
		}
	}
	return admitted
}

// TestLeaseExactCount: on a frozen clock a budget of 100 admits exactly
// 100 of 150 calls, through several leases, and the Store granted exactly
// those 100.
func TestLeaseExactCount(t *testing.T) {
	for _, b := range []cluster.Budget{bucket("tb", 100), window("sw", 100)} {
		t.Run(b.Algorithm.String(), func(t *testing.T) {
			e := newEnv(t, Config{})
			l := e.limiter(t, Spec{Budget: b})
			if got := acquire(t, l, 150); got != 100 {
				t.Fatalf("admitted %d, want 100", got)
			}
			e.m.waitIdle()
			takes, granted, _ := e.st.counts(b.Key)
			if granted != 100 {
				t.Fatalf("store granted %d, want 100", granted)
			}
			if l.held() != 0 {
				t.Fatalf("held %d after the budget ran out", l.held())
			}
			if s := l.Stats(); s.Refills < 3 || int64(takes) != s.Refills {
				t.Fatalf("stats %+v with %d Take calls: want several leases, one Take each", s, takes)
			}
			// Refusals while the Store is dry cost no round trip.
			before := takes
			acquire(t, l, 100)
			if takes, _, _ = e.st.counts(b.Key); takes != before {
				t.Fatalf("%d Take calls for refusals while dry", takes-before)
			}
		})
	}
}

// TestLeaseSingleRefill: 64 goroutines that find the lease empty share one
// Take; none sends its own.
func TestLeaseSingleRefill(t *testing.T) {
	e := newEnv(t, Config{})
	l := e.limiter(t, Spec{Budget: bucket("big", 1e6)})
	e.st.set(gated)
	const g = 64
	var wg sync.WaitGroup
	results := make([]Result, g)
	for i := 0; i < g; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			results[i] = l.acq(bg, 1)
		}(i)
	}
	// Every caller waits on its deadline timer, and the Take on its
	// context's: 65 timers once all are parked.
	e.blockUntil(t, g+1)
	e.st.waitTakeCalls(t, 1)
	if takes, _, _ := e.st.counts("big"); takes != 1 {
		t.Fatalf("%d Take calls while %d callers wait, want 1", takes, g)
	}
	e.st.open()
	wg.Wait()
	for i, r := range results {
		if !r.Admitted || r.Fallback() {
			t.Fatalf("caller %d: %+v", i, r)
		}
	}
	e.m.waitIdle()
	if takes, _, _ := e.st.counts("big"); takes != 1 {
		t.Fatalf("%d Take calls in all, want 1", takes)
	}
	if s := l.Stats(); s.Waits != g || s.Refills != 1 {
		t.Fatalf("stats %+v, want %d waits on 1 refill", s, g)
	}
}

// TestLeasePrefetch: at a steady rate the next lease is taken when the
// current one falls to its low-water mark, so after the first call no
// caller ever waits.
func TestLeasePrefetch(t *testing.T) {
	e := newEnv(t, Config{})
	l := e.limiter(t, Spec{Budget: bucket("steady", 1000)})
	const calls = 2000 // one per ms for 2 s: the budget's full rate
	for i := 0; i < calls; i++ {
		e.clk.Advance(time.Millisecond)
		if r := l.acq(bg, 1); !r.Admitted || r.Fallback() {
			t.Fatalf("call %d at %v: %+v", i, e.clk.Elapsed(), r)
		}
		e.m.waitIdle() // the round trip is much shorter than 1 ms
	}
	s := l.Stats()
	if s.Waits != 1 {
		t.Fatalf("%d waits, want only the first call's: %+v", s.Waits, s)
	}
	if s.Prefetches != s.Refills-1 || s.Refills < 30 || s.Refills > 50 {
		t.Fatalf("stats %+v: want about one prefetched 50-permit lease per 50 ms", s)
	}
	if s.Expired != 0 {
		t.Fatalf("%d permits expired at a steady rate", s.Expired)
	}
}

// TestLeaseAdapts: the lease is about 50 ms of the instance's own demand,
// measured on the injected clock.
func TestLeaseAdapts(t *testing.T) {
	e := newEnv(t, Config{})
	b := bucket("adapt", 1e5)
	l := e.limiter(t, Spec{Budget: b})
	run := func(perMs int, ms int) {
		for i := 0; i < ms; i++ {
			e.clk.Advance(time.Millisecond)
			if got := acquire(t, l, perMs); got != perMs {
				t.Fatalf("admitted %d of %d", got, perMs)
			}
			e.m.waitIdle()
		}
	}
	lastN := func() int64 {
		r := e.st.requests()
		return r[len(r)-1][0].N
	}
	run(1, 500)
	if n := lastN(); n < 45 || n > 55 {
		t.Fatalf("lease of %d at 1/ms, want about 50", n)
	}
	run(20, 500)
	if n := lastN(); n < 900 || n > 1100 {
		t.Fatalf("lease of %d at 20/ms, want about 1000", n)
	}
	run(1, 500)
	if n := lastN(); n < 45 || n > 55 {
		t.Fatalf("lease of %d back at 1/ms, want about 50", n)
	}
}

// TestLeaseCap: with N live instances a lease is at most T/(2N) permits,
// whatever the demand.
func TestLeaseCap(t *testing.T) {
	e := newEnv(t, Config{})
	l := e.limiter(t, Spec{Budget: bucket("cap", 1000)})
	check := func(live int, want int64) {
		t.Helper()
		e.m.SetLive(live)
		seen := len(e.st.requests())
		acquire(t, l, 400)
		e.m.waitIdle()
		var most int64
		for _, batch := range e.st.requests()[seen:] {
			for _, r := range batch {
				most = max(most, r.N)
			}
		}
		if most != want {
			t.Fatalf("live %d: largest lease %d, want the cap %d", live, most, want)
		}
		e.clk.Advance(time.Second) // refill the bucket
	}
	check(5, 100)
	check(10, 50)
	check(1000, 1) // floor(1000/2000) is 0: a lease is at least 1
}

// TestLeaseGiveBack: unused permits go back when the Limiter is closed (a
// rule change or removal) and when the Manager closes.
func TestLeaseGiveBack(t *testing.T) {
	e := newEnv(t, Config{})
	b := bucket("give", 100)
	l := e.limiter(t, Spec{Budget: b})
	acquire(t, l, 1)
	e.m.waitIdle()
	if got := e.st.tokens(b); got != 95 {
		t.Fatalf("store has %v tokens after a 5-permit lease, want 95", got)
	}
	l.Close()
	e.m.waitIdle()
	if got := e.st.tokens(b); got != 99 {
		t.Fatalf("store has %v tokens after Close, want 99", got)
	}
	if r := l.acq(bg, 1); !r.Fallback() {
		t.Fatalf("closed limiter: %+v, want a fallback decision", r)
	}

	// A rule change: the old limiter goes, a new one takes over.
	l2 := e.limiter(t, Spec{Budget: b})
	acquire(t, l2, 3)
	e.m.waitIdle()
	held := l2.held()
	if held == 0 {
		t.Fatal("no lease held")
	}
	before := e.st.tokens(b)
	if err := e.m.Close(); err != nil {
		t.Fatal(err)
	}
	if got := e.st.tokens(b); got != before+float64(held) {
		t.Fatalf("store has %v tokens after Manager.Close, want %v + %d", got, before, held)
	}
	if _, err := e.m.NewLimiter(Spec{Budget: b}); err == nil {
		t.Fatal("NewLimiter after Close succeeded")
	}
}

// TestLeaseExpiry: a sliding-window lease's unused permits go back after
// its lifetime (Interval/10), or are dropped once their grant has left the
// window.
func TestLeaseExpiry(t *testing.T) {
	e := newEnv(t, Config{})
	b := window("exp", 100)
	l := e.limiter(t, Spec{Budget: b})
	acquire(t, l, 1) // a lease of 5
	e.m.waitIdle()
	e.clk.Advance(99 * time.Millisecond)
	acquire(t, l, 1) // still within the lifetime
	e.m.waitIdle()
	if _, _, given := e.st.counts("exp"); given != 0 {
		t.Fatalf("gave %d back before the lease expired", given)
	}
	e.clk.Advance(time.Millisecond)
	acquire(t, l, 1) // expired: 3 go back, a new lease comes
	e.m.waitIdle()
	if _, _, given := e.st.counts("exp"); given != 3 {
		t.Fatalf("gave %d back at expiry, want 3", given)
	}
	if s := l.Stats(); s.Expired != 3 {
		t.Fatalf("stats %+v, want 3 expired", s)
	}
	held := l.held()
	e.clk.Advance(time.Second)
	acquire(t, l, 1)
	e.m.waitIdle()
	if _, _, given := e.st.counts("exp"); given != 3 {
		t.Fatalf("gave back permits of a grant older than the window (%d given)", given)
	}
	if d := e.m.Stats().Dropped; d != held {
		t.Fatalf("dropped %d, want the %d held", d, held)
	}
}

// TestPacingLease: permits of a Pacing lease are due one step apart, the
// schedule continues across leases, and a permit due beyond MaxQueue is
// refused with the time until it would fit: the decisions one GCRA would
// make.
func TestPacingLease(t *testing.T) {
	e := newEnv(t, Config{})
	b := cluster.Budget{Key: "pace", Algorithm: cluster.Pacing, Limit: 100, Interval: time.Second, MaxQueue: 100 * time.Millisecond}
	l := e.limiter(t, Spec{Budget: b})
	for i := 0; i <= 10; i++ {
		r := l.acq(bg, 1)
		if want := time.Duration(i) * 10 * time.Millisecond; !r.Admitted || r.Wait != want {
			t.Fatalf("call %d: %+v, want admitted after %v", i, r, want)
		}
		e.m.waitIdle()
	}
	if r := l.acq(bg, 1); r.Admitted || r.RetryAfter != 10*time.Millisecond {
		t.Fatalf("12th call: %+v, want refused, retry after 10ms", r)
	}
	e.clk.Advance(10 * time.Millisecond)
	if r := l.acq(bg, 1); !r.Admitted || r.Wait != 100*time.Millisecond {
		t.Fatalf("after 10ms: %+v, want admitted after 100ms", r)
	}
	e.m.waitIdle()
	for _, batch := range e.st.requests() {
		if n := batch[0].N; n > 5 {
			t.Fatalf("lease of %d, over the cap of min(100, 100ms/10ms+1)/2 = 5", n)
		}
	}
	// Unclaimed permits not yet due go back.
	held := l.held()
	l.Close()
	e.m.waitIdle()
	if _, _, given := e.st.counts("pace"); given != held || held == 0 {
		t.Fatalf("gave back %d, held %d", given, held)
	}
}

// TestPacingStale: permits due more than the lifetime ago are skipped,
// never used late.
func TestPacingStale(t *testing.T) {
	e := newEnv(t, Config{})
	b := cluster.Budget{Key: "stale", Algorithm: cluster.Pacing, Limit: 100, Interval: time.Second, MaxQueue: time.Second}
	l := e.limiter(t, Spec{Budget: b}) // lifetime 100ms
	if r := l.acq(bg, 1); !r.Admitted || r.Wait != 0 {
		t.Fatalf("first call: %+v", r)
	}
	e.m.waitIdle()
	// Permits due at 10, 20, 30, 40 ms are left. At 125 ms those due at 10
	// and 20 ms are more than 100 ms late: the next used is the one due at
	// 30 ms, and one is left.
	e.clk.Advance(125 * time.Millisecond)
	if r := l.acq(bg, 1); !r.Admitted || r.Wait != 0 {
		t.Fatalf("at 125ms: %+v", r)
	}
	if h := l.held(); h != 1 {
		t.Fatalf("held %d after skipping two stale permits, want 1", h)
	}
}

// TestLeaseLargeRequest: a request for more than the Store can give is
// refused after one round trip, not left to the fallback.
func TestLeaseLargeRequest(t *testing.T) {
	e := newEnv(t, Config{})
	l := e.limiter(t, Spec{Budget: bucket("large", 100)})
	if r := l.acq(bg, 60); !r.Admitted || r.By != ByStore {
		t.Fatalf("60 of 100: %+v", r)
	}
	if r := l.acq(bg, 60); r.Admitted || r.By != ByStore || r.RetryAfter <= 0 {
		t.Fatalf("60 more: %+v, want refused by the Store with a RetryAfter", r)
	}
	e.m.waitIdle()
	if takes, _, _ := e.st.counts("large"); takes != 2 {
		t.Fatalf("%d Take calls, want 2", takes)
	}
}

// TestLeaseConcurrent: eight goroutines share one Limiter, round after
// round, while the clock moves between rounds and leases come, expire and
// go; no permit is used twice or lost track of.
func TestLeaseConcurrent(t *testing.T) {
	e := newEnv(t, Config{})
	b := window("conc", 4000)
	l := e.limiter(t, Spec{Budget: b})
	const g, per = 8, 10
	var admitted atomic.Int64
	for round := 0; round < 300; round++ {
		var wg sync.WaitGroup
		for i := 0; i < g; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; k < per; k++ {
					if r := l.acq(bg, 1); r.By != ByStore {
						t.Errorf("%+v", r)
					} else if r.Admitted {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		// Let a refill in flight land before time moves: on a busy host it
		// may not have run yet, and moving the clock past its deadline
		// would send the next callers to the fallback.
		e.m.waitIdle()
		e.clk.Advance(time.Duration(1+round%7*5) * time.Millisecond)
	}
	l.Close()
	e.m.waitIdle()
	_, granted, given := e.st.counts(b.Key)
	dropped := e.m.Stats().Dropped
	if granted != admitted.Load()+given+dropped {
		t.Fatalf("granted %d != admitted %d + given %d + dropped %d", granted, admitted.Load(), given, dropped)
	}
	t.Logf("granted %d, admitted %d, given %d, dropped %d, %+v", granted, admitted.Load(), given, dropped, l.Stats())
	if s := l.Stats(); s.Refills < 10 || s.Expired == 0 || admitted.Load() < 10000 || admitted.Load() == g*per*300 {
		t.Fatalf("admitted %d, %+v: want many leases, some expired, some refusals", admitted.Load(), s)
	}
}

// TestValidation: bad configurations and specs are refused with errors
// prefixed "sluice: ".
func TestValidation(t *testing.T) {
	if _, err := New(Config{}); err == nil || !strings.HasPrefix(err.Error(), "sluice: ") {
		t.Fatalf("New without a Store: %v", err)
	}
	e := newEnv(t, Config{})
	ok := bucket("ok", 10)
	bad := []Spec{
		{Budget: cluster.Budget{Algorithm: cluster.TokenBucket, Limit: 1, Interval: time.Second}},
		{Budget: cluster.Budget{Key: "k", Limit: 1, Interval: time.Second}},
		{Budget: cluster.Budget{Key: "k", Algorithm: cluster.TokenBucket, Interval: time.Second}},
		{Budget: cluster.Budget{Key: "k", Algorithm: cluster.TokenBucket, Limit: 1}},
		{Budget: cluster.Budget{Key: "k", Algorithm: cluster.TokenBucket, Limit: 1, Interval: time.Second, Burst: -1}},
		{Budget: ok, LocalLimit: -1},
		{Budget: ok, Lifetime: -1},
		{Budget: ok, Fallback: 9},
	}
	for _, s := range bad {
		if _, err := e.m.NewLimiter(s); err == nil || !strings.HasPrefix(err.Error(), "sluice: ") {
			t.Fatalf("NewLimiter(%+v): %v", s, err)
		}
	}
	for _, s := range []fmt.Stringer{Remote, Fallback, FallbackLocal, FallbackPass, FallbackBlock, ByStore, ByFallback, ByContext} {
		if s.String() == "unknown" {
			t.Fatalf("%#v has no name", s)
		}
	}
}
