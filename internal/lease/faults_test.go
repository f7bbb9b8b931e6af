package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/sluicetest"
)

// beats runs a Heartbeat on a manual clock and reads each beat's counts.
type beats struct {
	t     *testing.T
	e     *env
	st    *memStore
	h     *Heartbeat
	lives chan [3]int // live, share, source
}

func startBeats(t *testing.T, cfg HeartbeatConfig, b behavior, live int) *beats {
	t.Helper()
	clk := sluicetest.NewManualClock(0)
	st := newMemStore(clk)
	st.live = live
	st.set(b)
	bs := &beats{t: t, e: &env{clk: clk}, st: st, lives: make(chan [3]int, 1)}
	var last int
	cfg.Store, cfg.Clock, cfg.Member = st, clk, cluster.Member{ID: "i1", App: "shop"}
	cfg.OnLive = func(n int) { last = n }
	cfg.OnShare = func(n int, src Source) { bs.lives <- [3]int{last, n, int(src)} }
	h, err := StartHeartbeat(cfg)
	if err != nil {
		t.Fatal(err)
	}
	bs.h = h
	t.Cleanup(func() { st.release(); h.Close() })
	return bs
}

// next checks the counts of the next beat.
func (bs *beats) next(live, share int, src Source) {
	bs.t.Helper()
	got := <-bs.lives
	if want := [3]int{live, share, int(src)}; got != want {
		bs.t.Fatalf("beat at %v: live %d, share %d (%v), want %d, %d (%v)",
			bs.e.clk.Elapsed(), got[0], got[1], Source(got[2]), live, share, src)
	}
}

// tick moves the clock to the next beat.
func (bs *beats) tick() {
	bs.t.Helper()
	bs.e.blockUntil(bs.t, 1)
	bs.e.clk.Advance(time.Second)
}

// TestHeartbeatHoldsAfterRestart: a Store that restarted empty between two
// beats (no beat failed) counts only the members that beat since: 1, then
// 2. The live count stays at the 3 seen before for two TTLs (six beats of
// one second), then follows the Store. On the code before the hold, the
// count fell to 1 at once and local shares tripled.
func TestHeartbeatHoldsAfterRestart(t *testing.T) {
	// The default Expected: a Store that answers the first beat counts
	// the fleet at once.
	bs := startBeats(t, HeartbeatConfig{}, answer, 3)
	bs.next(3, 3, SourceCounted)
	bs.tick()
	bs.next(3, 3, SourceCounted)
	bs.st.live = 1 // restarted: this member alone has beaten since
	bs.tick()      // t=2s
	bs.next(3, 3, SourceHeld)
	bs.st.live = 2
	for i := 0; i < 4; i++ { // t=3..6s: the 3 of t=1s is within the hold
		bs.tick()
		bs.next(3, 3, SourceHeld)
	}
	bs.tick() // t=7s: the 3 of t=1s is two TTLs old
	bs.next(2, 2, SourceCounted)
	if l := bs.h.Live(); l != 2 {
		t.Fatalf("Live() %d", l)
	}
}

// epochStore is a memStore that is a cluster.Leaver: its live set's epoch
// is set by the test, and Leave records who left.
type epochStore struct {
	*memStore
	epoch atomic.Pointer[string]
	left  chan string
}

func (s *epochStore) BeatEpoch(ctx context.Context, m cluster.Member, ttl time.Duration) (int, string, error) {
	n, err := s.Beat(ctx, m, ttl)
	return n, *s.epoch.Load(), err
}

func (s *epochStore) Leave(_ context.Context, m cluster.Member) error {
	s.left <- m.ID
	return nil
}

