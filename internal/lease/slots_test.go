package lease

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"
)

// slotMem is a SlotStore in memory beside a memStore (whose Take answers
// the Manager's probes and whose behavior fails or hangs its calls too):
// slot deadlines on the store's clock, as the Redis scripts keep them on
// the server's.
type slotMem struct {
	*memStore
	smu     sync.Mutex
	slots   map[string]map[string]int64 // key -> member -> deadline ns
	renews  int
	renewed []int // holders per renewal call
}

func newSlotMem(e *env) *slotMem {
	return &slotMem{memStore: e.st, slots: make(map[string]map[string]int64)}
}

func members(holder string, n int64) []string {
	out := []string{holder}
	for i := int64(2); i <= n; i++ {
		out = append(out, holder+"#"+strconv.FormatInt(i, 10))
	}
	return out
}

// live returns the unexpired members of key (expired ones are dropped).
func (s *slotMem) live(key string) int64 {
	s.smu.Lock()
	defer s.smu.Unlock()
	return s.liveLocked(key)
}

func (s *slotMem) liveLocked(key string) int64 {
	now := s.clk.Nanotime()
	set := s.slots[key]
	for m, dl := range set {
		if dl <= now {
			delete(set, m)
		}
	}
	return int64(len(set))
}

func (s *slotMem) AcquireSlot(ctx context.Context, key, holder string, n, limit int64, ttl time.Duration) (bool, int64, error) {
	if err := s.wait(ctx); err != nil {
		return false, 0, err
	}
	s.smu.Lock()
	defer s.smu.Unlock()
	used := s.liveLocked(key)
	if used+n > limit {
		return false, used, nil
	}
	if s.slots[key] == nil {
		s.slots[key] = make(map[string]int64)
	}
	for _, m := range members(holder, n) {
		s.slots[key][m] = s.clk.Nanotime() + int64(ttl)
	}
	return true, used + n, nil
}

func (s *slotMem) ReleaseSlot(ctx context.Context, key, holder string, n int64) error {
	if err := s.wait(ctx); err != nil {
		return err
	}
	s.smu.Lock()
	defer s.smu.Unlock()
	for _, m := range members(holder, n) {
		delete(s.slots[key], m)
	}
	return nil
}

func (s *slotMem) RenewSlots(ctx context.Context, keys, holders []string, ns []int64, ttl time.Duration, add bool) (int64, error) {
	if err := s.wait(ctx); err != nil {
		return 0, err
	}
	s.smu.Lock()
	defer s.smu.Unlock()
	s.renews++
	s.renewed = append(s.renewed, len(holders))
	now := s.clk.Nanotime()
	var missing int64
	for i, k := range keys {
		if s.slots[k] == nil {
			s.slots[k] = make(map[string]int64)
		}
		for _, m := range members(holders[i], ns[i]) {
			dl, ok := s.slots[k][m]
			live := ok && dl > now
			if !live {
				missing++
			}
			if live || add {
				s.slots[k][m] = now + int64(ttl)
			}
		}
	}
	return missing, nil
}

// expire ends every lease of key now, as a store whose clock passed
// them would.
func (s *slotMem) expire(key string) {
	s.smu.Lock()
	for m := range s.slots[key] {
		s.slots[key][m] = s.clk.Nanotime()
	}
	s.smu.Unlock()
}

// slotEnv is a Manager on a manual clock with a slot pool renewing every
// 100 ms (leases of 300 ms) and a probe interval of 1 s.
func slotEnv(t *testing.T) (*env, *slotMem, *SlotPool) {
	t.Helper()
	e := newEnv(t, Config{ProbeInterval: time.Second})
	sm := newSlotMem(e)
	p := NewSlotPool(e.m, sm, "a", 100*time.Millisecond)
	t.Cleanup(p.Close)
	return e, sm, p
}

// tick moves the clock one renewal interval and waits for the pool's
// round (counted by stat) to finish.
func tick(t *testing.T, e *env, p *SlotPool, stat func(SlotStats) int64) {
	t.Helper()
	before := stat(p.Stats())
	e.blockUntil(t, 1)
	e.clk.Advance(p.interval)
	deadline := time.Now().Add(30 * time.Second)
	for stat(p.Stats()) == before {
		if time.Now().After(deadline) {
			t.Fatalf("no renewal round: stats %+v, mode %v, waiters %d", p.Stats(), e.m.Mode(), e.clk.Waiters())
		}
		time.Sleep(time.Millisecond)
	}
}

func renewals(s SlotStats) int64   { return s.Renewals }
func reconciles(s SlotStats) int64 { return s.Reconciles }
func rounds(s SlotStats) int64     { return s.Renewals + s.Reconciles + s.Errors }

func take(t *testing.T, p *SlotPool, s *SlotSpec, n int64) *Hold {
	t.Helper()
	h, r := p.Acquire(bg, s, n)
	if !r.Admitted {
		return nil
	}
	return h
}

