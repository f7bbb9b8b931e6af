package param

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/lease"
	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
)

// memStore is a cluster.Store in memory deciding on the test's clock: a
// token bucket (Limit per Interval, at most Burst, full at first use) and
// GCRA, as the Redis scripts decide, with a switch that makes every call
// fail. It counts the permits granted and given back per key.
type memStore struct {
	clk core.Clock

	mu      sync.Mutex
	down    bool
	late    int // every late-th Take is decided, then answered as late
	tokens  map[string]float64
	last    map[string]int64
	tat     map[string]float64
	granted map[string]int64
	given   map[string]int64
	takes   int
}

var errDown = errors.New("memstore: down")

func newMemStore(clk core.Clock) *memStore {
	return &memStore{clk: clk, tokens: map[string]float64{}, last: map[string]int64{}, tat: map[string]float64{},
		granted: map[string]int64{}, given: map[string]int64{}}
}

func (s *memStore) setDown(d bool) { s.mu.Lock(); s.down = d; s.mu.Unlock() }

func (s *memStore) Take(ctx context.Context, reqs []cluster.Request, grants []cluster.Grant) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.takes++
	if s.down {
		return errDown
	}
	now := s.clk.Nanotime()
	for i, r := range reqs {
		b := r.Budget
		var g cluster.Grant
		if b.Algorithm == cluster.Pacing {
			step := float64(b.Interval) / b.Limit
			tat := math.Max(s.tat[b.Key], float64(now))
			if wait := time.Duration(tat - float64(now)); wait <= b.MaxQueue {
				g = cluster.Grant{N: r.N, Wait: wait}
				s.tat[b.Key] = tat + float64(r.N)*step
			} else {
				g.RetryAfter = wait - b.MaxQueue
			}
		} else {
			burst := b.Burst
			if burst == 0 {
				burst = b.Limit
			}
			tok, ok := s.tokens[b.Key]
			if !ok {
				tok = burst
			} else {
				tok = math.Min(burst, tok+float64(now-s.last[b.Key])*b.Limit/float64(b.Interval))
			}
			s.last[b.Key] = now
			n := r.N
			if float64(n) > tok {
				if r.Partial {
					n = int64(tok)
				} else {
					n = 0
				}
			}
			if n > 0 {
				tok -= float64(n)
				g.N = n
			}
			if n < r.N {
				g.RetryAfter = time.Duration(math.Ceil((float64(r.N-n) - (tok - math.Floor(tok))) * float64(b.Interval) / b.Limit))
			}
			s.tokens[b.Key] = tok
		}
		s.granted[b.Key] += g.N
		grants[i] = g
	}
	if s.late > 0 && s.takes%s.late == 0 {
		return context.DeadlineExceeded // decided, but the answer came too late
	}
	return nil
}

func (s *memStore) Give(ctx context.Context, b cluster.Budget, n int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return errDown
	}
	s.given[b.Key] += n
	if b.Algorithm != cluster.Pacing {
		burst := b.Burst
		if burst == 0 {
			burst = b.Limit
		}
		s.tokens[b.Key] = math.Min(burst, s.tokens[b.Key]+float64(n))
	}
	return nil
}

func (s *memStore) Beat(context.Context, cluster.Member, time.Duration) (int, error) { return 1, nil }

func (s *memStore) Members(context.Context, string) ([]cluster.Member, error) { return nil, nil }

// totals returns the permits granted and given back over every key, and the
// number of keys.
func (s *memStore) totals() (granted, given int64, keys []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, n := range s.granted {
		granted += n
		keys = append(keys, k)
	}
	for _, n := range s.given {
		given += n
	}
	return granted, given, keys
}

// fleet is n Managers (instances) on one memStore and one ManualClock.
type fleet struct {
	clk *sluicetest.ManualClock
	st  *memStore
	ms  []*lease.Manager
}

func newFleet(t *testing.T, n int) *fleet {
	t.Helper()
	f := &fleet{clk: sluicetest.NewManualClock(start)}
	f.st = newMemStore(f.clk)
	for i := 0; i < n; i++ {
		m, err := lease.New(lease.Config{Store: f.st, Clock: f.clk, Timeout: time.Hour, ProbeInterval: time.Second})
		require.NoError(t, err)
		m.SetLive(n)
		t.Cleanup(func() { _ = m.Close() })
		f.ms = append(f.ms, m)
	}
	return f
}