// TestHeartbeatBelievesDepartures: with a Store that tells its live set's
// epoch, a lower count under the same epoch (members that left or
// expired) is believed at the beat that sees it; a lower count under a
// new epoch (the set was lost: a restart) is held for two TTLs as before.
// Close leaves the live set. On the code before, every lower count was
// held for two TTLs (six beats) and a closed member counted until its TTL
// ended, so a rolling restart of a per-instance rule ran on a count that
// was too high for about nine seconds.
func TestHeartbeatBelievesDepartures(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	st := &epochStore{memStore: newMemStore(clk), left: make(chan string, 1)}
	e1, e2 := "e1", "e2"
	st.epoch.Store(&e1)
	st.live = 3
	st.set(answer)
	bs := &beats{t: t, e: &env{clk: clk}, st: st.memStore, lives: make(chan [3]int, 1)}
	var last int
	h, err := StartHeartbeat(HeartbeatConfig{
		Store: st, Clock: clk, Member: cluster.Member{ID: "i1", App: "shop"},
		OnLive:  func(n int) { last = n },
		OnShare: func(n int, src Source) { bs.lives <- [3]int{last, n, int(src)} },
	})
	if err != nil {
		t.Fatal(err)
	}
	bs.h = h
	t.Cleanup(func() { st.release(); h.Close() })
	bs.next(3, 3, SourceCounted)
	bs.tick()
	bs.next(3, 3, SourceCounted)
	st.mu.Lock()
	st.live = 2 // one member left (or expired)
	st.mu.Unlock()
	bs.tick()
	bs.next(2, 2, SourceCounted)
	st.mu.Lock()
	st.live = 1 // a restart: a new epoch, this member alone has beaten since
	st.mu.Unlock()
	st.epoch.Store(&e2)
	bs.tick()
	bs.next(2, 2, SourceHeld)
	for i := 0; i < 4; i++ { // t=4..7s: the same epoch again, but the 2 of t=2s is within the hold
		bs.tick()
		bs.next(2, 2, SourceHeld)
	}
	bs.tick() // t=8s: the 2 of t=2s is two TTLs old
	bs.next(1, 1, SourceCounted)
	h.Close()
	if id := <-st.left; id != "i1" {
		t.Fatalf("Leave(%q), want i1", id)
	}
}

// TestHeartbeatHoldsAcrossOutage: after failed beats the hold counts from
// the first beat that succeeds again, however long the outage.
func TestHeartbeatHoldsAcrossOutage(t *testing.T) {
	bs := startBeats(t, HeartbeatConfig{Expected: 1}, answer, 4)
	bs.next(4, 4, SourceCounted)
	bs.st.set(fail)
	for i := 0; i < 10; i++ { // ten seconds down: longer than any TTL
		bs.tick()
		bs.next(4, 4, SourceHeld)
	}
	bs.st.set(answer)
	bs.st.live = 1
	for i := 0; i < 6; i++ { // t=11..16s
		bs.tick()
		bs.next(4, 4, SourceHeld)
	}
	bs.tick() // t=17s: two TTLs after the first answer at t=11s
	bs.next(1, 1, SourceCounted)
}

// TestHeartbeatExpected: an instance whose Store is down when it starts
// divides its local shares by Expected, not 1, and keeps doing so for two
// TTLs after its first successful beat (the others may not have beaten
// yet); Live, for budgets, is the Store's count.
func TestHeartbeatExpected(t *testing.T) {
	for _, c := range []struct {
		expected, want int
	}{{0, DefaultExpected}, {3, 3}} {
		bs := startBeats(t, HeartbeatConfig{Expected: c.expected}, fail, 1)
		if n, src := bs.h.Share(); n != c.want || src != SourceExpected {
			t.Fatalf("share before any beat %d (%v), want %d (expected)", n, src, c.want)
		}
		bs.next(1, c.want, SourceExpected)
		bs.tick()
		bs.next(1, c.want, SourceExpected)
		bs.st.set(answer) // t=2s: the Store is up; the others beat later
		bs.tick()
		bs.next(1, c.want, SourceExpected)
		bs.st.live = 2
		for i := 0; i < 5; i++ { // t=3..7s
			bs.tick()
			bs.next(2, c.want, SourceExpected)
		}
		bs.tick() // t=8s: counted
		bs.next(2, 2, SourceCounted)
	}
}

