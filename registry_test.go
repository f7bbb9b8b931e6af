package sluice

import (
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/internal/window"
	"github.com/sluice-go/sluice/rules"
)

func TestNewResourceClonesName(t *testing.T) {
	src := []byte("GET /api/v1/items/{id}")
	r := newResource(string(src))
	for i := range src {
		src[i] = '!' // the caller's bytes may change; the name must not
	}
	require.Equal(t, "GET /api/v1/items/{id}", r.name)
}

// TestTableProbesPastCollisions forges the read table's slots to make what
// a random seed makes rarely: a name whose home slot is the last one, so
// that its probe wraps around to the first, and slots on the way holding
// other resources under the same tag (one of them a prefix of the name),
// which only the name comparison tells apart.
func TestTableProbesPastCollisions(t *testing.T) {
	const size = 16
	seed := maphash.MakeSeed()
	var name string
	var h uint64
	for i := 0; h>>32&(size-1) != size-1; i++ {
		name = fmt.Sprint("wrap-", i, "-x")
		h = maphash.String(seed, name)
	}
	tag := uint32(h) | 1
	tb := &table{seed: seed, mask: size - 1, tags: make([]uint32, size), res: make([]*resource, size)}
	want := newResource(name)
	for i, r := range []*resource{newResource("decoy"), newResource(name[:len(name)-1]), newResource(name + "x"), want} {
		j := (size - 1 + i) % size
		tb.tags[j], tb.res[j] = tag, r
	}
	require.Same(t, want, tb.get(name, 0))
	tb.tags[2], tb.res[2] = 0, nil
	require.Nil(t, tb.get(name, 0), "the probe ends at the first empty slot")
}

func TestTableFindsEveryNameAndNothingElse(t *testing.T) {
	for _, n := range []int{0, 1, 7, 100, 5000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var reg registry
			reg.init(defaultMaxResources, 0)
			all := map[string]*resource{}
			for i := 0; i < n; i++ {
				// Prefixes of one another, long and short, and the empty name.
				name := fmt.Sprintf("res-%d", i)
				switch i % 4 {
				case 1:
					name = strings.Repeat("p", i%97) // around shortName too
				case 2:
					name = strings.Repeat("long/", 10) + name
				}
				if _, dup := all[name]; dup {
					continue
				}
				all[name] = newResource(name)
			}
			tb := newTable(reg.seed, all)
			require.LessOrEqual(t, 2*len(all), len(tb.tags), "at most half full")
			require.Len(t, tb.res, len(tb.tags))
			for name, x := range all {
				require.Same(t, x, tb.get(name, 0), name)
				require.Equal(t, len(name) <= shortName, x.n != longName, "%q is held in the first line iff it is short", name)
			}
			for _, absent := range []string{"res--1", "nope", strings.Repeat("p", 98), strings.Repeat("long/", 10)} {
				if all[absent] == nil {
					require.Nil(t, tb.get(absent, 0), absent)
				}
			}
		})
	}
}

// TestRulesReachResourcesTrackedBeforeThem checks that the read table binds
// the rule set in force: on a resource created by traffic (before and after
// its promotion to the table), when rules appear, change and go away.
func TestRulesReachResourcesTrackedBeforeThem(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	g := New(WithClock(clk))
	defer g.Close()
	enter := func(name string) error {
		p, err := g.Entry(name)
		p.Exit()
		return err
	}
	names := make([]string, 50) // enough to promote the first ones
	for i := range names {
		names[i] = fmt.Sprintf("tracked-%d", i)
		require.NoError(t, enter(names[i]))
	}
	require.NotNil(t, g.reg.read.Load().get(names[0], 0), "promoted by the misses that followed")
	for _, limit := range []float64{1, 3} {
		var rs []rules.Flow
		for _, n := range names {
			rs = append(rs, rules.Flow{Resource: n, Threshold: limit})
		}
		_, err := loadFlow(g, rs)
		require.NoError(t, err)
		clk.Advance(time.Second)
		for _, n := range names {
			for i := 0; i < int(limit); i++ {
				require.NoError(t, enter(n), "%s pass %d at limit %v", n, i, limit)
			}
			require.ErrorIs(t, enter(n), core.ErrBlocked, "%s over limit %v", n, limit)
		}
	}
	_, err := loadFlow(g, nil)
	require.NoError(t, err)
	for _, n := range names {
		for i := 0; i < 10; i++ {
			require.NoError(t, enter(n))
		}
	}
}

