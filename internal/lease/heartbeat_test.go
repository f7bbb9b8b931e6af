package lease

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/sluicetest"
)

// TestHeartbeat: a beat at once, then one per Interval with TTL 3×Interval;
// the live count follows the Store's, stays at the last known value (at
// least 1) while the Store fails and for two TTLs after it answers again.
func TestHeartbeat(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	st := newMemStore(clk)
	st.live = 3
	lives := make(chan int, 1)
	h, err := StartHeartbeat(HeartbeatConfig{
		Store: st, Clock: clk, Member: cluster.Member{ID: "i1", App: "shop"},
		OnLive: func(n int) { lives <- n },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	e := &env{clk: clk}
	next := func(want int) {
		t.Helper()
		if got := <-lives; got != want || h.Live() != want {
			t.Fatalf("live %d (Live() %d), want %d", got, h.Live(), want)
		}
	}
	next(3)
	tick := func() {
		t.Helper()
		e.blockUntil(t, 1) // the interval's timer
		clk.Advance(time.Second)
	}
	st.live = 5
	tick()
	next(5)
	st.set(fail)
	tick()
	next(5)
	if h.Err() == nil || h.Failures() != 1 {
		t.Fatalf("err %v, failures %d", h.Err(), h.Failures())
	}
	st.set(hang)
	tick()
	e.blockUntil(t, 1) // the beat's deadline
	clk.Advance(DefaultTimeout)
	next(5)
	// The Store answers again with a lower count (it restarted empty):
	// the last known count holds for two TTLs from this beat, then the
	// Store's count is believed.
	st.set(answer)
	st.live = 0
	tick()
	next(5)
	if h.Err() != nil {
		t.Fatal(h.Err())
	}
	for i := 1; i < 6; i++ {
		tick()
		next(5)
	}
	tick()
	next(1)
	for _, ttl := range st.ttls {
		if ttl != 3*time.Second {
			t.Fatalf("ttl %v, want 3s", ttl)
		}
	}
	if len(st.ttls) != 11 {
		t.Fatalf("%d beats, want 11", len(st.ttls))
	}
}

// TestHeartbeatClose: Close cuts a hanging beat short and waits for the
// goroutine (TestMain checks for leaks).
func TestHeartbeatClose(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	st := newMemStore(clk)
	st.set(hang)
	h, err := StartHeartbeat(HeartbeatConfig{Store: st, Clock: clk, Member: cluster.Member{ID: "i1", App: "shop"}})
	if err != nil {
		t.Fatal(err)
	}
	(&env{clk: clk}).blockUntil(t, 1) // the first beat hangs
	h.Close()
	h.Close()
	if h.Live() != 1 {
		t.Fatalf("live %d", h.Live())
	}
	for _, bad := range []HeartbeatConfig{
		{Member: cluster.Member{ID: "i", App: "a"}},
		{Store: st, Member: cluster.Member{App: "a"}},
		{Store: st, Member: cluster.Member{ID: "i", App: "a"}, Interval: -1},
	} {
		if _, err := StartHeartbeat(bad); err == nil {
			t.Fatalf("StartHeartbeat(%+v) succeeded", bad)
		}
	}
}
