package sluiceredis

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice/cluster"
)

func ids(ms []cluster.Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func same(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// waitFor polls cond every 20ms until it holds or the bound passes: for
// things Redis does on its own clock (expiring a key), never to prove a
// point by sleeping.
func waitFor(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, bound)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMembers: Beat records members and counts the live ones; Members lists
// them with their fields; a member whose heartbeat expires, or whose record
// disappears, is never listed again and leaves the index.
func TestMembers(t *testing.T) {
	s, rc, _ := standalone(t)
	membersOK(t, s, rc)
}

func membersOK(t *testing.T, s *Store, rc redis.UniversalClient) {
	t.Helper()
	started := time.Unix(1700000000, 123456789)
	beat := func(id string, ttl time.Duration) int {
		t.Helper()
		n, err := s.Beat(ctxT(t), cluster.Member{ID: id, App: "shop", Host: "host-" + id, Started: started, RuleVersion: "v7"}, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	members := func() []cluster.Member {
		t.Helper()
		ms, err := s.Members(ctxT(t), "shop")
		if err != nil {
			t.Fatal(err)
		}
		return ms
	}
	if n := beat("b", time.Minute); n != 1 {
		t.Fatalf("first beat: %d live", n)
	}
	if n := beat("a", time.Minute); n != 2 {
		t.Fatalf("second beat: %d live", n)
	}
	if n := beat("a", time.Minute); n != 2 {
		t.Fatalf("repeated beat: %d live", n)
	}
	// c beats last with a short ttl: its own beat counts it.
	if n := beat("c", time.Second); n != 3 {
		t.Fatalf("third beat: %d live", n)
	}
	ms := members()
	if !same(ids(ms), []string{"a", "b", "c"}) {
		t.Fatalf("members %v", ids(ms))
	}
	if m := ms[0]; m.App != "shop" || m.Host != "host-a" || !m.Started.Equal(started) || m.RuleVersion != "v7" {
		t.Fatalf("member a: %+v", m)
	}
	if ms, _ := s.Members(ctxT(t), "other"); len(ms) != 0 {
		t.Fatalf("another app lists %v", ids(ms))
	}

	// c's heartbeat expires on Redis's clock: once gone, gone for good.
	waitFor(t, 10*time.Second, "c expires", func() bool { return len(members()) == 2 })
	if got := ids(members()); !same(got, []string{"a", "b"}) {
		t.Fatalf("after c expired: %v", got)
	}
	base := s.appBase("shop")
	if n := beat("a", time.Minute); n != 2 {
		t.Fatalf("beat after c expired: %d live", n)
	}
	if sc := rc.ZScore(ctxT(t), base+sufMembers, "c").Err(); sc != redis.Nil {
		t.Fatalf("c still in the index: %v", sc)
	}

	// b's record is forced to expire: Members no longer lists it and
	// drops it from the index, so Beat counts it no more.
	if err := rc.PExpire(ctxT(t), base+sufMember+"b", time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "b's record expires", func() bool {
		return rc.Exists(ctxT(t), base+sufMember+"b").Val() == 0
	})
	if got := ids(members()); !same(got, []string{"a"}) {
		t.Fatalf("after b's record expired: %v", got)
	}
	if n := beat("a", time.Minute); n != 1 {
		t.Fatalf("beat after b's record expired: %d live", n)
	}
}

func TestBeatValidation(t *testing.T) {
	s, _, _ := standalone(t)
	for _, c := range []struct {
		m   cluster.Member
		ttl time.Duration
	}{
		{cluster.Member{ID: "x"}, time.Second},
		{cluster.Member{App: "x"}, time.Second},
		{cluster.Member{ID: "x", App: "x"}, 0},
	} {
		if _, err := s.Beat(ctxT(t), c.m, c.ttl); err == nil {
			t.Errorf("Beat(%+v, %v): no error", c.m, c.ttl)
		}
	}
	if _, err := s.Members(ctxT(t), ""); err == nil {
		t.Error("Members(\"\"): no error")
	}
}
