package sluiceredis

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/redis/internal/tcpproxy"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/rules"
)

// These tests put a proxy the test controls between the engines and a
// real redis-server, and make Redis slow (every read through the proxy
// delayed beyond the cluster Timeout) or silent (a blackhole: connections
// accepted and read, nothing forwarded or answered). The guarantee under
// test: no entry waits for the store longer than ClusterConfig.Timeout;
// the first failed store call switches the engine to its fallback; once
// Redis answers again, a probe returns the engine to remote decisions
// within about the probe interval.

const (
	proxyTimeout = 50 * time.Millisecond
	proxyProbe   = 300 * time.Millisecond
	// proxyMargin is what a call may take beyond the Timeout on a loaded
	// host under the race detector (scheduling, not waiting for Redis).
	proxyMargin = 250 * time.Millisecond
)

// impairments are the two ways Redis stops answering in time.
var impairments = []struct {
	name    string
	on, off func(*tcpproxy.Proxy)
}{
	{
		name: "slow",
		on:   func(p *tcpproxy.Proxy) { p.SetDelay(5 * proxyTimeout) },
		off:  func(p *tcpproxy.Proxy) { p.SetDelay(0) },
	},
	{
		name: "blackhole",
		on:   func(p *tcpproxy.Proxy) { p.Blackhole(true) },
		off:  func(p *tcpproxy.Proxy) { p.Blackhole(false) },
	},
}

// proxied starts a redis-server and a proxy in front of it, and returns
// the proxy and a client of the proxy configured for the decision path as
// docs/design/cluster.md advises (no retries, one dial attempt, timeouts of tens
// of milliseconds, the context's deadline honoured).
func proxied(t *testing.T) (*tcpproxy.Proxy, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	p, err := tcpproxy.Start(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c := redis.NewClient(decisionOptions(p.Addr()))
	t.Cleanup(func() { _ = c.Close() }) // before the proxy's Close
	return p, c
}

func decisionOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr: addr, MaxRetries: -1, DialerRetries: 1,
		DialTimeout: 100 * time.Millisecond, ReadTimeout: 50 * time.Millisecond, WriteTimeout: 50 * time.Millisecond,
		ContextTimeoutEnabled: true,
	}
}

// waitMode polls g until its ClusterStatus.Fallback is fallback, failing
// after 10 s.
func waitMode(t *testing.T, g *sluice.Engine, fallback bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if st, _ := g.ClusterStatus(); st.Fallback == fallback {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Fallback not %v after 10 s", fallback)
		}
	}
}

// TestProxyFirstFailedCallFallsBack: an engine whose first store call
// meets a slow or blackholed Redis decides that entry by the rule's
// fallback (block, so the refusal names it) within the Timeout; the third
// late call in a row switches it to fallback: exactly three Takes, three
// errors, one transition.
func TestProxyFirstFailedCallFallsBack(t *testing.T) {
	for _, im := range impairments {
		t.Run(im.name, func(t *testing.T) {
			p, c := proxied(t)
			im.on(p)
			trs := make(chan transition, 16)
			g := clusterEngine(t, New(c), sluice.ClusterConfig{
				Timeout: proxyTimeout, ProbeInterval: time.Hour,
			})
			onTransition(g, func(tr transition) { trs <- tr })
			for _, strict := range []bool{false, true} {
				res := "lease"
				if strict {
					res = "strict"
				}
				loadFlow(t, g, rules.Flow{Resource: res, Threshold: 1000, StatInterval: time.Minute,
					Cluster: &rules.Cluster{Strict: strict, Fallback: rules.FallbackBlock}})
				// An entry that comes while a late call is under way waits
				// for it and shares its failure: up to ten entries.
				for i := 0; i < 10; i++ {
					if st, _ := g.ClusterStatus(); st.Fallback {
						break
					}
					began := time.Now()
					be := enter(t, g, res)
					took := time.Since(began)
					if be == nil || be.Type != sluice.BlockCluster || be.Reason != "cluster fallback: block" {
						t.Fatalf("%s: entry %d refused by %v, want the fallback's block", res, i, be)
					}
					t.Logf("%s: entry %d decided by the fallback in %v (Timeout %v)", res, i, took, proxyTimeout)
					if took > proxyTimeout+proxyMargin {
						t.Errorf("%s: entry %d took %v, Timeout %v", res, i, took, proxyTimeout)
					}
				}
				waitMode(t, g, true)
				st, _ := g.ClusterStatus()
				if st.Takes != 3 || st.TakeErrors != 3 {
					t.Errorf("%s: %d takes, %d failed; want three late ones", res, st.Takes, st.TakeErrors)
				}
				tr := <-trs
				if !tr.Fallback || tr.Err == nil {
					t.Errorf("%s: transition %+v, want remote -> fallback with the store's error", res, tr)
				}
				// In fallback no entry asks the store.
				for i := 0; i < 100; i++ {
					if be := enter(t, g, res); be == nil || be.Reason != "cluster fallback: block" {
						t.Fatalf("%s: entry in fallback: %v", res, be)
					}
				}
				if st2, _ := g.ClusterStatus(); st2.Takes != st.Takes {
					t.Errorf("%s: %d takes in fallback, want none more", res, st2.Takes-st.Takes)
				}
				if !strict { // a fresh engine for the strict rule
					g = clusterEngine(t, New(c), sluice.ClusterConfig{
						Timeout: proxyTimeout, ProbeInterval: time.Hour,
					})
					onTransition(g, func(tr transition) { trs <- tr })
				}
			}
		})
	}
}