// build returns instance i's controller of cluster rule r, built against
// old (nil for a first load).
func (f *fleet) build(t *testing.T, i int, r rules.Param, old map[string][]*Controller) (*Controller, map[string][]*Controller) {
	t.Helper()
	if r.Resource == "" {
		r.Resource = "res"
	}
	got, err := Build([]rules.Param{r}, old, NewRemote(f.ms[i], "shop"))
	require.NoError(t, err)
	return got[r.Resource][0], got
}

// enter runs one entry of value v at the clock's now.
func (f *fleet) enter(c *Controller, v string) *core.BlockError {
	ec := &entry.Context{Resource: "res", Batch: 1, Start: f.clk.Nanotime()}
	return c.CheckKey(context.Background(), ec, v, f.clk)
}

// TestClusterStrictPerValueBudget: 5 per minute per user shared by three
// instances, strict: every user gets exactly 5 whichever instance serves
// it, however the entries interleave; exceptions and batches too large
// are decided without the store.
func TestClusterStrictPerValueBudget(t *testing.T) {
	f := newFleet(t, 3)
	r := rules.Param{Key: "user", Threshold: 5, Duration: time.Minute, Cluster: &rules.Cluster{},
		Exceptions: map[string]int64{"vip": 8, "banned": 0}}
	cs := make([]*Controller, 3)
	for i := range cs {
		cs[i], _ = f.build(t, i, r, nil)
	}
	users := []string{"alice", "bob", "carol", "vip", "banned", strings.Repeat("x", 100_000)}
	want := map[string]int{"vip": 8, "banned": 0}
	for round := 0; round < 20; round++ {
		for _, u := range users {
			for i, c := range cs {
				be := f.enter(c, u)
				if be == nil {
					want[u+"#"]++
					continue
				}
				if u == "banned" {
					require.Equal(t, core.BlockParam, be.Type)
					continue
				}
				require.Equal(t, core.BlockCluster, be.Type, "instance %d, %q: %v", i, u[:min(len(u), 8)], be)
				require.Equal(t, "cluster budget exhausted", be.Reason)
				require.Greater(t, be.RetryAfter, time.Duration(0))
			}
		}
	}
	for _, u := range users {
		w, ok := want[u]
		if !ok {
			w = 5
		}
		assert.Equal(t, w, want[u+"#"], "admitted for %q", u[:min(len(u), 8)])
	}
	// One budget per value, its key bounded whatever the value.
	_, _, keys := f.st.totals()
	assert.Len(t, keys, 5, "budgets (banned never reaches the store)")
	for _, k := range keys {
		assert.True(t, strings.HasPrefix(k, "shop/param/res/kuser/reject/60000ms/"), k)
		assert.Len(t, k, len("shop/param/res/kuser/reject/60000ms/")+2*digestLen, k)
	}
	// A minute later (Redis's clock in production; the test clock here)
	// each user has 5 again, not more.
	f.clk.Advance(time.Minute)
	n := 0
	for i := 0; i < 10; i++ {
		if f.enter(cs[i%3], "alice") == nil {
			n++
		}
	}
	assert.Equal(t, 5, n)
	// A batch larger than the value's limit never reaches the store.
	f.st.mu.Lock()
	takes := f.st.takes
	f.st.mu.Unlock()
	be := cs[0].CheckKey(context.Background(), &entry.Context{Resource: "res", Batch: 6, Start: f.clk.Nanotime()}, "dave", f.clk)
	require.NotNil(t, be)
	assert.Equal(t, "batch larger than threshold", be.Reason)
	f.st.mu.Lock()
	assert.Equal(t, takes, f.st.takes)
	f.st.mu.Unlock()
}

