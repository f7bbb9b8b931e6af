package sluice

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/rules"
)

func flowRules(n int, prefix string) []rules.Flow {
	rs := make([]rules.Flow, n)
	for i := range rs {
		rs[i] = rules.Flow{Resource: fmt.Sprint(prefix, i), Threshold: 100}
	}
	return rs
}

// TestRuleLoadsAreBounded: a load of more rules of one kind than
// Limits.Rules, of a name longer than Limits.NameBytes, or of rules naming
// more resources than Limits.Resources, is refused whole with an error
// naming the limit and the option; the rules in force stay.
func TestRuleLoadsAreBounded(t *testing.T) {
	g, _ := newTestEngine(t, 0, WithLimits(Limits{Rules: 3, Resources: 5}))
	mustLoadFlow(t, g, flowRules(3, "f")...)

	_, err := loadFlow(g, flowRules(4, "f"))
	require.EqualError(t, err, "rules: flow rule: 4 rules, more than the engine's limit of 3 rules of one kind; raise it with sluice.Limits.Rules")
	err = g.LoadRules(rules.Set{Flow: []rules.Flow{{Metric: rules.Concurrency, Resource: "a", Threshold: 1}, {Metric: rules.Concurrency, Resource: "b", Threshold: 1}, {Metric: rules.Concurrency, Resource: "c", Threshold: 1}, {Metric: rules.Concurrency, Resource: "d", Threshold: 1}}})
	require.ErrorContains(t, err, "rules: flow rule: 4 rules, more than the engine's limit of 3")

	// Three flow rules and three breakers on other resources: six
	// resources, one more than the engine tracks.
	cb := func(r string) rules.CircuitBreaker {
		return rules.CircuitBreaker{Resource: r, Strategy: rules.ErrorCount, Threshold: 1, RetryTimeout: time.Second}
	}
	_, err = loadBreakers(g, []rules.CircuitBreaker{cb("a"), cb("b"), cb("c")})
	require.EqualError(t, err, "sluice: the rules name 6 resources, more than the engine's limit of 5; raise it with sluice.Limits.Resources")
	err = g.LoadRules(rules.Set{Flow: flowRules(2, "f"), Param: []rules.Param{{Resource: "a", Threshold: 1}, {Resource: "b", Threshold: 1}, {Resource: "c", Threshold: 1}, {Resource: "d", Threshold: 1}}})
	require.ErrorContains(t, err, "rules: param rule: 4 rules")
	err = g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "f0", RefResource: "x", Threshold: 1}, {Resource: "f1", Threshold: 1}}, Param: []rules.Param{{Resource: "a", Threshold: 1}, {Resource: "b", Threshold: 1}, {Resource: "c", Threshold: 1}}})
	require.EqualError(t, err, "sluice: the rules name 6 resources, more than the engine's limit of 5; raise it with sluice.Limits.Resources")
	assert.Equal(t, flowRules(3, "f"), g.Rules().Flow, "the rules in force stay")
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "f0", Threshold: 1}}, Param: []rules.Param{{Resource: "a", Threshold: 1}, {Resource: "b", Threshold: 1}, {Resource: "c", Threshold: 1}}}))
	assert.Len(t, g.Rules().Param, 3)

	// Names: the default limit is 1 KiB, for rules and for entries.
	g, _ = newTestEngine(t, 0)
	long := strings.Repeat("n", rules.DefaultMaxNameBytes+1)
	_, err = loadFlow(g, []rules.Flow{{Resource: "ok", Threshold: 1}, {Resource: long, Threshold: 1}})
	var re *rules.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, 1, re.Index)
	assert.Equal(t, "Resource", re.Field)
	assert.Equal(t, "is 1025 bytes, more than the engine's limit of 1024; raise it with sluice.Limits.NameBytes", re.Reason)
	_, err = loadParams(g, []rules.Param{{Resource: "p", Threshold: 1, Exceptions: map[string]int64{long: 1}}})
	require.ErrorContains(t, err, `rules: param rule 0 (resource "p"): Exceptions: has a key of 1025 bytes, more than the engine's limit of 1024`)
	_, err = g.Entry(long)
	require.ErrorIs(t, err, ErrBadResource)
	require.EqualError(t, err, "sluice: invalid resource name: 1025 bytes, more than the engine's limit of 1024 (Limits.NameBytes)")
	assert.Zero(t, g.reg.len(), "a refused name makes no resource")
	_, err = g.Entry(long[1:])
	require.NoError(t, err)

	g, _ = newTestEngine(t, 0, WithLimits(Limits{NameBytes: 4096}))
	_, err = loadFlow(g, []rules.Flow{{Resource: long, Threshold: 1}})
	require.NoError(t, err)
}

// TestRuleLoadsAreBoundedByDefault: 10,001 flow rules are refused by
// default, 10,000 taken.
func TestRuleLoadsAreBoundedByDefault(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	_, err := loadFlow(g, flowRules(rules.DefaultMaxRules+1, "r"))
	require.ErrorContains(t, err, "10001 rules, more than the engine's limit of 10000 rules of one kind")
	if testing.Short() || raceEnabled {
		return
	}
	mustLoadFlow(t, g, flowRules(rules.DefaultMaxRules, "r")...)
}

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestRemovedRulesGiveTheirMemoryBack: the resources made for rules that no
// rule needs any more and that never counted an entry are forgotten at the
// load that removes the rules, and their memory is released; those that
// counted entries keep their statistics until they are idle
// (reclaimAfter).
func TestRemovedRulesGiveTheirMemoryBack(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow memory blurs heap figures")
	}
	const n = 2000
	g, _ := newTestEngine(t, 0)
	base := heapInUse()
	mustLoadFlow(t, g, flowRules(n, "r")...)
	require.Equal(t, n, g.reg.len())
	loaded := heapInUse()
	perRule := float64(loaded-base) / n
	t.Logf("%.0f bytes per flow rule on its own resource (default history)", perRule)
	assert.Less(t, perRule, 40_000.0, "docs/design/limits.md states the figure")

	require.True(t, try(g, "r7"))
	_, err := loadFlow(g, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, g.reg.len(), "only r7, which counted an entry, is kept")
	after := heapInUse()
	// A twentieth when a resource held a five-minute history ring (20 KB);
	// with about 2.4 KB per resource, what stays is mostly the registry's
	// maps, which Go does not shrink (about 140 bytes per name).
	assert.Less(t, float64(after)-float64(base), float64(loaded-base)/8, "memory given back: base %d, loaded %d, after %d", base, loaded, after)
	s, ok := g.Snapshot("r7")
	require.True(t, ok)
	assert.Equal(t, uint64(1), s.TotalPass)
}

// BenchmarkRuleMemory reports the memory a flow rule on its own resource
// holds in the engine (bytes/rule), with the default history and none.
func BenchmarkRuleMemory(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{{"default-history", nil}, {"no-history", []Option{WithHistory(0)}}} {
		b.Run(tc.name, func(b *testing.B) {
			const n = 1000
			rs := flowRules(n, "r")
			var per float64
			for b.Loop() {
				g := New(tc.opts...)
				base := heapInUse()
				if _, err := loadFlow(g, rs); err != nil {
					b.Fatal(err)
				}
				per = float64(heapInUse()-base) / n
				_ = g.Close()
			}
			b.ReportMetric(per, "bytes/rule")
		})
	}
}
