package sluiceredis

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
)

// TestEngineLeavesLiveCountOnClose: three engines, each with its own
// client of one real redis-server, count each other. One closes (a
// rolling restart stops it): it leaves the live set in Redis at once, and
// the two others count 2 within one heartbeat. Then an instance crashes
// (it beat once and never again, never closing): the others count it out
// within its TTL and one heartbeat. On the code before, a closed instance
// counted until its TTL ended and then for the hold of two TTLs: about
// eight to nine seconds with one-second heartbeats, during which a
// per-instance rule's budget stayed Threshold times the old count (three
// instances at 200/s admitted up to 1,088/s through a rolling restart).
//
// The bounds are the design's with room for a loaded host: one heartbeat
// interval plus 2 s after the Close, and TTL plus one interval plus 2 s
// after the crashed instance's beat; the old code needs at least TTL plus
// the hold (9 s) for either.
func TestEngineLeavesLiveCountOnClose(t *testing.T) {
	srv := redistest.Start(t)
	const beat = time.Second
	cfg := sluice.ClusterConfig{App: "roll", HeartbeatInterval: beat, ExpectedInstances: 1}
	gs := make([]*sluice.Engine, 3)
	for i := range gs {
		gs[i] = clusterEngine(t, New(srv.Client(t)), cfg)
	}
	live := func(g *sluice.Engine) (int, string) {
		st, _ := g.ClusterStatus()
		return st.Live, st.LiveSource
	}
	counts := func(want int, gs ...*sluice.Engine) func() bool {
		return func() bool {
			for _, g := range gs {
				if n, src := live(g); n != want || src != "counted" {
					return false
				}
			}
			return true
		}
	}
	eventually(t, 10*time.Second, "three engines count 3", counts(3, gs...))

	closed := time.Now()
	if err := gs[2].Close(); err != nil {
		t.Fatal(err)
	}
	took := eventually(t, 15*time.Second, "the two left count 2", counts(2, gs[0], gs[1]))
	t.Logf("closed engine counted out by the others after %v (heartbeat %v)", took.Round(time.Millisecond), beat)
	if bound := beat + 2*time.Second; time.Since(closed) > bound {
		t.Errorf("closed engine counted for %v after its Close, want at most %v", took, bound)
	}

	// A crashed instance: one beat with the engines' TTL (three
	// heartbeat intervals), then nothing.
	s := New(srv.Client(t))
	beatAt := time.Now()
	if _, err := s.Beat(ctxT(t), cluster.Member{ID: "crashed", App: "roll"}, 3*beat); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the two count the crashed instance", counts(3, gs[0], gs[1]))
	eventually(t, 20*time.Second, "the two count the crashed instance out", counts(2, gs[0], gs[1]))
	gone := time.Since(beatAt)
	t.Logf("crashed instance counted out %v after its only beat (TTL %v)", gone.Round(time.Millisecond), 3*beat)
	if bound := 3*beat + beat + 2*time.Second; gone > bound {
		t.Errorf("crashed instance counted for %v after its last beat, want at most %v", gone, bound)
	}
	ms, err := s.Members(ctxT(t), "roll")
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(ms); len(got) != 2 {
		t.Errorf("members %v, want the two engines still open", got)
	}
}
