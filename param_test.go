package sluice

import (
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/param"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/slots"
)

func mustLoadParam(t testing.TB, g *Engine, rs ...rules.Param) {
	t.Helper()
	_, err := loadParams(g, rs)
	require.NoError(t, err)
}

// paramCtl returns the controller of the i-th param rule on res.
func paramCtl(g *Engine, res string, i int) *param.Controller {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.param.ctl[res][i]
}

func TestParamPerUserAndPerIP(t *testing.T) {
	g, clk := newTestEngine(t, 1e12)
	mustLoadParam(t, g,
		rules.Param{Resource: "GET /feed", Threshold: 2, Duration: time.Minute, Exceptions: map[string]int64{"vip": 4}},
		rules.Param{Resource: "GET /feed", Key: "ip", Threshold: 5, Duration: time.Minute},
	)
	entry := func(user, ip string) bool {
		return try(g, "GET /feed", WithArgs(user), WithAttachment("ip", ip))
	}
	tests := []struct {
		user, ip string
		want     bool
	}{
		{"alice", "10.0.0.1", true},
		{"alice", "10.0.0.1", true},
		{"alice", "10.0.0.1", false}, // alice: 2 per minute
		{"bob", "10.0.0.1", true},    // bob is counted apart
		{"vip", "10.0.0.1", true},
		{"vip", "10.0.0.2", true},
		{"vip", "10.0.0.2", true},
		{"vip", "10.0.0.2", true},
		{"vip", "10.0.0.2", false}, // vip: 4 per minute
		{"carol", "10.0.0.1", true},
		{"dave", "10.0.0.1", false}, // 10.0.0.1: 5 per minute
	}
	for i, tt := range tests {
		assert.Equal(t, tt.want, entry(tt.user, tt.ip), "entry %d (%s from %s)", i, tt.user, tt.ip)
	}
	_, err := g.Entry("GET /feed", WithArgs("alice"))
	var be *core.BlockError
	require.ErrorAs(t, err, &be)
	assert.True(t, errors.Is(err, core.ErrBlocked))
	assert.Equal(t, core.BlockParam, be.Type)
	assert.Equal(t, 30*time.Second, be.RetryAfter)
	clk.Advance(30 * time.Second)
	assert.True(t, entry("alice", "10.0.0.9"), "one token back after Duration/Threshold")
}

func TestParamRulesRefusedWholeKeepOld(t *testing.T) {
	g, _ := newTestEngine(t, 1e12)
	good := []rules.Param{{Resource: "r", Threshold: 1, Exceptions: map[string]int64{"v": 2}}}
	changed, err := loadParams(g, good)
	require.NoError(t, err)
	require.True(t, changed)
	changed, err = loadParams(g, []rules.Param{{Resource: "r", Threshold: 1, Exceptions: map[string]int64{"v": 2}}})
	require.NoError(t, err)
	assert.False(t, changed, "an equal set (maps compared by content) changes nothing")

	_, err = loadParams(g, []rules.Param{{Resource: "r", Threshold: 9}, {Resource: "r", Threshold: 1, Burst: 1, Throttle: &rules.Throttle{}}})
	var re *rules.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, 1, re.Index)
	assert.Equal(t, "Burst", re.Field)
	assert.Equal(t, good, g.Rules().Param, "old rules stay in force")
	assert.True(t, try(g, "r", WithArgs("u")))
	assert.False(t, try(g, "r", WithArgs("u")), "old threshold 1 still enforced")

	// The engine keeps its own copies of the exception maps.
	good[0].Exceptions["v"] = 100
	got := g.Rules().Param
	got[0].Exceptions["v"] = 100
	assert.Equal(t, int64(2), g.Rules().Param[0].Exceptions["v"])

	changed, err = loadParams(g, nil)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Empty(t, g.Rules().Param)
	assert.True(t, try(g, "r", WithArgs("u")), "no rule: passes")
}