// TestLateCallsInARow: a late call's request is decided by the fallback
// while the Manager stays Remote; a success resets the count; the third
// late call in a row switches to Fallback. A refused connection switches
// at once (TestFallbackOnFailure).
func TestLateCallsInARow(t *testing.T) {
	var trs transitions
	e := newEnv(t, Config{Timeout: 30 * time.Millisecond, OnTransition: trs.add})
	l := e.limiter(t, Spec{Budget: bucket("late", 1000), Strict: true})
	late := func() {
		t.Helper()
		done := make(chan Result)
		go func() { done <- l.acq(bg, 1) }()
		e.blockUntil(t, 1) // the lone caller's Take deadline
		e.clk.Advance(e.m.deadline())
		if r := <-done; !r.Admitted || !r.Fallback() {
			t.Fatalf("%+v, want admitted by the local share", r)
		}
	}
	e.st.set(hang)
	late()
	late()
	if e.m.Mode() != Remote {
		t.Fatalf("mode %v after two late calls", e.m.Mode())
	}
	e.st.set(answer)
	if r := l.acq(bg, 1); !r.Admitted || r.By != ByStore {
		t.Fatalf("%+v", r)
	}
	e.st.set(hang)
	late()
	late()
	if e.m.Mode() != Remote {
		t.Fatalf("mode %v: a success came between", e.m.Mode())
	}
	late()
	if e.m.Mode() != Fallback || trs.modes() != "remote>fallback" {
		t.Fatalf("mode %v, transitions %q after three late calls in a row", e.m.Mode(), trs.modes())
	}
	if st := e.m.Stats(); st.Late != 5 {
		t.Fatalf("stats %+v, want 5 late calls", st)
	}
}

// TestDeadlineFollowsLatency: a call's deadline is four times the second
// slowest of the last 32 successful calls, within [max(MinTimeout,
// Timeout/4), Timeout], and Timeout before any call succeeded; a Store
// slower than the floor but steady keeps deciding.
func TestDeadlineFollowsLatency(t *testing.T) {
	const timeout = 80 * time.Millisecond // floor: MinTimeout, 20 ms
	e := newEnv(t, Config{Timeout: timeout})
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	if d := e.m.deadline(); d != timeout {
		t.Fatalf("deadline %v before any call", d)
	}
	for _, c := range []struct {
		lat  int64
		want time.Duration
	}{
		{ms(1), MinTimeout},
		{ms(10), MinTimeout},            // second slowest 1 ms
		{ms(12), 40 * time.Millisecond}, // second slowest 10 ms
		{ms(100), 48 * time.Millisecond},
		{ms(100), timeout}, // 400 ms, capped
	} {
		e.m.observeLatency(c.lat)
		if d := e.m.deadline(); d != c.want {
			t.Fatalf("after %v: deadline %v, want %v", time.Duration(c.lat), d, c.want)
		}
	}
	for i := 0; i < latencySamples-2; i++ {
		e.m.observeLatency(ms(1))
	}
	if d := e.m.deadline(); d != timeout {
		t.Fatalf("deadline %v with two 100 ms calls among the last 32", d)
	}
	e.m.observeLatency(ms(1))
	if d := e.m.deadline(); d != MinTimeout {
		t.Fatalf("deadline %v once the slow calls left the samples", d)
	}

	// The default Timeout, 250 ms: the floor is a quarter of it.
	e = newEnv(t, Config{})
	e.m.observeLatency(ms(1))
	if d := e.m.deadline(); d != DefaultTimeout/4 {
		t.Fatalf("deadline %v, want %v", d, DefaultTimeout/4)
	}
	// A Store that takes 30 ms a call: after the first call the deadline
	// is 120 ms and no call is late.
	e = newEnv(t, Config{})
	l := e.limiter(t, Spec{Budget: bucket("slow", 1000), Strict: true})
	e.st.delay = 30 * time.Millisecond
	e.st.set(slow)
	for i := 0; i < 5; i++ {
		done := make(chan Result)
		go func() { done <- l.acq(bg, 1) }()
		e.blockUntil(t, 2) // the Take's deadline and the store's delay
		e.clk.Advance(30 * time.Millisecond)
		if r := <-done; !r.Admitted || r.By != ByStore {
			t.Fatalf("call %d: %+v", i, r)
		}
		if d := e.m.deadline(); d != 120*time.Millisecond {
			t.Fatalf("deadline %v", d)
		}
	}
}