// TestLookupsRaceCreationAndReloads runs entries on new and old resources
// while rules are reloaded, under -race: every entry on a limited resource
// sees either the old or the new rule set, and nothing is lost.
func TestLookupsRaceCreationAndReloads(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	g := New(WithClock(clk))
	defer g.Close()
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				name := fmt.Sprintf("w%d-%d", w, i%100)
				p, err := g.Entry(name)
				if err == nil {
					p.Exit()
				} else {
					assert.ErrorIs(t, err, core.ErrBlocked)
				}
			}
		}()
	}
	for i := 0; i < 20; i++ {
		_, err := loadFlow(g, []rules.Flow{{Resource: "w0-1", Threshold: float64(i + 1)}})
		require.NoError(t, err)
	}
	wg.Wait()
	require.Equal(t, 400, g.reg.len())
	s, ok := g.Snapshot("w1-99")
	require.True(t, ok)
	require.Equal(t, uint64(5), s.TotalPass)
}

// overflowTotal returns the entries counted under the overflow resource.
func overflowTotal(g *Engine) uint64 {
	s, _ := g.Snapshot(overflowResource)
	return s.TotalPass + s.TotalBlock
}

// TestIdleResourcesAreReclaimed loads rules on as many resources as the
// limit, enters each, removes the rules, and checks that sweeps (here, those of rule loads)
// forget each resource at the first sweep at which two looks reclaimAfter
// apart saw the same count of entries and none in flight, to the
// nanosecond, and that the room then goes to new names instead of the
// overflow resource.
func TestIdleResourcesAreReclaimed(t *testing.T) {
	const n, R = 200, reclaimAfter
	g, clk := newTestEngine(t, 0, WithLimits(Limits{Resources: n}))
	var rs []rules.Flow
	for i := 0; i < n; i++ {
		rs = append(rs, rules.Flow{Resource: fmt.Sprint("r", i), Threshold: 1e6})
	}
	mustLoadFlow(t, g, rs...)
	for _, r := range rs {
		require.True(t, try(g, r.Resource))
	}
	kept := rules.Flow{Resource: "kept", Threshold: 1}
	mustLoadFlow(t, g, kept) // every rN loses its rule at 0
	require.Equal(t, n+1, g.reg.len())
	require.True(t, try(g, "fresh-0"))
	require.Equal(t, uint64(1), overflowTotal(g), "full: a new name overflows")

	clk.Advance(R)
	mustLoadFlow(t, g, kept) // the same rules: nothing changes but the sweep
	require.Equal(t, n+2, g.reg.len(), "first look at R: each rN has one entry more than when made")
	clk.Advance(R / 2)
	require.True(t, try(g, "r7"), "r7 is busy again")
	clk.Advance(R/2 - 1)
	mustLoadFlow(t, g, kept)
	require.Equal(t, n+2, g.reg.len(), "one nanosecond early: nothing is due")

	clk.Advance(1)
	mustLoadFlow(t, g, kept)
	require.Equal(t, 3, g.reg.len(), "at 2R: all forgotten but kept, r7 and the overflow resource")
	_, ok := g.Snapshot("r0")
	require.False(t, ok)
	s, ok := g.Snapshot("r7")
	require.True(t, ok)
	require.Equal(t, uint64(2), s.TotalPass, "r7's statistics stay with it")

	require.True(t, try(g, "fresh-1"))
	_, ok = g.Snapshot("fresh-1")
	require.True(t, ok, "the room went to a new name")
	require.Equal(t, uint64(1), overflowTotal(g))

	clk.Advance(R - 1)
	mustLoadFlow(t, g, kept)
	require.Equal(t, 4, g.reg.len(), "3R - 1 ns: nothing is due")
	clk.Advance(1)
	mustLoadFlow(t, g, kept)
	require.Equal(t, 3, g.reg.len(), "3R: r7 forgotten (its entry at 1.5R was seen at 2R); fresh-1 seen in use")
	_, ok = g.Snapshot("r7")
	require.False(t, ok)
	clk.Advance(R)
	mustLoadFlow(t, g, kept)
	require.Equal(t, 2, g.reg.len(), "4R: fresh-1 too")
}