func TestParamEquivalentReloadKeepsState(t *testing.T) {
	g, _ := newTestEngine(t, 1e12)
	mustLoadParam(t, g, rules.Param{Resource: "r", Threshold: 3, Duration: time.Hour})
	for i := 0; i < 3; i++ {
		require.True(t, try(g, "r", WithArgs("u")))
	}
	// New ID and threshold, same counting: u's empty bucket carries over.
	mustLoadParam(t, g, rules.Param{ID: "v2", Resource: "r", Threshold: 4, Duration: time.Hour})
	assert.False(t, try(g, "r", WithArgs("u")), "reload handed out no fresh burst")
	assert.True(t, try(g, "r", WithArgs("w")))
	// A different window is a different rule: fresh state.
	mustLoadParam(t, g, rules.Param{Resource: "r", Threshold: 4, Duration: time.Minute})
	assert.True(t, try(g, "r", WithArgs("u")))
}

func TestParamConcurrencyUnder64Goroutines(t *testing.T) {
	g, _ := newTestEngine(t, 1e12)
	const threshold = 2
	mustLoadParam(t, g, rules.Param{Resource: "r", Metric: rules.Concurrency, Threshold: threshold})
	users := []string{"a", "b", "c"}
	var inside, maxSeen [3]atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				k := (w + i) % len(users)
				p, err := g.Entry("r", WithArgs(users[k]))
				if err != nil {
					continue
				}
				n := inside[k].Add(1)
				for m := maxSeen[k].Load(); n > m && !maxSeen[k].CompareAndSwap(m, n); m = maxSeen[k].Load() {
				}
				inside[k].Add(-1)
				p.Exit()
			}
		}()
	}
	wg.Wait()
	c := paramCtl(g, "r", 0)
	for k, u := range users {
		assert.LessOrEqual(t, maxSeen[k].Load(), int64(threshold), "max in flight of %s", u)
		assert.Positive(t, maxSeen[k].Load())
		assert.Equal(t, int64(0), c.InFlight(u), "in flight of %s after all exits", u)
	}
}

// TestParamArgsNeverShared runs entries with distinct arguments from many
// goroutines (integers formatted on each entry's stack, strings built per
// goroutine): each value's bucket must show exactly its own entries.
func TestParamArgsNeverShared(t *testing.T) {
	g, clk := newTestEngine(t, 1e12)
	const (
		workers = 32
		each    = 50
	)
	mustLoadParam(t, g,
		rules.Param{Resource: "r", Threshold: 1000, Duration: time.Hour},
		rules.Param{Resource: "r", Index: 1, Threshold: 1000, Duration: time.Hour},
	)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := "user-" + strconv.Itoa(w)
			for i := 0; i < each*(w+1)/workers+1; i++ {
				p, err := g.Entry("r", WithArgs(name, 1_000_000+w))
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				p.Exit()
			}
		}()
	}
	wg.Wait()
	now := clk.Nanotime()
	for w := 0; w < workers; w++ {
		want := 1000 - int64(each*(w+1)/workers+1)
		got, ok := paramCtl(g, "r", 0).Tokens("user-"+strconv.Itoa(w), now)
		require.True(t, ok)
		assert.Equal(t, want, got, "tokens of user-%d", w)
		got, _ = paramCtl(g, "r", 1).Tokens(strconv.Itoa(1_000_000+w), now)
		assert.Equal(t, want, got, "tokens of %d", 1_000_000+w)
	}
}

type refuseAll struct{}

func (refuseAll) Check(*slots.Entry) *core.BlockError {
	return &core.BlockError{Reason: "custom"}
}

func TestParamTokensReturnedWhenALaterCheckRefuses(t *testing.T) {
	g, clk := newTestEngine(t, 1e12)
	mustLoadParam(t, g, rules.Param{Resource: "r", Threshold: 2, Duration: time.Minute})
	require.NoError(t, g.RegisterSlot(refuseAll{}, 0))
	for i := 0; i < 5; i++ {
		_, err := g.Entry("r", WithArgs("u"))
		var be *core.BlockError
		require.ErrorAs(t, err, &be)
		require.Equal(t, core.BlockCustom, be.Type)
	}
	got, _ := paramCtl(g, "r", 0).Tokens("u", clk.Nanotime())
	assert.Equal(t, int64(2), got, "refused entries spent nothing")
}

