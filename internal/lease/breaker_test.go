package lease

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/cluster"
)

// transitions records a Manager's transitions.
type transitions struct {
	mu  sync.Mutex
	got []Transition
}

func (r *transitions) add(tr Transition) {
	r.mu.Lock()
	r.got = append(r.got, tr)
	r.mu.Unlock()
}

func (r *transitions) list() []Transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Transition(nil), r.got...)
}

// modes returns the From→To pairs seen, e.g. "remote>fallback fallback>remote".
func (r *transitions) modes() string {
	s := ""
	for i, tr := range r.list() {
		if i > 0 {
			s += " "
		}
		s += tr.From.String() + ">" + tr.To.String()
	}
	return s
}

// TestFallbackOnFailure: the first failed Take switches to fallback at once;
// the call that met it is decided by the fallback, later calls go to the
// fallback without touching the Store.
func TestFallbackOnFailure(t *testing.T) {
	for _, strict := range []bool{false, true} {
		t.Run(map[bool]string{false: "lease", true: "strict"}[strict], func(t *testing.T) {
			var trs transitions
			e := newEnv(t, Config{OnTransition: trs.add})
			l := e.limiter(t, Spec{Budget: bucket("f", 100), Strict: strict})
			e.st.set(fail)
			r := l.acq(bg, 1)
			if !r.Admitted || !r.Fallback() {
				t.Fatalf("%+v, want admitted by the local fallback", r)
			}
			if e.m.Mode() != Fallback {
				t.Fatalf("mode %v after a failed Take", e.m.Mode())
			}
			e.m.waitIdle()
			tr := trs.list()
			if len(tr) != 1 || tr[0].To != Fallback || !errors.Is(tr[0].Err, errDown) {
				t.Fatalf("transitions %+v", tr)
			}
			calls, _, _ := e.st.counts("f")
			for i := 0; i < 10; i++ {
				if r := l.acq(bg, 1); !r.Fallback() {
					t.Fatalf("%+v in fallback mode", r)
				}
			}
			e.m.waitIdle()
			if c, _, _ := e.st.counts("f"); c != calls {
				t.Fatalf("%d Take calls in fallback mode", c-calls)
			}
		})
	}
}

// TestFallbackDeadline: whatever the Store does (hangs, or answers after
// twice the timeout), a call returns after the Manager's Timeout, decided
// by the fallback, and the Manager is in fallback mode.
func TestFallbackDeadline(t *testing.T) {
	for _, b := range []behavior{hang, slow} {
		for _, strict := range []bool{false, true} {
			name := map[behavior]string{hang: "hang", slow: "slow"}[b] + map[bool]string{false: "-lease", true: "-strict"}[strict]
			t.Run(name, func(t *testing.T) {
				// TripAfter 1: the first late call switches (the default,
				// three in a row, is TestLateCallsInARow's).
				e := newEnv(t, Config{Timeout: 30 * time.Millisecond, TripAfter: 1})
				l := e.limiter(t, Spec{Budget: bucket("d", 100), Strict: strict})
				e.st.delay = 60 * time.Millisecond
				e.st.set(b)
				done := make(chan Result)
				go func() { done <- l.acq(bg, 1) }()
				timers := 2 // the caller's deadline and the Take's
				if strict {
					timers = 1 // the Take's: a lone strict caller makes it itself
				}
				if b == slow {
					timers++ // and the store's delay
				}
				e.blockUntil(t, timers)
				e.clk.Advance(30 * time.Millisecond)
				r := <-done
				if !r.Admitted || !r.Fallback() {
					t.Fatalf("%+v, want admitted by the fallback", r)
				}
				if e.clk.Elapsed() != 30*time.Millisecond {
					t.Fatalf("returned at %v", e.clk.Elapsed())
				}
				e.m.waitIdle()
				if e.m.Mode() != Fallback {
					t.Fatalf("mode %v after a Take past its deadline", e.m.Mode())
				}
			})
		}
	}
}

// TestSlowStoreWithinTimeout: a Store slower than usual but within the
// timeout still decides.
func TestSlowStoreWithinTimeout(t *testing.T) {
	e := newEnv(t, Config{Timeout: 30 * time.Millisecond})
	l := e.limiter(t, Spec{Budget: bucket("s", 100)})
	e.st.delay = 20 * time.Millisecond
	e.st.set(slow)
	done := make(chan Result)
	go func() { done <- l.acq(bg, 1) }()
	e.blockUntil(t, 3)
	e.clk.Advance(20 * time.Millisecond)
	if r := <-done; !r.Admitted || r.Fallback() {
		t.Fatalf("%+v, want admitted by the Store", r)
	}
	e.m.waitIdle()
	if e.m.Mode() != Remote {
		t.Fatalf("mode %v", e.m.Mode())
	}
}