// TestClusterBurstAndPerInstance: Burst is the shared bucket's extra room;
// a per-instance rule's budget is Threshold (and its burst) times the live
// instances.
func TestClusterBurstAndPerInstance(t *testing.T) {
	tests := []struct {
		name string
		mode rules.ClusterMode
		want int
	}{
		{"total", rules.ClusterTotal, 5 + 2},
		{"per-instance", rules.ClusterPerInstance, 3 * (5 + 2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFleet(t, 3)
			r := rules.Param{Threshold: 5, Burst: 2, Duration: time.Hour, Cluster: &rules.Cluster{Mode: tt.mode}}
			cs := make([]*Controller, 3)
			for i := range cs {
				cs[i], _ = f.build(t, i, r, nil)
			}
			n := 0
			for i := 0; i < 100; i++ {
				if f.enter(cs[i%3], "u") == nil {
					n++
				}
			}
			assert.Equal(t, tt.want, n)
		})
	}
}

// TestClusterThrottle: a throttle rule paces each value on the store's
// schedule; a wait beyond MaxQueueing is refused with the time to retry.
func TestClusterThrottle(t *testing.T) {
	f := newFleet(t, 2)
	r := rules.Param{Threshold: 10, Throttle: &rules.Throttle{}, Cluster: &rules.Cluster{}}
	a, _ := f.build(t, 0, r, nil)
	b, _ := f.build(t, 1, r, nil)
	require.Nil(t, f.enter(a, "u"))
	be := f.enter(b, "u")
	require.NotNil(t, be, "the second slot is 100 ms away; MaxQueueing is 0")
	assert.Equal(t, core.BlockCluster, be.Type)
	assert.Equal(t, 100*time.Millisecond, be.RetryAfter)
	require.Nil(t, f.enter(b, "v"), "another value has its own schedule")
	f.clk.Advance(100 * time.Millisecond)
	require.Nil(t, f.enter(b, "u"))

	// With room to queue, an entry waits for its slot on the clock.
	r.Throttle = &rules.Throttle{MaxQueueing: time.Second}
	q, _ := f.build(t, 0, r, nil)
	f.clk.Advance(time.Second)
	require.Nil(t, f.enter(q, "w"))
	done := make(chan *core.BlockError)
	go func() { done <- f.enter(q, "w") }()
	// Move the clock 1 ms at a time until the entry passes: never before
	// its slot, 100 ms after the first.
	var moved time.Duration
	for {
		select {
		case be := <-done:
			require.Nil(t, be)
			assert.GreaterOrEqual(t, moved, 100*time.Millisecond)
			return
		default:
		}
		// Wait (briefly) for the entry's timer; the entry may also be
		// between its grant and its sleep, or done.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		_ = f.clk.BlockUntil(ctx, 1)
		cancel()
		f.clk.Advance(time.Millisecond)
		moved += time.Millisecond
		require.Less(t, moved, time.Hour)
	}
}

// TestClusterFallback: while the store fails every value is held to its
// local share (Threshold over the live instances, or LocalThreshold) less
// what this instance took from the store ("a" took one), or passes, or is
// refused, by the rule's fallback, from the first failed call on; a probe
// brings the store back.
func TestClusterFallback(t *testing.T) {
	tests := []struct {
		name    string
		section rules.Cluster
		want    map[string]int // admitted per value in fallback
		reason  string
	}{
		{"share", rules.Cluster{}, map[string]int{"a": 2, "b": 3, "vip": 10}, "cluster fallback: local share exhausted"},
		{"local threshold", rules.Cluster{LocalThreshold: 2}, map[string]int{"a": 1, "b": 2, "vip": 10}, "cluster fallback: local share exhausted"},
		{"per-instance", rules.Cluster{Mode: rules.ClusterPerInstance}, map[string]int{"a": 9, "b": 10, "vip": 30}, "cluster fallback: local share exhausted"},
		{"pass", rules.Cluster{Fallback: rules.FallbackPass}, map[string]int{"a": 50, "b": 50, "vip": 50}, ""},
		{"block", rules.Cluster{Fallback: rules.FallbackBlock}, map[string]int{"a": 0, "b": 0, "vip": 0}, "cluster fallback: block"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFleet(t, 3)
			sec := tt.section
			r := rules.Param{Threshold: 10, Duration: time.Minute, Cluster: &sec, Exceptions: map[string]int64{"vip": 30}}
			c, _ := f.build(t, 0, r, nil)
			require.Nil(t, f.enter(c, "a"))
			f.st.setDown(true)
			for _, v := range []string{"a", "b", "vip"} {
				n := 0
				for i := 0; i < 50; i++ {
					be := f.enter(c, v)
					if be == nil {
						n++
						continue
					}
					assert.Equal(t, core.BlockCluster, be.Type)
					assert.Equal(t, tt.reason, be.Reason)
				}
				assert.Equal(t, tt.want[v], n, "admitted for %q in fallback", v)
			}
			assert.Equal(t, lease.Fallback, f.ms[0].Mode())
			// The store comes back: the first decision a probe interval
			// later queues a probe, whose success returns to the store.
			f.st.setDown(false)
			f.clk.Advance(time.Second)
			f.enter(c, "z")
			require.Eventually(t, func() bool { return f.ms[0].Mode() == lease.Remote }, 10*time.Second, time.Millisecond)
			granted, _, _ := f.st.totals()
			require.Nil(t, f.enter(c, "z2"))
			g2, _, _ := f.st.totals()
			assert.Equal(t, granted+1, g2, "decided by the store again")
		})
	}
}