// TestProxyEntriesNeverWaitPastTimeout: four goroutines make entries on a
// lease rule and a strict rule while Redis answers, then while it is slow
// or blackholed (for several probe intervals, so that failing probes run
// meanwhile), then after it answers again. The slowest of the entries is
// within the Timeout (plus scheduling margin); the store's first failure
// switched the engine to fallback; and the engine returns to remote within
// about a probe interval of Redis answering again.
func TestProxyEntriesNeverWaitPastTimeout(t *testing.T) {
	for _, im := range impairments {
		t.Run(im.name, func(t *testing.T) {
			p, c := proxied(t)
			trs := make(chan transition, 16)
			g := clusterEngine(t, New(c), sluice.ClusterConfig{
				Timeout: proxyTimeout, ProbeInterval: proxyProbe,
			})
			onTransition(g, func(tr transition) { trs <- tr })
			// Budgets Redis never exhausts here; the local shares neither.
			loadFlow(t, g,
				rules.Flow{Resource: "lease", Threshold: 1e6, StatInterval: time.Minute, Cluster: &rules.Cluster{}},
				rules.Flow{Resource: "strict", Threshold: 1e6, StatInterval: time.Minute, Cluster: &rules.Cluster{Strict: true}})

			var (
				stop     atomic.Bool
				slowest  atomic.Int64 // ns, while impaired or after
				calls    atomic.Int64
				refusals atomic.Int64
				measure  atomic.Bool
				wg       sync.WaitGroup
			)
			for w := 0; w < 4; w++ {
				res := []string{"lease", "strict"}[w%2]
				wg.Add(1)
				go func() {
					defer wg.Done()
					for !stop.Load() {
						began := time.Now()
						be := enter(t, g, res)
						d := time.Since(began)
						if be != nil {
							refusals.Add(1)
						}
						if measure.Load() {
							calls.Add(1)
							for {
								old := slowest.Load()
								if int64(d) <= old || slowest.CompareAndSwap(old, int64(d)) {
									break
								}
							}
						}
						time.Sleep(100 * time.Microsecond) // bounded load: ~10,000 entries/s at most
					}
				}()
			}
			defer func() { stop.Store(true); wg.Wait() }()

			// Remote, with leases taken.
			waitTakes := func(n int64) {
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
					if st, _ := g.ClusterStatus(); st.Takes >= n {
						return
					}
					if time.Now().After(deadline) {
						t.Fatal("no store calls")
					}
				}
			}
			waitTakes(10)
			if n := refusals.Load(); n != 0 {
				t.Fatalf("%d refusals while Redis answers", n)
			}
			// A host loaded by other builds can stall a call past the
			// Timeout while Redis answers: start from remote, with such
			// transitions drained.
			waitMode(t, g, false)
			for len(trs) > 0 {
				tr := <-trs
				t.Logf("transition before Redis was %s: %+v", im.name, tr)
			}
			before, _ := g.ClusterStatus()

			measure.Store(true)
			im.on(p)
			waitMode(t, g, true)
			tr := <-trs
			if !tr.Fallback || tr.Err == nil {
				t.Errorf("transition %+v, want to fallback with the store's error", tr)
			}
			// Stay impaired for three probe intervals: the probes fail.
			st, _ := g.ClusterStatus()
			for st.Probes < 3 {
				time.Sleep(10 * time.Millisecond)
				st, _ = g.ClusterStatus()
			}
			if !st.Fallback {
				t.Fatalf("remote decisions while Redis is %s", im.name)
			}
			// Nothing is sent once in fallback: the failed calls are the
			// three late ones in a row that switch it (of either lane: a
			// strict entry's own Take, the store goroutine's Take, or Give
			// of an expired lease's permits) and one more under way in the
			// other lane at most.
			if errs := st.TakeErrors - before.TakeErrors; errs > 4 {
				t.Errorf("%d failed takes, want at most 4: the third late call in a row switches to fallback", errs)
			}
			select {
			case tr := <-trs:
				t.Errorf("transition %+v while Redis was %s, want none after the first", tr, im.name)
			default:
			}

			probes := st.Probes
			im.off(p)
			began := time.Now()
			waitMode(t, g, false)
			back := time.Since(began)
			st, _ = g.ClusterStatus()
			t.Logf("%s: %d entries measured, slowest %v (Timeout %v); back to remote %v after Redis answered (probe interval %v), %d probes",
				im.name, calls.Load(), time.Duration(slowest.Load()), proxyTimeout, back, proxyProbe, st.Probes)
			if tr := <-trs; tr.Fallback {
				t.Errorf("transition %+v, want back to remote", tr)
			}
			// One probe may have been under way when Redis came back; the
			// next one succeeds.
			if st.Probes > probes+2 {
				t.Errorf("%d probes after Redis answered again, want at most 2", st.Probes-probes)
			}
			if back > proxyProbe+proxyTimeout+time.Second {
				t.Errorf("back to remote %v after Redis answered, probe interval %v", back, proxyProbe)
			}
			stop.Store(true)
			wg.Wait()
			if d := time.Duration(slowest.Load()); d > proxyTimeout+proxyMargin {
				t.Errorf("slowest entry %v, Timeout %v (+%v margin)", d, proxyTimeout, proxyMargin)
			}
			if !strings.Contains(tr.Err.Error(), "cluster store") {
				t.Errorf("transition error %q does not name the store", tr.Err)
			}
		})
	}
}