// TestReclaimKeepsWhatIsInUse checks that a sweep never forgets a resource
// with an entry in flight (the Pass keeps counting into it), with rules of
// any kind, or named as the associated resource of a flow rule, however
// long it stays idle.
func TestReclaimKeepsWhatIsInUse(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	held, err := g.Entry("in-flight")
	require.NoError(t, err)
	require.NoError(t, g.LoadRules(rules.Set{
		Flow:           []rules.Flow{{Resource: "follower", RefResource: "leader", Threshold: 1}, {Metric: rules.Concurrency, Resource: "isolated", Threshold: 1}},
		CircuitBreaker: []rules.CircuitBreaker{{Resource: "broken", Strategy: rules.ErrorCount, Threshold: 1, RetryTimeout: time.Second}},
	}))
	require.True(t, try(g, "idle"))
	for i := 0; i < 10; i++ {
		clk.Advance(reclaimAfter)
		require.NoError(t, g.LoadRules(g.Rules()))
	}
	for _, name := range []string{"in-flight", "follower", "leader", "isolated", "broken"} {
		_, ok := g.Snapshot(name)
		require.True(t, ok, name)
	}
	_, ok := g.Snapshot("idle")
	require.False(t, ok, "the control: an idle resource was forgotten")

	held.Exit()
	s, _ := g.Snapshot("in-flight")
	require.Equal(t, uint64(1), s.TotalComplete, "the held Pass counted into its resource")
	clk.Advance(reclaimAfter)
	require.NoError(t, g.LoadRules(g.Rules())) // first seen idle
	clk.Advance(reclaimAfter)
	require.NoError(t, g.LoadRules(g.Rules()))
	_, ok = g.Snapshot("in-flight")
	require.False(t, ok, "forgotten once idle, like any other")
}

// TestFullRegistryMakesRoom fills the registry with traffic alone (no rule
// loads): entries of new names overflow, at most one every sweepEvery
// sweeps, and the sweep that finds resources idle makes room, which the
// name that triggered it takes.
func TestFullRegistryMakesRoom(t *testing.T) {
	const R = reclaimAfter
	g, clk := newTestEngine(t, 0, WithLimits(Limits{Resources: 10}))
	for i := 0; i < 10; i++ {
		require.True(t, try(g, fmt.Sprint("old-", i)))
	}
	require.True(t, try(g, "new-0")) // sweeps (nothing due), overflows
	clk.Advance(R)
	require.True(t, try(g, "new-1")) // sweeps: first look at the ten
	clk.Advance(R - 1)
	require.True(t, try(g, "new-2")) // sweeps: one nanosecond early
	clk.Advance(1)
	require.True(t, try(g, "new-3")) // no sweep until sweepEvery after the last
	clk.Advance(sweepEvery - 2)
	require.True(t, try(g, "new-4")) // still none
	require.Equal(t, uint64(5), overflowTotal(g))
	require.Equal(t, 11, g.reg.len())

	clk.Advance(1)
	require.True(t, try(g, "new-5")) // 2R - 1 ns + sweepEvery: sweeps; the ten go
	require.Equal(t, uint64(5), overflowTotal(g))
	s, ok := g.Snapshot("new-5")
	require.True(t, ok)
	require.Equal(t, uint64(1), s.TotalPass)
	require.Equal(t, 2, g.reg.len(), "new-5 and the overflow resource")
}

// TestOverflowEntriesTakeNoLockNorMemory checks that, once the registry is
// full and has swept, an entry of a name it has no room for allocates
// nothing and does not wait for the registry's lock.
func TestOverflowEntriesTakeNoLockNorMemory(t *testing.T) {
	g, _ := newTestEngine(t, 0, WithLimits(Limits{Resources: 1}))
	require.True(t, try(g, "tracked"))
	require.True(t, try(g, "first-overflow")) // sweeps, overflows
	names := []string{"a", "b", "GET /items/12345", "GET /a/name/longer/than/thirty-one/bytes"}
	i := 0
	allocs := testing.AllocsPerRun(100, func() {
		p, _ := g.Entry(names[i%len(names)])
		p.Exit()
		i++
	})
	require.Zero(t, allocs)

	g.reg.mu.Lock() // an entry that needed the lock would wait for the test
	done := make(chan bool)
	go func() { done <- try(g, "yet-another") }()
	select {
	case passed := <-done:
		require.True(t, passed)
	case <-time.After(10 * time.Second):
		t.Fatal("an overflowing entry waits for the registry's lock")
	}
	g.reg.mu.Unlock()
	require.Equal(t, uint64(3+100), overflowTotal(g))
}