// TestDeadlineLearnsSlowerStore: a Store that answered in 1 ms (deadline
// Timeout/4) becomes slower than the deadline but answers within Timeout.
// Late calls raise the deadline: after two the second slowest sample is
// the deadline they passed and the next call has the whole Timeout, which
// the Store answers in, so the Manager never trips. A probe has four
// Timeouts (a Store that answers within Timeout may need several round
// trips on a new connection), and its latency is then the one sample
// the deadline follows. On the code before, late calls gave no sample:
// every call stayed late, and a probe slower than Timeout never
// succeeded.
func TestDeadlineLearnsSlowerStore(t *testing.T) {
	const timeout = DefaultTimeout
	var trs transitions
	e := newEnv(t, Config{OnTransition: trs.add, ProbeInterval: time.Second})
	l := e.limiter(t, Spec{Budget: bucket("slower", 1000), Strict: true})
	for i := 0; i < 5; i++ {
		e.m.observeLatency(int64(time.Millisecond))
	}
	if d := e.m.deadline(); d != timeout/4 {
		t.Fatalf("deadline %v after fast calls, want %v", d, timeout/4)
	}
	e.st.delay = 100 * time.Millisecond
	e.st.set(slow)
	call := func(advance time.Duration) Result {
		t.Helper()
		done := make(chan Result)
		go func() { done <- l.acq(bg, 1) }()
		e.blockUntil(t, 2) // the Take's deadline and the store's delay
		e.clk.Advance(advance)
		return <-done
	}
	for i, want := range []time.Duration{timeout / 4, timeout} {
		if r := call(timeout / 4); !r.Fallback() {
			t.Fatalf("late call %d: %+v, want the fallback's", i, r)
		}
		if d := e.m.deadline(); d != want {
			t.Fatalf("after late call %d: deadline %v, want %v", i, d, want)
		}
	}
	if r := call(100 * time.Millisecond); !r.Admitted || r.By != ByStore {
		t.Fatalf("third call on a 100 ms Store with Timeout %v: %+v, want the store's grant", timeout, r)
	}
	if e.m.Mode() != Remote || trs.modes() != "" {
		t.Fatalf("mode %v, transitions %q: want no trip", e.m.Mode(), trs.modes())
	}

	// A failure trips; the Store then answers in 300 ms, more than Timeout.
	e.st.set(fail)
	if r := l.acq(bg, 1); !r.Fallback() {
		t.Fatalf("%+v", r)
	}
	e.m.waitIdle()
	e.st.delay = 300 * time.Millisecond
	e.st.set(slow)
	e.clk.Advance(time.Second)
	if r := l.acq(bg, 1); !r.Fallback() { // queues the probe
		t.Fatalf("%+v", r)
	}
	e.blockUntil(t, 2) // the probe's deadline and the store's delay
	e.st.set(answer)   // the paybacks after the probe
	e.clk.Advance(300 * time.Millisecond)
	e.m.waitIdle()
	if e.m.Mode() != Remote || e.m.Stats().Probes != 1 {
		t.Fatalf("mode %v after %d probes of a 300 ms Store, want remote after one", e.m.Mode(), e.m.Stats().Probes)
	}
	if d := e.m.deadline(); d != timeout {
		t.Fatalf("deadline %v after a 300 ms probe, want Timeout %v", d, timeout)
	}
}