// TestProxyStoreReturnsAtDeadline: whatever the client's options, every
// Store method returns when its context ends, even through a blackholed
// Redis: a client with go-redis's defaults (ContextTimeoutEnabled false,
// so its sockets wait for ReadTimeout, 3 s, and up to 3 retries) as well
// as one configured for the decision path.
func TestProxyStoreReturnsAtDeadline(t *testing.T) {
	srv := redistest.Start(t)
	p, err := tcpproxy.Start(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	clients := map[string]*redis.Options{
		"defaults":      {Addr: p.Addr()},
		"decision path": decisionOptions(p.Addr()),
	}
	b := cluster.Budget{Key: "api", Algorithm: cluster.TokenBucket, Limit: 10, Interval: time.Second}
	for name, opts := range clients {
		t.Run(name, func(t *testing.T) {
			c := redis.NewClient(opts)
			t.Cleanup(func() { _ = c.Close() }) // ends calls still waiting on their sockets
			s := New(c)
			p.Blackhole(false)
			take1(t, s, cluster.Request{Budget: b, N: 1}) // a connection in the pool
			p.Blackhole(true)
			defer p.Blackhole(false)
			calls := map[string]func(ctx context.Context) error{
				"take": func(ctx context.Context) error {
					return s.Take(ctx, []cluster.Request{{Budget: b, N: 1}}, make([]cluster.Grant, 1))
				},
				"give": func(ctx context.Context) error { return s.Give(ctx, b, 1) },
				"beat": func(ctx context.Context) error {
					_, err := s.Beat(ctx, cluster.Member{ID: "a", App: "shop"}, time.Second)
					return err
				},
				"members": func(ctx context.Context) error { _, err := s.Members(ctx, "shop"); return err },
			}
			for op, call := range calls {
				ctx, cancel := context.WithTimeout(context.Background(), proxyTimeout)
				began := time.Now()
				err := call(ctx)
				took := time.Since(began)
				cancel()
				if err == nil {
					t.Errorf("%s through a blackhole succeeded", op)
				}
				if took > proxyTimeout+proxyMargin {
					t.Errorf("%s returned after %v, deadline %v: %v", op, took, proxyTimeout, err)
				}
			}
		})
	}
}
