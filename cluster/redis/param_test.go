package sluiceredis

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/rules"
	"go.uber.org/goleak"
)

// These tests run param rules with a cluster section (one budget per
// value) through engines against a real redis-server.

func loadParam(t *testing.T, g *sluice.Engine, rs ...rules.Param) {
	t.Helper()
	if err := g.LoadRules(rules.Set{Param: rs}); err != nil {
		t.Fatal(err)
	}
}

// enterAs makes one entry of res for user and exits it; it returns the
// refusal, nil when the entry passed.
func enterAs(t *testing.T, g *sluice.Engine, res, user string) *sluice.BlockError {
	p, err := g.Entry(res, sluice.WithStringAttachment("user", user))
	if err == nil {
		p.Exit()
		return nil
	}
	var be *sluice.BlockError
	if !errors.As(err, &be) {
		t.Errorf("entry: %v", err)
		return &sluice.BlockError{}
	}
	return be
}

// paramBudget is the budget key of value v of a param rule on res counting
// attachment "user", with behavior and duration: the digest of the value
// names it, on every instance.
func paramBudget(res, behavior string, d time.Duration, v string) string {
	sum := sha256.Sum256([]byte(v))
	return fmt.Sprintf("shop/param/%s/kuser/%s/%dms/%s", res, behavior, d.Milliseconds(), hex.EncodeToString(sum[:16]))
}