// TestCallerDeadline: a caller whose context ends while it waits is
// refused with the context's error, and the Store is not blamed.
func TestCallerDeadline(t *testing.T) {
	for _, strict := range []bool{false, true} {
		t.Run(map[bool]string{false: "lease", true: "strict"}[strict], func(t *testing.T) {
			e := newEnv(t, Config{})
			b := bucket("c", 100)
			l := e.limiter(t, Spec{Budget: b, Strict: strict})
			e.st.set(gated)
			ctx, cancel := context.WithCancel(bg)
			done := make(chan Result)
			go func() { done <- l.acq(ctx, 1) }()
			if strict {
				e.blockUntil(t, 1) // its own Take's deadline: it is alone
			} else {
				e.blockUntil(t, 2)
			}
			cancel()
			r := <-done
			if r.Admitted || r.Fallback() || r.By != ByContext {
				t.Fatalf("%+v, want refused with context.Canceled", r)
			}
			e.st.open()
			e.m.waitIdle()
			if e.m.Mode() != Remote {
				t.Fatalf("mode %v", e.m.Mode())
			}
			if strict {
				// The lone caller's Take ended with its context and
				// decided nothing (the queued case is
				// TestStrictQueuedCallerDeadline).
				if _, granted, given := e.st.counts("c"); granted != 0 || given != 0 {
					t.Fatalf("granted %d, given back %d", granted, given)
				}
			}
		})
	}
}

// TestFallbackShare: the local fallback enforces threshold/live instances
// (or an explicit local limit) with the budget's algorithm; pass and block
// do what they say.
func TestFallbackShare(t *testing.T) {
	pace := cluster.Budget{Key: "p", Algorithm: cluster.Pacing, Limit: 100, Interval: time.Second, MaxQueue: 100 * time.Millisecond}
	cases := []struct {
		name string
		spec Spec
		want int
	}{
		{"bucket", Spec{Budget: bucket("b", 100)}, 25},
		{"window", Spec{Budget: window("w", 100)}, 25},
		{"pacing", Spec{Budget: pace}, 3}, // 40ms apart: 0, 40, 80ms within 100ms
		{"explicit", Spec{Budget: bucket("e", 100), LocalLimit: 10}, 10},
		{"explicit-burst", Spec{Budget: bucket("eb", 100), LocalLimit: 10, LocalBurst: 2}, 2},
		{"strict", Spec{Budget: window("s", 100), Strict: true}, 25},
		{"pass", Spec{Budget: bucket("pa", 100), Fallback: FallbackPass}, 40},
		{"block", Spec{Budget: bucket("bl", 100), Fallback: FallbackBlock}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, Config{})
			e.m.SetLive(4)
			e.st.set(fail)
			l := e.limiter(t, c.spec)
			admitted := 0
			for i := 0; i < 40; i++ {
				r := l.acq(bg, 1)
				if !r.Fallback() {
					t.Fatalf("%+v", r)
				}
				if r.Admitted {
					if c.name == "pacing" && r.Wait != time.Duration(admitted)*40*time.Millisecond {
						t.Fatalf("pacing fallback: wait %v for permit %d", r.Wait, admitted)
					}
					admitted++
				}
			}
			if admitted != c.want {
				t.Fatalf("admitted %d, want %d", admitted, c.want)
			}
		})
	}
	t.Run("refills", func(t *testing.T) {
		e := newEnv(t, Config{})
		e.m.SetLive(4)
		e.st.set(fail)
		l := e.limiter(t, Spec{Budget: bucket("r", 100)})
		for l.acq(bg, 1).Admitted {
		}
		e.clk.Advance(40 * time.Millisecond) // 25/s: one token
		if !l.acq(bg, 1).Admitted || l.acq(bg, 1).Admitted {
			t.Fatal("want exactly one token after 40ms")
		}
		e.m.SetLive(2) // the share doubles
		e.clk.Advance(20 * time.Millisecond)
		if !l.acq(bg, 1).Admitted {
			t.Fatal("want one token after 20ms at 50/s")
		}
	})
}

// TestProbeRecovery: while in fallback a probe goes out at most once per
// probe interval, from a request but without blocking it; when the Store
// answers, the Manager is back to Remote.
func TestProbeRecovery(t *testing.T) {
	var trs transitions
	e := newEnv(t, Config{OnTransition: trs.add, ProbeInterval: time.Second})
	l := e.limiter(t, Spec{Budget: bucket("pr", 100)})
	e.st.set(fail)
	l.acq(bg, 1)
	e.m.waitIdle()
	e.st.set(answer)
	for i := 0; i < 5; i++ { // not yet due
		if r := l.acq(bg, 1); !r.Fallback() {
			t.Fatalf("%+v", r)
		}
	}
	e.m.waitIdle()
	if p := e.m.Stats().Probes; p != 0 {
		t.Fatalf("%d probes before the interval", p)
	}
	e.st.set(fail)
	e.clk.Advance(time.Second)
	for i := 0; i < 5; i++ {
		if r := l.acq(bg, 1); !r.Fallback() {
			t.Fatalf("%+v", r)
		}
	}
	e.m.waitIdle()
	if p := e.m.Stats().Probes; p != 1 || e.m.Mode() != Fallback {
		t.Fatalf("%d probes, mode %v: want one failed probe", p, e.m.Mode())
	}
	e.st.set(answer)
	e.clk.Advance(time.Second)
	if r := l.acq(bg, 1); !r.Fallback() { // decided locally; the probe runs behind it
		t.Fatalf("%+v", r)
	}
	e.m.waitIdle()
	if e.m.Mode() != Remote {
		t.Fatalf("mode %v after a successful probe", e.m.Mode())
	}
	if r := l.acq(bg, 1); r.Fallback() || !r.Admitted {
		t.Fatalf("%+v after recovery", r)
	}
	if got := trs.modes(); got != "remote>fallback fallback>remote" {
		t.Fatalf("transitions %s", got)
	}
}