// TestClusterLeases: a leasing rule keeps one Limiter per value, at most
// Capacity of them; a forgotten value, a changed budget and a removed rule
// give their unused permits back, so the store's books balance: granted =
// admitted + given back.
func TestClusterLeases(t *testing.T) {
	f := newFleet(t, 1)
	r := rules.Param{Threshold: 1000, Duration: time.Minute, Capacity: 4, Cluster: &rules.Cluster{Leases: true}}
	c, set := f.build(t, 0, r, nil)
	admitted := int64(0)
	for round := 0; round < 3; round++ {
		for _, v := range []string{"a", "b", "c", "d", "e", "f"} {
			for i := 0; i < 5; i++ {
				require.Nil(t, f.enter(c, v))
				admitted++
			}
			assert.LessOrEqual(t, c.cl.leases.len(), 4, "values holding leases")
		}
	}
	granted, _, _ := f.st.totals()
	assert.Greater(t, granted, admitted, "leases hold permits ahead of use")

	// An unchanged reload keeps the Limiters and their leases.
	c2, set2 := f.build(t, 0, r, set)
	require.Same(t, c.cl.leases, c2.cl.leases)
	g2, given, _ := f.st.totals()
	assert.Equal(t, granted, g2)
	// A reload with another threshold keeps the Limiters' cache; each
	// value's Limiter is replaced (the old one's permits go back) at its
	// next entry.
	r3 := r
	r3.Threshold = 900
	c3, set3 := f.build(t, 0, r3, set2)
	require.Same(t, c.cl.leases, c3.cl.leases)
	require.Nil(t, f.enter(c3, "a"))
	admitted++
	// Removing the rule gives back what every value holds.
	_, err := Build(nil, set3, NewRemote(f.ms[0], "shop"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		g, gv, _ := f.st.totals()
		given = gv
		return g == admitted+gv
	}, 10*time.Second, time.Millisecond)
	assert.Greater(t, given, int64(0))
	assert.Equal(t, 0, c.cl.leases.len())
	assert.Equal(t, int64(0), f.ms[0].Stats().Dropped)
}

// TestClusterNeedsRemote: without a store, cluster rules are refused with
// the reason, naming the rule.
func TestClusterNeedsRemote(t *testing.T) {
	_, err := Build([]rules.Param{{Resource: "a", Threshold: 1}, {Resource: "b", Threshold: 1, Cluster: &rules.Cluster{}}}, nil, nil)
	var e *rules.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, 1, e.Index)
	assert.Equal(t, "Cluster", e.Field)
	assert.Contains(t, err.Error(), "sluice.WithCluster")
	_, err = NewController(rules.Param{Resource: "b", Threshold: 1, Cluster: &rules.Cluster{}})
	require.ErrorAs(t, err, &e)
}