// TestParamEntryExitNoAllocs guards the zero-allocation contract of the
// typed options: string and integer arguments, positional and attached,
// checked by param rules cost nothing on the heap.
func TestParamEntryExitNoAllocs(t *testing.T) {
	g, _ := newTestEngine(t, 1e12)
	mustLoadParam(t, g,
		rules.Param{Resource: "r", Threshold: rules.MaxThreshold},
		rules.Param{Resource: "r", Index: 1, Threshold: rules.MaxThreshold},
		rules.Param{Resource: "r", Key: "tenant", Metric: rules.Concurrency, Threshold: 1000},
		rules.Param{Resource: "r", Key: "shard", Threshold: rules.MaxThreshold, Duration: time.Hour},
	)
	user := strconv.Itoa(12345) + "-user" // not a constant
	id := int64(1) << 40
	opts := func() []EntryOption {
		return []EntryOption{WithStringArg(0, user), WithIntArg(1, id), WithStringAttachment("tenant", user), WithIntAttachment("shard", id)}
	}
	require.True(t, try(g, "r", opts()...))
	allocs := testing.AllocsPerRun(1000, func() {
		p, err := g.Entry("r", WithStringArg(0, user), WithIntArg(1, id), WithStringAttachment("tenant", user), WithIntAttachment("shard", id))
		if err != nil {
			t.Fatal(err)
		}
		p.Exit()
	})
	assert.Equal(t, 0.0, allocs, "allocs per Entry+Exit with typed arguments")
	for i := 0; i < 4; i++ {
		assert.Equal(t, 1, paramCtl(g, "r", i).Tracked(), "rule %d counted its argument", i)
	}
}

// TestParamWithArgsAllocs reports what WithArgs and WithAttachment cost: a
// box per non-constant value at most (the compiler decides; today it keeps
// them on the stack), never the options themselves.
func TestParamWithArgsAllocs(t *testing.T) {
	g, _ := newTestEngine(t, 1e12)
	mustLoadParam(t, g,
		rules.Param{Resource: "r", Threshold: rules.MaxThreshold},
		rules.Param{Resource: "r", Index: 1, Threshold: rules.MaxThreshold},
		rules.Param{Resource: "r", Key: "tenant", Threshold: rules.MaxThreshold},
	)
	user := strconv.Itoa(12345) + "-user"
	id := 1 << 40
	allocs := testing.AllocsPerRun(1000, func() {
		p, err := g.Entry("r", WithArgs(user, id), WithAttachment("tenant", user))
		if err != nil {
			t.Fatal(err)
		}
		p.Exit()
	})
	t.Logf("allocs per Entry+Exit with WithArgs(string, int) and WithAttachment(string): %v", allocs)
	assert.LessOrEqual(t, allocs, 3.0, "at most one box per value")
}

// TestParamTypedArguments: typed arguments are the same values as their
// WithArgs forms (an integer is its decimal form, also for Exceptions), take
// the place of WithArgs' value at their index, and count towards
// maxAttachments.
func TestParamTypedArguments(t *testing.T) {
	g, _ := newTestEngine(t, 1e12)
	mustLoadParam(t, g,
		rules.Param{Resource: "r", Threshold: 3, Duration: time.Hour, Exceptions: map[string]int64{"42": 5}},
		rules.Param{Resource: "r", Key: "ip", Threshold: 100, Duration: time.Hour},
	)
	forms := []EntryOption{WithIntArg(0, 42), WithStringArg(0, "42"), WithArgs(42), WithArgs("a", "b"), WithArgs(uint8(42))}
	for i, o := range forms {
		if i == 3 { // WithArgs("a", ...) with a typed argument in its place
			require.True(t, try(g, "r", o, WithIntArg(0, 42)), "form %d", i)
			continue
		}
		require.True(t, try(g, "r", o), "form %d", i)
	}
	assert.False(t, try(g, "r", WithStringArg(0, "42")), "42: its exception of 5 spent by the five forms")
	tok, ok := paramCtl(g, "r", 0).Tokens("a", 1e12)
	assert.False(t, ok, "WithArgs' value at a typed index is not counted (tokens %d)", tok)

	require.True(t, try(g, "r", WithStringAttachment("ip", "10.0.0.1"), WithAttachment("ip", "10.0.0.2"), WithIntArg(0, 1)))
	tok, _ = paramCtl(g, "r", 1).Tokens("10.0.0.2", 1e12)
	assert.Equal(t, int64(99), tok, "the last attachment wins, typed or not")

	opts := make([]EntryOption, 0, maxAttachments+1)
	for i := 0; i < maxAttachments; i++ {
		opts = append(opts, WithIntArg(i+1, int64(i)))
	}
	require.True(t, try(g, "r", opts...))
	_, err := g.Entry("r", append(opts, WithStringAttachment("ip", "x"))...)
	require.ErrorIs(t, err, ErrTooManyAttachments)
}