// TestTripChargesLocalShare: when the Store stops answering, the local
// share is what is left of it after this instance's own use of the
// Store's grants in the last Interval, and nothing if the Store ran short
// in that time (the fleet had used the whole budget). On the code before,
// the share was whole at once: the second of the failure admitted the
// Store's budget and every instance's share.
func TestTripChargesLocalShare(t *testing.T) {
	t.Run("ran-short", func(t *testing.T) {
		e := newEnv(t, Config{})
		e.m.SetLive(4) // share 25 of 100
		l := e.limiter(t, Spec{Budget: window("w", 100)})
		if n := acquire(t, l, 150); n != 100 {
			t.Fatalf("admitted %d", n)
		}
		e.m.waitIdle()
		e.st.set(fail)
		e.clk.Advance(60 * time.Millisecond) // past the refusals' backoff
		local := 0
		for i := 0; i < 40; i++ {
			if r := l.acq(bg, 1); r.Admitted {
				local++
			}
		}
		if e.m.Mode() != Fallback || local != 0 {
			t.Fatalf("mode %v, admitted %d by the share right after the failure, want 0", e.m.Mode(), local)
		}
		e.clk.Advance(1100 * time.Millisecond) // the charge leaves the window
		for i := 0; i < 40; i++ {
			if r := l.acq(bg, 1); r.Admitted {
				local++
			}
		}
		if local != 25 {
			t.Fatalf("admitted %d an Interval later, want the share, 25", local)
		}
	})
	t.Run("used-some", func(t *testing.T) {
		e := newEnv(t, Config{})
		e.m.SetLive(4)
		l := e.limiter(t, Spec{Budget: window("w", 100)})
		if n := acquire(t, l, 10); n != 10 {
			t.Fatalf("admitted %d", n)
		}
		e.m.waitIdle()
		e.st.set(fail)
		local := 0
		for i := 0; i < 40; i++ {
			if r := l.acq(bg, 1); r.Admitted {
				local++
			}
		}
		if local != 15 {
			t.Fatalf("admitted %d by the share after using 10 of the Store's, want 15", local)
		}
	})
}

// TestPaybackOnRecovery: on recovery, before any remote decision, the
// Store is charged the local admissions of the last Interval times the
// count the shares divide by (at most the budget): a Store that restarted
// empty, or whose window emptied during the outage, does not admit its
// whole budget on top of what the shares admitted. On the code before,
// the first remote decisions took the whole budget again.
func TestPaybackOnRecovery(t *testing.T) {
	e := newEnv(t, Config{ProbeInterval: 100 * time.Millisecond})
	e.m.SetLive(4)
	l := e.limiter(t, Spec{Budget: window("w", 100)})
	e.st.set(fail)
	local := 0
	for i := 0; i < 20; i++ {
		if r := l.acq(bg, 1); r.Admitted && r.Fallback() {
			local++
		}
	}
	if local != 20 || e.m.Mode() != Fallback {
		t.Fatalf("admitted %d locally, mode %v", local, e.m.Mode())
	}
	e.st.set(answer)
	e.clk.Advance(100 * time.Millisecond)
	l.acq(bg, 1) // queues the probe
	e.m.waitIdle()
	if e.m.Mode() != Remote {
		t.Fatalf("mode %v after the probe", e.m.Mode())
	}
	// 21 local admissions (the call that queued the probe too) × 4 = 84.
	if _, granted, _ := e.st.counts("w"); granted != 84 {
		t.Fatalf("the Store was charged %d, want 84", granted)
	}
	if st := e.m.Stats(); st.Paid != 84 {
		t.Fatalf("stats %+v", st)
	}
	if n := acquire(t, l, 40); n != 16 {
		t.Fatalf("admitted %d by the Store after the payback, want 16", n)
	}
}