// TestReclaimedResourceIsNeverRevived plays the lookup race: an entry finds
// a resource in the read table, a sweep forgets it, and the entry counts
// into it anyway. The forgotten resource keeps what was counted into it,
// and no later lookup, creation or table rebuild returns it again.
func TestReclaimedResourceIsNeverRevived(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	require.True(t, try(g, "r"))
	for i := 0; i < 20; i++ {
		require.True(t, try(g, fmt.Sprint("other-", i))) // promotes "r" to the table
	}
	clk.Advance(reclaimAfter)
	g.sweepNow(t)                                     // first look
	old := g.reg.read.Load().get("r", clk.Nanotime()) // the racing entry's lookup
	require.NotNil(t, old)
	clk.Advance(reclaimAfter)
	g.sweepNow(t)
	require.Nil(t, g.reg.get("r"))

	old.node.AddPass(clk.Nanotime(), 1) // the racing entry counts into it
	require.True(t, try(g, "r"))
	fresh := g.reg.get("r")
	require.NotSame(t, old, fresh)
	require.Equal(t, uint64(1), fresh.node.Total(clk.Nanotime(), window.Pass), "a new resource, with its own counts")
	require.Equal(t, uint64(2), old.node.Total(clk.Nanotime(), window.Pass))
	g.reg.mu.Lock()
	g.reg.promote()
	g.reg.mu.Unlock()
	require.Same(t, fresh, g.reg.read.Load().get("r", 0))
	require.Same(t, fresh, g.reg.get("r"))
}

// sweepNow runs a sweep as a rule load does.
func (eng *Engine) sweepNow(t *testing.T) {
	t.Helper()
	eng.mu.Lock()
	defer eng.mu.Unlock()
	eng.sweep()
}

// BenchmarkOverflowEntries is Entry+Exit of names beyond the resource
// limit, which all count under overflowResource.
func BenchmarkOverflowEntries(b *testing.B) {
	g := New(WithLimits(Limits{Resources: 1}))
	b.Cleanup(func() { _ = g.Close() })
	names := make([]string, 1024)
	for i := range names {
		names[i] = fmt.Sprintf("GET /api/v1/items/%d", i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p, err := g.Entry(names[i%len(names)])
		if err != nil {
			b.Fatal(err)
		}
		p.Exit()
	}
}

// TestReclaimRacesEntriesAndLoads runs entries over more names than the
// limit while another goroutine moves the clock by whole idle periods and
// reloads rules (each load sweeps): under -race, nothing races, every entry
// passes, and once traffic stops every tracked resource is back to zero in
// flight and the limit holds (the names rules need are tracked beyond it).
func TestReclaimRacesEntriesAndLoads(t *testing.T) {
	const max = 16
	g, clk := newTestEngine(t, 0, WithLimits(Limits{Resources: max}))
	stop := make(chan struct{})
	var loads sync.WaitGroup
	loads.Add(1)
	go func() {
		defer loads.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			clk.Advance(reclaimAfter / 3)
			_, err := loadFlow(g, []rules.Flow{{Resource: fmt.Sprint("ruled-", i%3), Threshold: 1e9}})
			assert.NoError(t, err)
		}
	}()
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var held []Pass
			for i := 0; i < 400; i++ {
				p, err := g.Entry(fmt.Sprintf("w%d-%d", w, i%40))
				if !assert.NoError(t, err) {
					return
				}
				held = append(held, p)
				if len(held) == 5 { // some entries stay in flight across sweeps
					for _, p := range held {
						p.Exit()
					}
					held = held[:0]
				}
			}
			for _, p := range held {
				p.Exit()
			}
		}()
	}
	wg.Wait()
	close(stop)
	loads.Wait()
	g.reg.mu.Lock()
	defer g.reg.mu.Unlock()
	assert.LessOrEqual(t, len(g.reg.all), max+3+1, "the limit, plus the three names rules took (created whatever the limit) and the overflow resource")
	for name, r := range g.reg.all {
		assert.Zero(t, r.node.Concurrency(), name)
	}
}