const benchParamKeys = 100_000

// BenchmarkParamEntryExit compares Entry+Exit with a string argument
// (WithStringArg) on a resource without and with a param rule tracking
// 100,000 live values, visited in a scattered order (every visit a
// different value) or cycling through them in order; "param-any" passes the
// same argument with WithArgs.
func BenchmarkParamEntryExit(b *testing.B) {
	keys := make([]string, benchParamKeys)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i*7919)
	}
	g := New()
	b.Cleanup(func() { _ = g.Close() })
	_, err := loadParams(g, []rules.Param{{Resource: "param", Threshold: rules.MaxThreshold, Capacity: 2 * benchParamKeys}})
	if err != nil {
		b.Fatal(err)
	}
	for _, k := range keys {
		if !try(g, "param", WithStringArg(0, k)) {
			b.Fatal("refused")
		}
	}
	if n := paramCtl(g, "param", 0).Tracked(); n != benchParamKeys {
		b.Fatalf("tracked %d values, want %d", n, benchParamKeys)
	}
	orders := []struct {
		name   string
		stride int
	}{{"scattered", 7919}, {"cycling", 1}}
	for _, o := range orders {
		for _, name := range []string{"none", "param", "param-any"} {
			res, typed := name, true
			if name == "param-any" {
				res, typed = "param", false
			}
			// The options are built in the Entry call, as in a caller:
			// options returned from a helper would escape to the heap.
			one := func(k string) error {
				var (
					p   Pass
					err error
				)
				if typed {
					p, err = g.Entry(res, WithStringArg(0, k))
				} else {
					p, err = g.Entry(res, WithArgs(k))
				}
				if err != nil {
					return err
				}
				p.Exit()
				return nil
			}
			b.Run(o.name+"/"+name+"/serial", func(b *testing.B) {
				b.ReportAllocs()
				j := 0
				for b.Loop() {
					if err := one(keys[j]); err != nil {
						b.Fatal(err)
					}
					if j += o.stride; j >= benchParamKeys {
						j -= benchParamKeys
					}
				}
			})
			b.Run(o.name+"/"+name+"/parallel", func(b *testing.B) {
				b.ReportAllocs()
				var seq atomic.Int64
				b.RunParallel(func(pb *testing.PB) {
					j := int(seq.Add(1)*50_021) % benchParamKeys
					for pb.Next() {
						if err := one(keys[j]); err != nil {
							b.Error(err)
							return
						}
						if j += o.stride; j >= benchParamKeys {
							j -= benchParamKeys
						}
					}
				})
			})
		}
	}
}

// TestParamLongValuesKeepHeapBounded floods a rule with distinct 32 KiB
// values, three times its capacity: the heap it keeps stays within a
// kilobyte per tracked value (an entry is 128 bytes plus its share of the
// table, queues and ghost set, about 330 bytes in all) however long the
// values are, so one client cannot pin memory by sending long ones.
func TestParamLongValuesKeepHeapBounded(t *testing.T) {
	const (
		capacity = 1000
		size     = 32 << 10
	)
	tests := []struct {
		name string
		opt  func(string) EntryOption
	}{
		{"WithArgs", func(v string) EntryOption { return WithArgs(v) }},
		{"WithStringArg", func(v string) EntryOption { return WithStringArg(0, v) }},
		{"WithStringAttachment", func(v string) EntryOption { return WithStringAttachment("k", v) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, _ := newTestEngine(t, 1e12)
			mustLoadParam(t, g,
				rules.Param{Resource: "r", Threshold: rules.MaxThreshold, Capacity: capacity},
				rules.Param{Resource: "r", Key: "k", Threshold: rules.MaxThreshold, Capacity: capacity})
			require.True(t, try(g, "r", tt.opt("warm-up")))
			var ms runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms)
			before := ms.HeapAlloc
			filler := strings.Repeat("x", size)
			for i := 0; i < 3*capacity; i++ {
				v := strconv.Itoa(i) + filler[:size-8] // distinct, in a fresh allocation
				require.True(t, try(g, "r", tt.opt(v)))
			}
			require.Equal(t, capacity, paramCtl(g, "r", 0).Tracked()+paramCtl(g, "r", 1).Tracked(), "the rule in use is full")
			runtime.GC()
			runtime.ReadMemStats(&ms)
			grown := int64(ms.HeapAlloc) - int64(before)
			t.Logf("%d values of %d KiB through capacity %d: heap +%d KiB", 3*capacity, size>>10, capacity, grown>>10)
			assert.Less(t, grown, int64(capacity<<10+1<<20), "heap kept by the rule")
			runtime.KeepAlive(g)
		})
	}
}