// TestLateCallChargedWithRecentUse: a late call that does not switch the
// Manager is decided by what is left of the local share after this
// instance's recent grants from the Store, at most a fiftieth of the
// share per Interval (here 1 of 25), and refused if the Store ran short
// lately. After the switch the share is charged with the recent grants:
// 5 of 25 in all after 20 from the Store. Before, each late call was admitted by a whole share
// while the others kept taking the budget from the Store.
func TestLateCallChargedWithRecentUse(t *testing.T) {
	e := newEnv(t, Config{Timeout: 30 * time.Millisecond})
	e.m.SetLive(4) // share 25 of 100
	l := e.limiter(t, Spec{Budget: window("w", 100), Strict: true})
	if n := acquire(t, l, 20); n != 20 {
		t.Fatalf("admitted %d", n)
	}
	e.st.set(hang)
	local := 0
	for i := 0; i < 10; i++ {
		if e.m.Mode() == Fallback {
			if r := l.acq(bg, 1); r.Admitted {
				local++
			}
			continue
		}
		done := make(chan Result)
		go func() { done <- l.acq(bg, 1) }()
		e.blockUntil(t, 1)
		e.clk.Advance(e.m.deadline())
		if r := <-done; r.Admitted {
			local++
		}
	}
	if local != 5 {
		t.Fatalf("admitted %d by the share after 20 from the Store, want 5", local)
	}

	// The Store ran short: a late call admits nothing.
	e = newEnv(t, Config{Timeout: 30 * time.Millisecond})
	l = e.limiter(t, Spec{Budget: window("w", 10), Strict: true})
	if n := acquire(t, l, 11); n != 10 {
		t.Fatalf("admitted %d", n)
	}
	e.st.set(hang)
	done := make(chan Result)
	go func() { done <- l.acq(bg, 1) }()
	e.blockUntil(t, 1)
	e.clk.Advance(e.m.deadline())
	if r := <-done; r.Admitted || !r.Fallback() || e.m.Mode() != Remote {
		t.Fatalf("%+v in mode %v, want refused by the fallback, still remote", r, e.m.Mode())
	}
}

// replyErr is an error reply as go-redis returns it (it has RedisError).
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// timeoutErr is a socket's timeout (as os.ErrDeadlineExceeded is).
type timeoutErr struct{}

func (timeoutErr) Error() string { return "i/o timeout" }
func (timeoutErr) Timeout() bool { return true }

// TestFailureKind: two failures of one kind (a refused dial to two
// addresses, two EOFs, two WRONGPASS replies) compare equal, whatever
// their wrapping; failures of different kinds do not.
func TestFailureKind(t *testing.T) {
	refused := func(addr string) error {
		return fmt.Errorf("sluice: cluster store: take: %w", &net.OpError{Op: "dial", Net: "tcp",
			Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: len(addr)}, Err: errors.New("connect: connection refused")})
	}
	wrap := func(err error) error { return fmt.Errorf("sluice: cluster store: probe: sluiceredis: take: %w", err) }
	same := [][2]error{
		{refused("a"), refused("bb")},
		{wrap(io.EOF), fmt.Errorf("x: %w", io.EOF)},
		{wrap(replyErr("WRONGPASS invalid username-password pair")), replyErr("WRONGPASS other text")},
		{wrap(context.DeadlineExceeded), context.DeadlineExceeded},
		// A socket timeout is late as the context's deadline is.
		{wrap(&net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}), wrap(context.DeadlineExceeded)},
	}
	for _, p := range same {
		if a, b := failureKind(p[0]), failureKind(p[1]); a != b {
			t.Errorf("%v and %v: kinds %q and %q, want equal", p[0], p[1], a, b)
		}
	}
	kinds := []error{refused("a"), wrap(io.EOF), wrap(replyErr("WRONGPASS x")), wrap(replyErr("NOAUTH x")),
		wrap(context.DeadlineExceeded), errors.New("something else")}
	seen := map[string]error{}
	for _, err := range kinds {
		k := failureKind(err)
		if prev, ok := seen[k]; ok {
			t.Errorf("%v and %v share kind %q", prev, err, k)
		}
		seen[k] = err
	}
}