// TestDigestKeys: the budget key of a value is its digest, the same for
// every instance and bounded whatever the value; values whose fingerprints
// differ in one byte get different budgets.
func TestDigestKeys(t *testing.T) {
	rm := NewRemote(nil, "app")
	r := rules.Param{Resource: "r", Index: 2, Threshold: 1, Cluster: &rules.Cluster{}}
	cc := newClusterCtl(&r, rm, modeReject)
	k := func(v string) string { d := digestOf(v); return cc.budget(&d, terms{limit: 1}).Key }
	assert.Equal(t, k("alice"), newClusterCtlKey(&r, "alice"))
	assert.NotEqual(t, k("alice"), k("alicf"))
	assert.Len(t, k(strings.Repeat("{", 1<<20)), len(k("")))
	assert.NotContains(t, k("{tag}%\r\n"), "{", "the value's bytes never reach the key")
	assert.Equal(t, "app/param/r/i2/reject/1000ms/", cc.prefix)
}

// newClusterCtlKey builds the key of v through a second controller, as
// another instance would.
func newClusterCtlKey(r *rules.Param, v string) string {
	cc := newClusterCtl(r, NewRemote(nil, "app"), modeReject)
	d := digestOf(v)
	return cc.budget(&d, terms{limit: 1}).Key
}

