package lease

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/sluicetest"
)

// versionStore records the rule version of each beat.
type versionStore struct {
	*memStore
	versions chan string
}

func (s versionStore) Beat(ctx context.Context, m cluster.Member, ttl time.Duration) (int, error) {
	s.versions <- m.RuleVersion
	return s.memStore.Beat(ctx, m, ttl)
}

// TestHeartbeatRuleVersion: SetRuleVersion reaches the next beat.
func TestHeartbeatRuleVersion(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	st := versionStore{newMemStore(clk), make(chan string, 10)}
	beats := make(chan int, 10)
	h, err := StartHeartbeat(HeartbeatConfig{
		Store: st, Clock: clk, Member: cluster.Member{ID: "i1", App: "shop", RuleVersion: "1"},
		OnLive: func(n int) { beats <- n },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if v := <-st.versions; v != "1" {
		t.Fatalf("first beat's rule version %q, want 1", v)
	}
	<-beats // the beat is over: the only timer left is the interval's
	h.SetRuleVersion("7")
	if m := h.Member(); m.RuleVersion != "7" || m.ID != "i1" {
		t.Fatalf("Member() = %+v", m)
	}
	e := &env{clk: clk}
	e.blockUntil(t, 1)
	clk.Advance(time.Second)
	if v := <-st.versions; v != "7" {
		t.Fatalf("beat after SetRuleVersion(7) carried %q", v)
	}
}