// TestParamReloadUnderLoadKeepsCounts reloads a per-user concurrency rule
// back and forth between thresholds 2 and 3 (same counting, so the state is
// handed over) while 16 goroutines enter and exit as four users: no user
// ever has more than 3 in flight, and every count is back to zero at the
// end, so no release was lost across the hand-overs.
func TestParamReloadUnderLoadKeepsCounts(t *testing.T) {
	g, _ := newTestEngine(t, 1e12)
	rule := func(threshold int64) rules.Param {
		return rules.Param{Resource: "r", Metric: rules.Concurrency, Threshold: threshold, Capacity: 64}
	}
	mustLoadParam(t, g, rule(2))
	users := []string{"a", "b", "c", "d"}
	var inside, maxSeen [4]atomic.Int64
	var passed atomic.Int64
	stop := make(chan struct{})
	reloads := make(chan int)
	go func() {
		n := 0
		defer func() { reloads <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := loadParams(g, []rules.Param{rule(2 + int64(n%2))}); err != nil {
				t.Error(err)
				return
			}
			n++
			runtime.Gosched() // let the workers run between reloads
		}
	}()
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				k := (w + i) % len(users)
				p, err := g.Entry("r", WithStringArg(0, users[k]))
				if err != nil {
					continue
				}
				passed.Add(1)
				n := inside[k].Add(1)
				for m := maxSeen[k].Load(); n > m && !maxSeen[k].CompareAndSwap(m, n); m = maxSeen[k].Load() {
				}
				inside[k].Add(-1)
				p.Exit()
			}
		}()
	}
	wg.Wait()
	close(stop)
	require.Positive(t, <-reloads, "reloads")
	require.Positive(t, passed.Load())
	c := paramCtl(g, "r", 0)
	for k, u := range users {
		assert.LessOrEqual(t, maxSeen[k].Load(), int64(3), "max in flight of %s", u)
		assert.Equal(t, int64(0), c.InFlight(u), "in flight of %s after all exits", u)
	}
}

// TestTypedArgIndexBounds: the ends of what rules.Param.Index takes, 0 and
// 255, are read by typed arguments (the indexes past them are refused; see
// TestEntryRefusesWhatItCannotMakeSenseOf).
func TestTypedArgIndexBounds(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	_, err := loadParams(g, []rules.Param{
		{Resource: "r", Index: 255, Threshold: 1},
		{Resource: "s", Index: 0, Threshold: 1},
	})
	require.NoError(t, err)
	require.True(t, try(g, "r", WithStringArg(255, "u")))
	require.False(t, try(g, "r", WithStringArg(255, "u")), "the rule at index 255 counted the first")
	require.True(t, try(g, "r", WithStringArg(255, "v")))
	require.True(t, try(g, "s", WithIntArg(0, 7)))
	require.False(t, try(g, "s", WithIntArg(0, 7)), "the rule at index 0 counted the first")
}

// TestParamConcurrencySentinelDuration: a concurrency param rule with
// Duration 1s (sentinel-golang's default DurationInSec: 1) counts in flight
// like one without, and a reload between the two keeps the count.
func TestParamConcurrencySentinelDuration(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	r := rules.Param{Resource: "r", Key: "tenant", Metric: rules.Concurrency, Threshold: 1, Duration: time.Second}
	_, err := loadParams(g, []rules.Param{r})
	require.NoError(t, err)
	held, err := g.Entry("r", WithStringAttachment("tenant", "a"))
	require.NoError(t, err)
	require.False(t, try(g, "r", WithStringAttachment("tenant", "a")))
	r.Duration = 0
	_, err = loadParams(g, []rules.Param{r})
	require.NoError(t, err)
	require.False(t, try(g, "r", WithStringAttachment("tenant", "a")), "the reload kept the entry in flight")
	held.Exit()
	require.True(t, try(g, "r", WithStringAttachment("tenant", "a")))
}