// TestClusterLeasesConcurrent: goroutines hammer a leasing rule with more
// values than its Capacity, so values are evicted (their Limiters closed)
// while other goroutines use them. Each value's budget is never exceeded,
// and once the rule is removed the store's books balance: every permit
// granted was admitted or given back.
func TestClusterLeasesConcurrent(t *testing.T) {
	f := newFleet(t, 1)
	const limit = 40
	r := rules.Param{Threshold: limit, Duration: time.Hour, Capacity: 8, Cluster: &rules.Cluster{Leases: true}}
	c, set := f.build(t, 0, r, nil)
	values := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"}
	var (
		mu       sync.Mutex
		admitted = map[string]int{}
		wg       sync.WaitGroup
	)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				v := values[(i*7+w*5)%len(values)]
				if f.enter(c, v) == nil {
					mu.Lock()
					admitted[v]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	total := int64(0)
	for v, n := range admitted {
		assert.LessOrEqual(t, n, limit, "value %q", v)
		total += int64(n)
	}
	assert.LessOrEqual(t, c.cl.leases.len(), 8)
	_, err := Build(nil, set, NewRemote(f.ms[0], "shop"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		g, gv, _ := f.st.totals()
		return g == total+gv
	}, 10*time.Second, time.Millisecond, "granted = admitted + given back")
	assert.Equal(t, int64(0), f.ms[0].Stats().Dropped)
}

// TestClusterLeasesFollowTerms: a leasing value's Limiter is replaced, and
// its lease given back, when its budget's terms change: here the live count
// of a per-instance rule. Throttle rules lease stretches of the schedule.
func TestClusterLeasesFollowTerms(t *testing.T) {
	f := newFleet(t, 1)
	r := rules.Param{Threshold: 100, Duration: time.Minute, Cluster: &rules.Cluster{Leases: true, Mode: rules.ClusterPerInstance}}
	c, _ := f.build(t, 0, r, nil)
	for i := 0; i < 20; i++ {
		require.Nil(t, f.enter(c, "u"))
	}
	lc := c.cl.leases
	lc.mu.Lock()
	first := lc.m[digestOf("u")].lim
	lc.mu.Unlock()
	assert.Equal(t, 100.0, first.Spec().Budget.Limit)
	f.ms[0].SetLive(3)
	require.Nil(t, f.enter(c, "u"))
	lc.mu.Lock()
	second := lc.m[digestOf("u")].lim
	lc.mu.Unlock()
	assert.NotSame(t, first, second)
	assert.True(t, first.Closed())
	assert.Equal(t, 300.0, second.Spec().Budget.Limit)

	p := rules.Param{Resource: "p", Threshold: 10, Throttle: &rules.Throttle{MaxQueueing: time.Second}, Cluster: &rules.Cluster{Leases: true}}
	pc, _ := f.build(t, 0, p, nil)
	require.Nil(t, f.enter(pc, "v"))
	ec := &entry.Context{Resource: "p", Batch: 1, Start: f.clk.Nanotime()}
	done := make(chan *core.BlockError)
	go func() { done <- pc.CheckKey(context.Background(), ec, "v", f.clk) }()
	var moved time.Duration
	for {
		select {
		case be := <-done:
			require.Nil(t, be)
			assert.GreaterOrEqual(t, moved, 100*time.Millisecond, "the second slot of v")
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		_ = f.clk.BlockUntil(ctx, 1)
		cancel()
		f.clk.Advance(time.Millisecond)
		moved += time.Millisecond
		require.Less(t, moved, time.Hour)
	}
}

// TestClusterShareBudgetPlusOne: every value of a strict rule gets at most
// its budget + 1 over a run, whatever the store does: a fleet sharing the
// value evenly (the load balancer's round robin) at twice ten times its
// rate, through the store answering, then failing (every instance on its
// local share; the store keeps its buckets and its clock runs on, as a
// Redis that is stopped or unreachable), answering again (the shares'
// admissions charged to it), and answering every third call too late (the
// store charges the request; the instance decides by its share). Counted
// per value on the test's clock over the run and in every aligned
// Duration. Before, each instance's share of a budget of 1 rounded up to 1
// (ten instances: 10 per value in the first second of the fallback), every
// share started full whatever the store had granted, and the recovered
// store admitted its refilled bucket on top of the shares' admissions.
func TestClusterShareBudgetPlusOne(t *testing.T) {
	tests := []struct {
		name      string
		instances int
		threshold int64
		burst     int64
		duration  time.Duration
	}{
		{"1 per minute, 10 instances", 10, 1, 0, time.Minute},
		{"5 per 10 s, 3 instances", 3, 5, 0, 10 * time.Second},
		{"5+2 per 10 s, 4 instances", 4, 5, 2, 10 * time.Second},
		{"7 per 10 s, 2 instances", 2, 7, 0, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const (
				users = 40
				steps = 240 // 12 Durations
			)
			f := newFleet(t, tt.instances)
			r := rules.Param{Key: "user", Threshold: tt.threshold, Burst: tt.burst, Duration: tt.duration, Cluster: &rules.Cluster{}}
			cs := make([]*Controller, tt.instances)
			olds := make([]map[string][]*Controller, tt.instances)
			for i := range cs {
				cs[i], olds[i] = f.build(t, i, r, nil)
			}
			step := tt.duration / 20
			var (
				total  [users]int64
				window [users][steps / 20]int64
				fell   int
			)
			for s := 0; s < steps; s++ {
				switch s {
				case 30: // the store fails
					f.st.setDown(true)
				case 100: // an equal reload keeps the shares and their debts
					for i := range cs {
						cs[i], olds[i] = f.build(t, i, r, olds[i])
					}
				case 110: // and answers again
					f.st.setDown(false)
				case 170: // every third call answered too late
					f.st.mu.Lock()
					f.st.late = 3
					f.st.mu.Unlock()
				case 210:
					f.st.mu.Lock()
					f.st.late = 0
					f.st.mu.Unlock()
				}
				for u := 0; u < users; u++ {
					for k := 0; k < 2; k++ {
						i := (s*2 + k + u) % tt.instances
						be := f.enter(cs[i], fmt.Sprint("user-", u))
						if be == nil {
							total[u]++
							window[u][s/20]++
							continue
						}
						require.Equal(t, core.BlockCluster, be.Type, "%v", be)
						if strings.HasPrefix(be.Reason, "cluster fallback") {
							fell++
						}
					}
				}
				f.clk.Advance(step)
			}
			if fell == 0 {
				t.Fatal("no entry decided by the fallback")
			}
			// A token bucket of t+b, refilled t per Duration, starting full:
			// over the run at most t+b + t × run / Duration; in one Duration
			// at most t+b + t.
			size := tt.threshold + tt.burst
			run := size + tt.threshold*int64(steps)/20
			for u := 0; u < users; u++ {
				assert.LessOrEqual(t, total[u], run+1, "user-%d over the run (budget %d)", u, run)
				for w, n := range window[u] {
					assert.LessOrEqual(t, n, size+tt.threshold+1, "user-%d in Duration %d", u, w)
				}
			}
			t.Logf("budget over the run %d; user-0 admitted %d, per Duration %v; %d fallback refusals", run, total[0], window[0], fell)
		})
	}
}

// TestClusterThrottleShareBudgetPlusOne: a strict throttle rule (MaxQueueing
// 0) through the faults of TestClusterShareBudgetPlusOne: the store paces,
// fails for four Durations (an equal reload in the middle), paces again,
// then answers every third call too late. Every value gets over the run at
// most what a token bucket of Threshold (refilled Threshold per Duration,
// starting full) admits + 1: the shares pace at Threshold / N per
// Duration, not rounded, a share below one request per Duration admitting
// its first no sooner than its credit allows, charged with the store's
// grants and emptied by its refusals. In one aligned Duration: at most
// Threshold + max(Threshold, N) + 1 (each instance's schedule holds one
// request at most; with t >= N that is the bucket's 2t + 1). Before, each
// instance's share was Threshold / N rounded down, at least 1, and every
// schedule was idle when the fallback began: with t < N the fleet paced N
// per Duration (1 per minute over ten instances: 75 for a budget of 13).
func TestClusterThrottleShareBudgetPlusOne(t *testing.T) {
	tests := []struct {
		name      string
		instances int
		threshold int64
		duration  time.Duration
	}{
		{"1 per minute, 10 instances", 10, 1, time.Minute},
		{"2 per 10 s, 3 instances", 3, 2, 10 * time.Second},
		{"5 per 10 s, 3 instances", 3, 5, 10 * time.Second},
		{"7 per 10 s, 2 instances", 2, 7, 10 * time.Second},
		{"3 per 10 s, 4 instances", 4, 3, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const (
				users = 40
				steps = 240 // 12 Durations
			)
			f := newFleet(t, tt.instances)
			r := rules.Param{Key: "user", Threshold: tt.threshold, Throttle: &rules.Throttle{}, Duration: tt.duration, Cluster: &rules.Cluster{}}
			cs := make([]*Controller, tt.instances)
			olds := make([]map[string][]*Controller, tt.instances)
			for i := range cs {
				cs[i], olds[i] = f.build(t, i, r, nil)
			}
			step := tt.duration / 20
			var (
				total  [users]int64
				window [users][steps / 20]int64
				fell   int
				inFall int64
			)
			for s := 0; s < steps; s++ {
				switch s {
				case 30:
					f.st.setDown(true)
				case 100:
					for i := range cs {
						cs[i], olds[i] = f.build(t, i, r, olds[i])
					}
				case 110:
					f.st.setDown(false)
				case 170:
					f.st.mu.Lock()
					f.st.late = 3
					f.st.mu.Unlock()
				case 210:
					f.st.mu.Lock()
					f.st.late = 0
					f.st.mu.Unlock()
				}
				for u := 0; u < users; u++ {
					for k := 0; k < 2; k++ {
						i := (s*2 + k + u) % tt.instances
						be := f.enter(cs[i], fmt.Sprint("user-", u))
						if be == nil {
							total[u]++
							window[u][s/20]++
							if s >= 30 && s < 110 {
								inFall++
							}
							continue
						}
						require.Equal(t, core.BlockCluster, be.Type, "%v", be)
						if strings.HasPrefix(be.Reason, "cluster fallback") {
							fell++
						}
					}
				}
				f.clk.Advance(step)
			}
			if fell == 0 {
				t.Fatal("no entry decided by the fallback")
			}
			run := tt.threshold + tt.threshold*int64(steps)/20
			for u := 0; u < users; u++ {
				assert.LessOrEqual(t, total[u], run+1, "user-%d over the run (budget %d)", u, run)
				for w, n := range window[u] {
					assert.LessOrEqual(t, n, tt.threshold+max(tt.threshold, int64(tt.instances))+1, "user-%d in Duration %d", u, w)
				}
			}
			t.Logf("budget over the run %d; user-0 admitted %d, per Duration %v; all users %d while the store was down; %d fallback refusals",
				run, total[0], window[0], inFall, fell)
		})
	}
}