// TestSlotPoolLongCallsKeepTheirSlots: held slots of two budgets are
// renewed in one call a round; after a hundred leases' worth of time they
// are all still live, the limit still exact; a release frees its slots at
// once.
func TestSlotPoolLongCallsKeepTheirSlots(t *testing.T) {
	e, sm, p := slotEnv(t)
	a, b := &SlotSpec{Key: "a", Limit: 3}, &SlotSpec{Key: "b", Limit: 2}
	var hs []*Hold
	for i := 0; i < 3; i++ {
		hs = append(hs, take(t, p, a, 1))
	}
	hb := take(t, p, b, 2)
	if hs[2] == nil || hb == nil || take(t, p, a, 1) != nil || take(t, p, b, 1) != nil {
		t.Fatal("not exact at the limits: 3 of a, 2 of b")
	}
	for i := 0; i < 300; i++ { // 30 s: 100 leases
		tick(t, e, p, renewals)
	}
	if sm.live("a") != 3 || sm.live("b") != 2 {
		t.Fatalf("live after 100 leases: a %d, b %d; want 3 and 2", sm.live("a"), sm.live("b"))
	}
	sm.smu.Lock()
	calls, last := sm.renews, sm.renewed[len(sm.renewed)-1]
	sm.smu.Unlock()
	if calls != 300 || last != 4 {
		t.Errorf("%d renewal calls of %d holders, want 300 of 4 (one call a round)", calls, last)
	}
	hs[0].Release()
	hs[0].Release() // a second release does nothing
	if sm.live("a") != 2 || p.InFlight("a") != 2 {
		t.Fatalf("after a release: live %d, in flight %d; want 2", sm.live("a"), p.InFlight("a"))
	}
	if take(t, p, a, 1) == nil || take(t, p, a, 1) != nil {
		t.Fatal("a release made room for other than one slot")
	}
}

// TestSlotPoolDeadInstanceReclaimedAtTTL: an instance that stops renewing
// (its pool closed, its entries never exit) holds its slots until exactly
// the TTL after its last renewal, on the store's clock.
func TestSlotPoolDeadInstanceReclaimedAtTTL(t *testing.T) {
	e, sm, p := slotEnv(t)
	s := &SlotSpec{Key: "a", Limit: 2}
	take(t, p, s, 2)
	tick(t, e, p, renewals) // last renewal at 100 ms
	p.Close()               // the instance dies
	other := NewSlotPool(e.m, sm, "b", 100*time.Millisecond)
	defer other.Close()
	e.clk.Advance(p.TTL() - time.Nanosecond)
	if take(t, other, s, 1) != nil {
		t.Fatal("a slot reclaimed before the TTL")
	}
	e.clk.Advance(time.Nanosecond)
	for i := 0; i < 2; i++ {
		if take(t, other, s, 1) == nil {
			t.Fatalf("slot %d of the dead instance's 2 not reclaimed at the TTL", i+1)
		}
	}
}

// TestSlotPoolFallbackShareAndReconcile: with the store down, an instance
// of three admits its share, 10/3 = 3 in flight, counting what it held
// before the outage; back, every slot in flight is registered before the
// first remote decision, and for the grace after recovery admissions
// stay within the share; then the store decides up to the limit.
func TestSlotPoolFallbackShareAndReconcile(t *testing.T) {
	e, sm, p := slotEnv(t)
	e.m.SetShare(3, SourceCounted)
	s := &SlotSpec{Key: "a", Limit: 10}
	held := []*Hold{take(t, p, s, 1), take(t, p, s, 1)} // 2 in flight
	sm.set(fail)
	admitted := 0
	for i := 0; i < 5; i++ {
		if h, r := p.Acquire(bg, s, 1); r.Admitted {
			if r.By != ByFallback {
				t.Fatalf("admitted by %v while the store fails", r.By)
			}
			held = append(held, h)
			admitted++
		}
	}
	if e.m.Mode() != Fallback || admitted != 1 {
		t.Fatalf("mode %v, admitted %d in fallback beside 2 held, want 1 (share 3)", e.m.Mode(), admitted)
	}
	held[0].Release() // no store call: the store is down
	if _, r := p.Acquire(bg, s, 1); !r.Admitted {
		t.Fatal("refused below the share after an exit")
	}
	if sm.live("a") != 2 {
		t.Fatalf("store counts %d, want the 2 taken before the outage", sm.live("a"))
	}
	// The store returns, empty; recovery reconciles.
	sm.set(answer)
	sm.smu.Lock()
	sm.slots = make(map[string]map[string]int64)
	sm.smu.Unlock()
	p.Reconcile(bg)
	if sm.live("a") != 3 || p.InFlight("a") != 3 {
		t.Fatalf("after reconciling: store %d, in flight %d; want 3", sm.live("a"), p.InFlight("a"))
	}
	e.m.mode.Store(uint32(Remote)) // as the Manager's probe does after OnRecover
	if take(t, p, s, 1) != nil {
		t.Fatal("admitted beyond the share during the grace after recovery")
	}
	for p.inGrace() { // renewed meanwhile: the leases stay live
		tick(t, e, p, rounds)
	}
	for i := 0; i < 7; i++ {
		if h, r := p.Acquire(bg, s, 1); h == nil {
			t.Fatalf("%+v %v: refused %d of 7 after the grace with 3 of 10 in flight (store %d, here %d, grace %v)", r, e.m.Mode(), i+1, sm.live("a"), p.InFlight("a"), p.inGrace())
		}
	}
	if take(t, p, s, 1) != nil {
		t.Fatal("admitted an 11th of 10")
	}
}

// TestSlotPoolLostLeaseRegisteredAgain: a lease the store let run out
// while its entry goes on (a pause longer than the TTL) is found missing
// by the next renewal and registered again by the round after.
func TestSlotPoolLostLeaseRegisteredAgain(t *testing.T) {
	e, sm, p := slotEnv(t)
	s := &SlotSpec{Key: "a", Limit: 5}
	take(t, p, s, 2)
	sm.expire("a")
	tick(t, e, p, renewals)
	if st := p.Stats(); st.Missing != 2 || sm.live("a") != 0 {
		t.Fatalf("missing %d, live %d; want 2 missing, none live", st.Missing, sm.live("a"))
	}
	tick(t, e, p, reconciles)
	if sm.live("a") != 2 {
		t.Fatalf("live %d after the reconciling round, want 2", sm.live("a"))
	}
}
