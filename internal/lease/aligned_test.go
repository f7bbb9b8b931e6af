package lease

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/sluicetest"
)

// unixStart is a manual clock's start in the middle of a Unix second (a
// manual clock is read as Unix ns), so that aligned intervals do not
// begin where the clock does.
const unixStart = 1_700_000_000_300_000_000

// second returns the aligned second of a reading of a manual clock.
func second(now int64) int64 { return floorDiv(now, int64(time.Second)) }

// TestAlignedFleet runs five instances on a sliding window of 1,000/s
// against an adversary: every other aligned second, instances take large
// leases late in the second (bursts of 8 to 15 calls in one millisecond
// between 960 and 990 ms, which size the next leases at the cap, then
// nothing) and every second starts with up to 7 calls a millisecond per
// goroutine for 60 ms, which spend what is held; the other seconds have a
// steady demand that fills the Store's window. Two goroutines per instance call
// concurrently at each millisecond. Every admission counts in the aligned
// second of the reading it was decided at (the clock does not move while
// they call), and no aligned second may admit more than the Limit, exactly.
// Before, leases granted late in a second were spent after it (1,023 and
// 1,036 in two seconds of one run, 1,004 and 1,003 in another: the
// goroutines' order varies). The accounting (granted = admitted + held + given + dropped)
// holds at every millisecond.
func TestAlignedFleet(t *testing.T) {
	b := window("aligned", 1000)
	clk := sluicetest.NewManualClock(unixStart)
	st := newMemStore(clk)
	const n = 5
	var ms []*Manager
	var ls []*Limiter
	for i := 0; i < n; i++ {
		m, err := New(Config{Store: st, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		m.SetLive(n)
		l, err := m.NewLimiter(Spec{Budget: b})
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
		ls = append(ls, l)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	const steps = 6000 // ms
	perSecond := map[int64]int64{}
	var admitted int64
	var refills int64
	for step := 0; step < steps; step++ {
		clk.Advance(time.Millisecond)
		now := clk.Nanotime()
		phase := (now / int64(time.Millisecond)) % 1000
		// Demand of each of the two goroutines of each instance.
		var demand [n][2]int
		for i := range demand {
			for g := range demand[i] {
				odd := second(now)%2 == 1
				switch {
				case phase < 60:
					demand[i][g] = rng.IntN(8)
				case odd && phase >= 960 && phase < 990 && (phase+int64(i))%10 == 0:
					demand[i][g] = 8 + rng.IntN(8)
				case odd && phase >= 990:
				case odd:
					demand[i][g] = rng.IntN(20) / 19
				default:
					demand[i][g] = rng.IntN(4) / 2
				}
			}
		}
		var got [n][2]int64
		var wg sync.WaitGroup
		for i, l := range ls {
			for g := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range demand[i][g] {
						r := l.Acquire(bg, now, 1)
						if r.Fallback() {
							t.Errorf("%+v", r)
							return
						}
						if r.Admitted {
							got[i][g]++
						}
					}
				}()
			}
		}
		wg.Wait()
		for i := range got {
			for g := range got[i] {
				perSecond[second(now)] += got[i][g]
				admitted += got[i][g]
			}
		}
		var held, dropped int64
		for i, l := range ls {
			ms[i].waitIdle()
			held += l.held()
			dropped += ms[i].Stats().Dropped
		}
		if _, granted, given := st.counts(b.Key); granted != admitted+held+given+dropped {
			t.Fatalf("at %d: granted %d != admitted %d + held %d + given %d + dropped %d",
				now, granted, admitted, held, given, dropped)
		}
	}
	for _, l := range ls {
		refills += l.Stats().Refills
	}
	first, last := second(unixStart), second(clk.Nanotime())
	for s := first; s <= last; s++ {
		t.Logf("second %d: %d admitted", s-first, perSecond[s])
		if perSecond[s] > int64(b.Limit) {
			t.Errorf("second %d: %d admitted > %v", s-first, perSecond[s], b.Limit)
		}
	}
	for _, m := range ms {
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
	}
	var dropped int64
	for _, m := range ms {
		dropped += m.Stats().Dropped
	}
	_, granted, given := st.counts(b.Key)
	if granted != admitted+given+dropped {
		t.Fatalf("after Close: granted %d != admitted %d + given %d + dropped %d", granted, admitted, given, dropped)
	}
	t.Logf("granted %d, admitted %d, given back %d, dropped %d; %.1f refills per second per instance",
		granted, admitted, given, dropped, float64(refills)/(steps/1000.0)/n)
	// The five whole seconds are overloaded at their start: the fleet
	// gets most of the budget.
	if admitted < 4000 {
		t.Errorf("admitted only %d in 6 s", admitted)
	}
}

// lateStore is a memStore whose Take replies, when armed, only after
// hold is closed: the Store decided before (at its clock's reading then),
// the answer arrives later.
type lateStore struct {
	*memStore
	mu      sync.Mutex
	armed   bool
	decided chan struct{}
	hold    chan struct{}
}

func (s *lateStore) Take(ctx context.Context, reqs []cluster.Request, grants []cluster.Grant) error {
	err := s.memStore.Take(ctx, reqs, grants)
	s.mu.Lock()
	armed := s.armed
	s.armed = false
	s.mu.Unlock()
	if !armed {
		return err
	}
	close(s.decided)
	select {
	case <-s.hold:
	case <-ctx.Done():
		return ctx.Err()
	}
	return err
}

// TestAlignedRefillAcrossBoundary: a refill sent 1 ms before a second's
// end is decided by the Store before the end and arrives 1 ms after it.
// Its grant belongs to the old second: it is not used in the new one (nor
// given back, which would take back the new second's grants), and the
// caller that waited for it is not refused: it waits for the next refill,
// which the Store decides in the new second. The new second then admits
// at most the Limit, exactly: before, it admitted the late grant besides
// (105 of 100).
func TestAlignedRefillAcrossBoundary(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	mem := newMemStore(clk)
	st := &lateStore{memStore: mem, armed: true, decided: make(chan struct{}), hold: make(chan struct{})}
	// The second's end is at 1 s of Unix time: start 1 ms before it.
	clk.Set(unixStart/int64(time.Second)*int64(time.Second) + int64(time.Second) - int64(time.Millisecond))
	m, err := New(Config{Store: st, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.release(); _ = m.Close() })
	b := window("late", 100)
	l, err := m.NewLimiter(Spec{Budget: b})
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan Result, 1)
	go func() { res <- l.acq(bg, 1) }()
	<-st.decided
	_, first, _ := mem.counts(b.Key)
	if first <= 0 {
		t.Fatalf("first grant %d", first)
	}
	clk.Advance(2 * time.Millisecond) // 1 ms into the next second
	close(st.hold)
	r := <-res
	if !r.Admitted || r.By != ByStore {
		t.Fatalf("the caller that waited across the boundary: %+v, want admitted by the Store", r)
	}
	m.waitIdle()
	if s := l.Stats(); s.Refills != 2 {
		t.Errorf("%d refills, want 2: the late grant and one in the new second", s.Refills)
	}
	if d := m.Stats().Dropped; d != first {
		t.Errorf("dropped %d, want the late grant's %d", d, first)
	}
	// Spend the new second: now, and once the late grant has left the
	// Store's window (1 s after its decision), before the second ends.
	in := int64(1) + int64(acquire(t, l, 300))
	clk.Advance(time.Second - 1500*time.Microsecond) // 0.5 ms before the second's end
	in += int64(acquire(t, l, 300))
	if in > int64(b.Limit) {
		t.Errorf("the second after the late grant admitted %d > %v", in, b.Limit)
	}
	t.Logf("the new second admitted %d; the late grant of %d dropped", in, first)
}