// TestClusterShareLongFallback: a store down for 20 Durations after two of
// service, both behaviors. From the fallback's start the shares admit
// together at most the bucket and its refills since, t + b + t × span /
// Duration (+ 1), over every span from there; in one Duration at most
// t + max(t + b, N), each instance holding at most max(t + b, N) credits
// (one request when its share is below one). With t + b < N that is N in
// one Duration: the shares are not coordinated, and every instance's first
// request comes (N − t − b) / t Durations into the fallback, as
// docs/design/cluster.md says under "What the bound does not cover".
func TestClusterShareLongFallback(t *testing.T) {
	tests := []struct {
		name      string
		behavior  behavior
		instances int
		threshold int64
		burst     int64
		duration  time.Duration
	}{
		{"reject 1 per minute, 10 instances", behReject, 10, 1, 0, time.Minute},
		{"reject 5+2 per 10 s, 4 instances", behReject, 4, 5, 2, 10 * time.Second},
		{"throttle 1 per minute, 10 instances", behThrottle, 10, 1, 0, time.Minute},
		{"throttle 2 per 10 s, 3 instances", behThrottle, 3, 2, 0, 10 * time.Second},
		{"throttle 7 per 10 s, 2 instances", behThrottle, 2, 7, 0, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const steps = 440 // 22 Durations of 20 steps
			f := newFleet(t, tt.instances)
			r := rules.Param{Key: "user", Threshold: tt.threshold, Burst: tt.burst, Throttle: tt.behavior.section(0),
				Duration: tt.duration, Cluster: &rules.Cluster{}}
			cs := make([]*Controller, tt.instances)
			for i := range cs {
				cs[i], _ = f.build(t, i, r, nil)
			}
			var (
				window [steps / 20]int64
				fellAt = 40 // the store fails after two Durations
				since  int64
			)
			size := tt.threshold + tt.burst
			for s := 0; s < steps; s++ {
				if s == fellAt {
					f.st.setDown(true)
				}
				for i, c := range cs {
					if f.enter(c, "u") != nil {
						continue
					}
					window[s/20]++
					if s >= fellAt {
						since++
						// Every span from the fallback's start: the bucket
						// and its refills, t per Duration (20 steps).
						budget := size + tt.threshold*int64(s-fellAt)/20
						require.LessOrEqual(t, since, budget+1, "instance %d, step %d", i, s)
					}
				}
				f.clk.Advance(tt.duration / 20)
			}
			for w, n := range window {
				assert.LessOrEqual(t, n, tt.threshold+max(size, int64(tt.instances)), "Duration %d", w)
			}
			t.Logf("per Duration %v; %d in the fallback's %d Durations (budget %d)", window, since, (steps-fellAt)/20,
				size+tt.threshold*int64(steps-fellAt)/20)
		})
	}
}