// TestListenerOrder: transitions reach the listener in order, outside the
// Manager's locks (the listener registers and closes a limiter, which
// takes them).
func TestListenerOrder(t *testing.T) {
	var trs transitions
	var e *env
	e = newEnv(t, Config{OnTransition: func(tr Transition) {
		if e.m.Mode() != tr.To {
			t.Errorf("listener sees mode %v during %v>%v", e.m.Mode(), tr.From, tr.To)
		}
		l, err := e.m.NewLimiter(Spec{Budget: bucket("x", 1)})
		if err != nil {
			t.Error(err)
		} else {
			l.Close()
		}
		trs.add(tr)
	}})
	l := e.limiter(t, Spec{Budget: bucket("o", 1e6), Strict: true})
	for i := 0; i < 3; i++ {
		e.st.set(fail)
		l.acq(bg, 1)
		e.m.waitIdle()
		e.st.set(answer)
		e.clk.Advance(time.Second)
		l.acq(bg, 1)
		e.m.waitIdle()
		if r := l.acq(bg, 1); r.Fallback() {
			t.Fatalf("cycle %d: %+v after recovery", i, r)
		}
		e.m.waitIdle()
	}
	want := "remote>fallback fallback>remote remote>fallback fallback>remote remote>fallback fallback>remote"
	if got := trs.modes(); got != want {
		t.Fatalf("transitions %s", got)
	}
	var at int64
	for _, tr := range trs.list() {
		if tr.At < at {
			t.Fatalf("transition times go back: %+v", trs.list())
		}
		at = tr.At
	}
}

// TestGiveFailure: a failed Give also switches to fallback, and leases
// held at the switch are dropped, not used.
func TestGiveFailure(t *testing.T) {
	e := newEnv(t, Config{})
	a := e.limiter(t, Spec{Budget: bucket("a", 1000)})
	b := e.limiter(t, Spec{Budget: bucket("b", 1000)})
	acquire(t, a, 1)
	acquire(t, b, 1)
	e.m.waitIdle()
	if a.held() == 0 || b.held() == 0 {
		t.Fatal("no leases")
	}
	e.st.set(fail)
	a.Close()
	e.m.waitIdle()
	if e.m.Mode() != Fallback || b.held() != 0 {
		t.Fatalf("mode %v, b holds %d", e.m.Mode(), b.held())
	}
	if r := b.acq(bg, 1); !r.Fallback() {
		t.Fatalf("%+v", r)
	}
}

// TestCloseLeavesNothing: on a hanging Store, callers return at the
// timeout, Close returns once the Store calls under way reach their
// deadline, and nothing is left running.
func TestCloseLeavesNothing(t *testing.T) {
	e := newEnv(t, Config{TripAfter: 1})
	l := e.limiter(t, Spec{Budget: bucket("z", 1000)})
	s := e.limiter(t, Spec{Budget: bucket("zs", 1000), Strict: true})
	acquire(t, l, 3)
	e.m.waitIdle()
	e.st.set(hang)
	calls, _, _ := e.st.counts("z")
	var wg sync.WaitGroup
	for i, x := range []*Limiter{s, l} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := x.acq(bg, 1e6); !r.Fallback() {
				t.Errorf("%+v", r)
			}
		}()
		if i == 0 {
			e.st.waitTakeCalls(t, calls+1) // the strict caller, alone, makes its Take
		}
	}
	// The strict caller's Take; the lease caller, waiting for its refill;
	// the store goroutine's Take carrying it, beside the strict one.
	e.blockUntil(t, 3)
	e.clk.Advance(DefaultTimeout)
	wg.Wait()
	e.m.waitIdle()
	if err := e.m.Close(); err != nil {
		t.Fatal(err)
	}

	// A Close whose Give hangs returns at the Give's deadline.
	e = newEnv(t, Config{})
	l = e.limiter(t, Spec{Budget: bucket("z", 1000)})
	acquire(t, l, 3)
	e.m.waitIdle()
	e.st.set(hang)
	closed := make(chan struct{})
	go func() {
		_ = e.m.Close()
		close(closed)
	}()
	e.blockUntil(t, 1)
	e.clk.Advance(DefaultTimeout)
	<-closed
	if st := e.m.Stats(); st.Dropped == 0 || st.Given != 0 {
		t.Fatalf("stats %+v: the hung Give's permits are dropped", st)
	}
	goleak.VerifyNone(t)
}