// TestAlignedGiveBeforeEnd: a sliding-window lease's leftovers go back
// only by a Give the Store decides before the lease's aligned interval
// ends. A Give whose deadline would end after it is not sent (the permits
// are dropped); a Give not answered before the end (here: it passes its
// deadline) is charged again at once by a Take whose grant is spent, for
// the Store may decide the Give after the end and take back the next
// interval's grants.
func TestAlignedGiveBeforeEnd(t *testing.T) {
	e := newEnv(t, Config{})
	b := window("give", 100)
	sec := int64(time.Second)
	e.clk.Set(unixStart/sec*sec + 100*int64(time.Millisecond))
	until := unixStart/sec*sec + sec
	l := e.limiter(t, Spec{Budget: b})
	acquire(t, l, 1)
	e.m.waitIdle()
	_, granted, _ := e.st.counts(b.Key)

	// The call's deadline would end after the interval: dropped, nothing
	// sent.
	calls := e.st.giveCalls
	dropped := e.m.Stats().Dropped
	e.m.give(give{b: b, n: 2, until: e.clk.Nanotime() + 1})
	if e.st.giveCalls != calls || e.m.Stats().Dropped != dropped+2 {
		t.Fatalf("a Give too close to the end: %d calls (had %d), dropped %d (had %d), want none and 2 more",
			e.st.giveCalls, calls, e.m.Stats().Dropped, dropped)
	}

	// Sent in time, answered after the end: charged again.
	e.st.mu.Lock()
	e.st.delay = 50 * time.Millisecond
	e.st.mu.Unlock()
	e.st.set(slow)
	done := make(chan struct{})
	go func() { e.m.give(give{b: b, n: 3, until: until}); close(done) }()
	e.blockUntil(t, 2) // the store's delay and the call's deadline
	e.st.set(answer)
	e.clk.Set(until + int64(time.Millisecond))
	<-done
	e.m.waitIdle()
	if p := e.m.Stats().Paid; p != 3 {
		t.Errorf("paid %d, want the Give's 3 charged again", p)
	}
	if _, g, _ := e.st.counts(b.Key); g != granted+3 {
		t.Errorf("granted %d, want %d + 3", g, granted)
	}
}