// TestClusterThrottleShareConcurrent: with the store down, goroutines on
// every instance enter the same values at once (the clock moves between
// rounds): the throttle shares, schedules under the cache's locks, admit
// at most the bucket and its refills since the fallback began + 1 per
// value, however the entries interleave (run with -race).
func TestClusterThrottleShareConcurrent(t *testing.T) {
	const (
		instances = 3
		workers   = 4
		rounds    = 200 // 10 Durations
		threshold = 2
	)
	f := newFleet(t, instances)
	r := rules.Param{Key: "user", Threshold: threshold, Throttle: &rules.Throttle{}, Duration: 10 * time.Second, Cluster: &rules.Cluster{}}
	cs := make([]*Controller, instances)
	for i := range cs {
		cs[i], _ = f.build(t, i, r, nil)
	}
	f.st.setDown(true)
	values := []string{"a", "b", "c"}
	var (
		mu       sync.Mutex
		admitted = map[string]int64{}
	)
	for round := 0; round < rounds; round++ {
		var wg sync.WaitGroup
		for _, c := range cs {
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for _, v := range values {
						if f.enter(c, v) == nil {
							mu.Lock()
							admitted[v]++
							mu.Unlock()
						}
					}
				}()
			}
		}
		wg.Wait()
		f.clk.Advance(500 * time.Millisecond)
	}
	budget := int64(threshold + threshold*rounds/20)
	for _, v := range values {
		assert.LessOrEqual(t, admitted[v], budget+1, "value %q", v)
		assert.Greater(t, admitted[v], int64(0), "value %q", v)
	}
	t.Logf("admitted %v of a budget of %d each", admitted, budget)
}