// TestParamFivePerMinutePerUser: a cluster param rule of 5 per minute per
// user, 100 users, three engines with their own clients: every user gets
// exactly 5 per minute in all, however the engines' entries interleave.
// The bucket refills one token per 12 s of Redis time, so the bound allows
// what Redis's clock refilled while the test ran (nothing, unless the host
// stalls it for 12 s).
func TestParamFivePerMinutePerUser(t *testing.T) {
	const (
		engines  = 3
		users    = 100
		attempts = 12 // per user and engine
		workers  = 4  // goroutines per engine
	)
	srv := redistest.Start(t)
	client := srv.Client(t)
	rule := rules.Param{Resource: "post", Key: "user", Threshold: 5, Duration: time.Minute, Cluster: &rules.Cluster{}}
	gs := make([]*sluice.Engine, engines)
	for i := range gs {
		gs[i] = clusterEngine(t, New(srv.Client(t)), sluice.ClusterConfig{Timeout: 5 * time.Second})
		loadParam(t, gs[i], rule)
	}
	from := redisTime(t, client)
	var (
		admitted [users]atomic.Int64
		fell     atomic.Int64
		wg       sync.WaitGroup
	)
	for e, g := range gs {
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for a := 0; a < attempts; a++ {
					for u := w; u < users; u += workers {
						be := enterAs(t, g, "post", fmt.Sprint("user-", (u+e*7)%users))
						switch {
						case be == nil:
							admitted[(u+e*7)%users].Add(1)
						case be.Type != sluice.BlockCluster || be.Reason != "cluster budget exhausted":
							fell.Add(1)
							t.Errorf("refusal %v (%s)", be, be.Reason)
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	elapsed := time.Duration(redisTime(t, client)-from) * time.Microsecond
	refilled := int64(elapsed / (12 * time.Second))
	t.Logf("%d entries in %v of Redis time", engines*users*attempts, elapsed)
	if n := fell.Load(); n > 0 {
		t.Fatalf("%d refusals that were not the store's", n)
	}
	for u := range admitted {
		if n := admitted[u].Load(); n < 5 || n > 5+refilled {
			t.Errorf("user-%d: admitted %d, want 5 (at most %d refilled)", u, n, refilled)
		}
	}
	// A reload that leaves the rule unchanged (another rule added) keeps
	// every user's budget: user-0 is still refused.
	loadParam(t, gs[0], rule, rules.Param{Resource: "other", Threshold: 1})
	if be := enterAs(t, gs[0], "post", "user-0"); be == nil && refilled == 0 {
		t.Error("user-0 admitted after a reload: the budget was reset")
	}
	// One budget per user, each its own hash tag.
	keys, err := client.Keys(ctxT(t), "sluice:{shop/param/post/*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != users {
		t.Errorf("%d budget keys, want %d", len(keys), users)
	}
	k, _ := gs[0].ClusterStatus()
	t.Logf("engine 0: %+v", k)
}

// TestParamThrottlePaced: a throttle param rule paces each user's entries
// on Redis's schedule, 10 per second per user across two engines; another
// user has its own schedule; a wait beyond MaxQueueing is refused.
func TestParamThrottlePaced(t *testing.T) {
	srv := redistest.Start(t)
	rule := rules.Param{Resource: "feed", Key: "user", Threshold: 10, Throttle: &rules.Throttle{MaxQueueing: 250 * time.Millisecond}, Cluster: &rules.Cluster{}}
	gs := []*sluice.Engine{
		clusterEngine(t, New(srv.Client(t)), sluice.ClusterConfig{Timeout: time.Second}),
		clusterEngine(t, New(srv.Client(t)), sluice.ClusterConfig{Timeout: time.Second}),
	}
	for _, g := range gs {
		loadParam(t, g, rule)
	}
	began := time.Now()
	for i := 0; i < 3; i++ { // slots at 0, 100 and 200 ms
		if be := enterAs(t, gs[i%2], "feed", "alice"); be != nil {
			t.Fatalf("entry %d: %v", i, be)
		}
	}
	took := time.Since(began)
	t.Logf("three paced entries of one user took %v", took)
	if took < 190*time.Millisecond { // 10 ms for rounding between the clocks
		t.Errorf("three paced entries took %v, want at least 200 ms", took)
	}
	// Ten more at once: unless the host spaces their arrivals by about
	// 100 ms, the later ones would wait more than MaxQueueing.
	var wg sync.WaitGroup
	var refused atomic.Int64
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if be := enterAs(t, gs[i%2], "feed", "alice"); be != nil {
				if be.Type != sluice.BlockCluster {
					t.Errorf("refusal %v", be)
				}
				refused.Add(1)
			}
		}()
	}
	wg.Wait()
	if refused.Load() == 0 {
		t.Error("no entry refused, though one's wait exceeds MaxQueueing")
	}
}

// TestParamFallbackLocalShare: Redis is killed; from the first failed call
// on, each user is held to its local share, Threshold over the two live
// instances less what Redis granted this instance; Redis restarted, the
// store decides again.
func TestParamFallbackLocalShare(t *testing.T) {
	const (
		timeout = 100 * time.Millisecond
		probe   = 200 * time.Millisecond
	)
	srv := redistest.Start(t)
	cfg := sluice.ClusterConfig{Timeout: timeout, ProbeInterval: probe, HeartbeatInterval: 100 * time.Millisecond}
	g := clusterEngine(t, New(srv.Client(t)), cfg)
	peer := clusterEngine(t, New(srv.Client(t)), cfg)
	rule := rules.Param{Resource: "post", Key: "user", Threshold: 10, Duration: time.Hour, Cluster: &rules.Cluster{}}
	loadParam(t, g, rule)
	loadParam(t, peer, rule)
	deadline := time.Now().Add(10 * time.Second)
	for st, _ := g.ClusterStatus(); st.Live != 2; st, _ = g.ClusterStatus() {
		if time.Now().After(deadline) {
			t.Fatalf("live %d, want 2", st.Live)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if be := enterAs(t, g, "post", "alice"); be != nil {
		t.Fatalf("remote: %v", be)
	}
	srv.Kill()
	// The share, 10 / 2 instances = 5, less what Redis granted this
	// instance: alice's one.
	for user, want := range map[string]int{"alice": 4, "bob": 5} {
		admitted := 0
		for i := 0; i < 20; i++ {
			be := enterAs(t, g, "post", user)
			if be == nil {
				admitted++
				continue
			}
			if be.Type != sluice.BlockCluster || be.Reason != "cluster fallback: local share exhausted" {
				t.Fatalf("%s: refusal in fallback: %v (%s)", user, be, be.Reason)
			}
		}
		if admitted != want {
			t.Errorf("%s: admitted %d in fallback, want its local share, %d", user, admitted, want)
		}
	}
	if st, _ := g.ClusterStatus(); !st.Fallback {
		t.Fatal("remote decisions after the kill")
	}
	srv.Restart()
	began := time.Now()
	for {
		enterAs(t, g, "post", "carol") // decisions in fallback queue the probes
		if st, _ := g.ClusterStatus(); !st.Fallback {
			break
		}
		if time.Since(began) > 10*time.Second {
			t.Fatal("still in fallback 10 s after Redis came back")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The restarted Redis has empty buckets: dave gets the whole 10.
	admitted := 0
	for i := 0; i < 15; i++ {
		if enterAs(t, g, "post", "dave") == nil {
			admitted++
		}
	}
	if admitted != 10 {
		t.Errorf("dave: admitted %d after recovery, want the store's 10", admitted)
	}
}

// TestParamLeasesGiveBack: a leasing param rule holds permits of each
// user's bucket ahead of use; an equal reload keeps them; removing the
// rule gives them back to Redis, and nothing is dropped.
func TestParamLeasesGiveBack(t *testing.T) {
	srv := redistest.Start(t)
	store := New(srv.Client(t))
	g := clusterEngine(t, store, sluice.ClusterConfig{Timeout: time.Second})
	// A year's duration: Redis refills 0.03 tokens a second, nothing the
	// test can see.
	const threshold = 1_000_000
	dur := maxParamDuration
	rule := rules.Param{Resource: "api", Key: "user", Threshold: threshold, Duration: dur, Cluster: &rules.Cluster{Leases: true}}
	loadParam(t, g, rule)
	const admitted = 200
	for i := 0; i < admitted; i++ {
		if be := enterAs(t, g, "api", "alice"); be != nil {
			t.Fatal(be)
		}
	}
	key, _ := store.budgetKeys(escapeTag(paramBudget("api", "reject", dur, "alice")), algBucket)
	tokens := func() float64 { return hfloat(t, store.c, key, "t") }
	held := threshold - admitted - tokens()
	t.Logf("Redis holds %.1f tokens after %d admissions: %.1f leased ahead", tokens(), admitted, held)
	if held < 1 {
		t.Fatalf("nothing leased ahead: %.1f", held)
	}
	if err := g.LoadRules(rules.Set{Param: []rules.Param{equalCopy(rule)}}); err != nil {
		t.Fatal(err)
	}
	if st, _ := g.ClusterStatus(); st.Given != 0 {
		t.Errorf("an equal reload gave %d back", st.Given)
	}
	loadParam(t, g)
	deadline := time.Now().Add(10 * time.Second)
	for tokens() < threshold-admitted-0.5 {
		if time.Now().After(deadline) {
			t.Fatalf("Redis holds %.1f tokens, want %d back", tokens(), threshold-admitted)
		}
		time.Sleep(time.Millisecond)
	}
	st, _ := g.ClusterStatus()
	if st.Dropped != 0 {
		t.Errorf("dropped %d permits", st.Dropped)
	}
	if !strings.Contains(key, "{shop/param/api/kuser/reject/") {
		t.Errorf("key %q", key)
	}
}

// TestParamNoLeakAfterClose: engines running strict and leasing cluster
// param rules leave no goroutine behind once closed (with their clients).
func TestParamNoLeakAfterClose(t *testing.T) {
	srv := redistest.Start(t)
	before := goleak.IgnoreCurrent()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	g := sluice.New(sluice.WithCluster(New(client), sluice.ClusterConfig{App: "shop", Timeout: time.Second}))
	loadParam(t, g,
		rules.Param{Resource: "a", Key: "user", Threshold: 5, Duration: time.Minute, Cluster: &rules.Cluster{}},
		rules.Param{Resource: "b", Key: "user", Threshold: 1000, Cluster: &rules.Cluster{Leases: true}},
		rules.Param{Resource: "c", Key: "user", Threshold: 10, Throttle: &rules.Throttle{}, Cluster: &rules.Cluster{}})
	for i := 0; i < 50; i++ {
		for _, res := range []string{"a", "b", "c"} {
			enterAs(t, g, res, fmt.Sprint("user-", i%7))
		}
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, before)
}
