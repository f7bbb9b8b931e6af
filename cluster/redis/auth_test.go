package sluiceredis

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/rules"
)

// TestEngineReportsRefusedPassword: a real redis-server with a password
// dies, which switches the engine to fallback (EOF, or a refused dial),
// and comes back with another password: from then on every probe is
// refused. The engine must report that cause
// (WRONGPASS) once it replaces the restart's, on its event stream and in
// ClusterStatus.Err. On the code before, the only event kept the
// restart's error and the refused password was reported nowhere.
func TestEngineReportsRefusedPassword(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "old")
	c := redis.NewClient(&redis.Options{
		Addr: srv.Addr(), Password: "old", MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	g := clusterEngine(t, New(c), sluice.ClusterConfig{ProbeInterval: 50 * time.Millisecond})
	trs := make(chan transition, 64)
	onTransition(g, func(tr transition) { trs <- tr })
	loadFlow(t, g, rules.Flow{Resource: "api", Threshold: 1e6, StatInterval: time.Second,
		Cluster: &rules.Cluster{Strict: true, Fallback: rules.FallbackBlock}})
	if be := enter(t, g, "api"); be != nil {
		t.Fatalf("entry before the restart: %v", be)
	}

	// Redis dies: the engine's next call fails (EOF, or a refused dial).
	srv.Kill()
	var got []string
	for len(got) == 0 {
		enter(t, g, "api")
		select {
		case tr := <-trs:
			if !tr.Fallback || tr.Err == nil || strings.Contains(tr.Err.Error(), "WRONGPASS") {
				t.Fatalf("transition %v (err %v), want to fallback on the dead Redis", tr, tr.Err)
			}
			got = append(got, tr.Err.Error())
			t.Logf("fallback event: %v", tr.Err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	// It comes back with another password.
	srv.RestartWith("--requirepass", "new")
	deadline := time.Now().Add(15 * time.Second)
	for {
		enter(t, g, "api") // the failing call, then the probes
		select {
		case tr := <-trs:
			if !tr.Fallback || tr.Err == nil {
				t.Fatalf("transition %v (err %v) before the password was refused", tr, tr.Err)
			}
			got = append(got, tr.Err.Error())
			t.Logf("fallback event: %v", tr.Err)
		default:
			time.Sleep(5 * time.Millisecond)
		}
		if n := len(got); n > 0 && strings.Contains(got[n-1], "WRONGPASS") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no fallback event names the refused password within 15 s; events: %q", got)
		}
	}
	st, _ := g.ClusterStatus()
	if !st.Fallback || st.Err == nil || !strings.Contains(st.Err.Error(), "WRONGPASS") {
		t.Fatalf("status Fallback %v, Err %v: want the refused password", st.Fallback, st.Err)
	}
	// The probes go on failing the same way: no more events of it.
	probes := st.Probes
	for st.Probes < probes+3 && time.Now().Before(deadline) {
		enter(t, g, "api")
		time.Sleep(10 * time.Millisecond)
		st, _ = g.ClusterStatus()
	}
	select {
	case tr := <-trs:
		t.Fatalf("another transition %v (%v) while the password stays refused", tr, tr.Err)
	default:
	}
}
