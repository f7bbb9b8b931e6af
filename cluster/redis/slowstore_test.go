package sluiceredis

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster/redis/internal/tcpproxy"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/rules"
)

// TestProxySlowedRedisDecidesAgain: a real redis-server that answers in
// about a millisecond becomes slow, about 100 ms a round trip (a proxy the
// test controls delays each read by 50 ms), well within the cluster
// Timeout of 250 ms but above the deadline the engine learned from the
// fast Redis (a quarter of Timeout). The engine must learn the new
// latency and decide remotely again: late calls raise the deadline, and a
// probe that succeeds sets it from its own latency. Before that fix every
// call stayed late (failed calls gave no sample) and every decision was
// the fallback's for as long as Redis stayed slow.
//
// The bound: two late calls raise the deadline to Timeout (the third
// succeeds), or three trip the engine and the next probe (ProbeInterval,
// 200 ms) returns it to remote decisions with the probe's latency as the
// deadline's sample. 10 s is far beyond both on a loaded host; the test
// asserts only that shared decisions come back and stay.
func TestProxySlowedRedisDecidesAgain(t *testing.T) {
	srv := redistest.Start(t)
	p, err := tcpproxy.Start(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	// The client's socket timeouts are above the cluster Timeout, as the
	// ClusterConfig documentation asks.
	c := redis.NewClient(&redis.Options{
		Addr: p.Addr(), MaxRetries: -1, DialerRetries: 1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = c.Close() }) // before the proxy's Close

	const timeout = 250 * time.Millisecond
	g := clusterEngine(t, New(c), sluice.ClusterConfig{Timeout: timeout, ProbeInterval: 200 * time.Millisecond})
	// A strict rule: one store call per entry, so every entry says whether
	// the store decided it (passed) or the fallback did (blocked).
	loadFlow(t, g, rules.Flow{Resource: "api", Threshold: 1e6, StatInterval: time.Second,
		Cluster: &rules.Cluster{Strict: true, Fallback: rules.FallbackBlock}})
	for i := 0; i < 40; i++ { // the deadline learns the fast Redis
		if be := enter(t, g, "api"); be != nil {
			t.Fatalf("entry %d on a fast Redis refused: %v", i, be)
		}
	}

	p.SetDelay(50 * time.Millisecond)
	const want = 20 // remote decisions in a row
	began := time.Now()
	run, entries, remote := 0, 0, 0
	for run < want && time.Since(began) < 10*time.Second {
		entries++
		if be := enter(t, g, "api"); be == nil {
			run++
			remote++
		} else {
			if be.Reason != "cluster fallback: block" {
				t.Fatalf("entry refused by %v, want a remote pass or the fallback's block", be)
			}
			run = 0
			time.Sleep(5 * time.Millisecond) // let a probe run in fallback
		}
	}
	st, _ := g.ClusterStatus()
	t.Logf("after %v: %d entries, %d decided remotely, last %d in a row; status %+v",
		time.Since(began).Round(time.Millisecond), entries, remote, run, st)
	if run < want {
		t.Fatalf("a Redis slowed to ~100 ms (Timeout %v): %d remote decisions in a row within 10 s, want %d", timeout, run, want)
	}
}
