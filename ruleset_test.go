package sluice

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

func fullRuleSet() rules.Set {
	return rules.Set{
		Flow: []rules.Flow{
			{Resource: "GET /orders", Threshold: 5},
			{Resource: "POST /orders", Threshold: 20, Throttle: &rules.Throttle{MaxQueueing: 500 * time.Millisecond}},
			{Metric: rules.Concurrency, Resource: "db", Threshold: 4},
		},
		Param:          []rules.Param{{Resource: "GET /orders", Key: "user", Threshold: 2, Exceptions: map[string]int64{"vip": 10}}},
		System:         []rules.System{{Metric: rules.InboundQPS, Threshold: 1000}},
		CircuitBreaker: []rules.CircuitBreaker{{Resource: "inventory", Strategy: rules.ErrorRatio, Threshold: 0.5, MinRequestAmount: 10, StatInterval: 10 * time.Second, RetryTimeout: 30 * time.Second}},
	}
}

func TestLoadRules(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	want := fullRuleSet()
	require.NoError(t, g.LoadRules(want))
	assert.Equal(t, want, g.Rules())
	assert.Equal(t, want.Flow, g.Rules().Flow)
	assert.Equal(t, want.System, g.Rules().System)
	assert.Equal(t, want.CircuitBreaker, g.Rules().CircuitBreaker)
	assert.Equal(t, want.Param, g.Rules().Param)

	assert.True(t, try(g, "db"), "concurrency rules are in force")

	// A set without a kind removes that kind.
	require.NoError(t, g.LoadRules(rules.Set{Flow: want.Flow[:1]}))
	assert.Equal(t, rules.Set{Flow: want.Flow[:1]}, g.Rules())
	require.NoError(t, g.LoadRules(rules.Set{}))
	assert.Equal(t, rules.Set{}, g.Rules())
}

func TestLoadRulesRefusesWhole(t *testing.T) {
	tests := []struct {
		name string
		give rules.Set
		want string
		// wantKind and wantIndex are the *rules.Error's.
		wantKind  string
		wantIndex int
		wantField string
	}{
		{
			name: "negative flow threshold at index 2",
			give: rules.Set{Flow: []rules.Flow{
				{Resource: "a", Threshold: 1}, {Resource: "b", Threshold: 1}, {Resource: "c", Threshold: -1},
			}},
			want:     `rules: flow rule 2 (resource "c"): Threshold: must be a positive number, got -1`,
			wantKind: "flow", wantIndex: 2, wantField: "Threshold",
		},
		{
			name: "valid flow rules, invalid concurrency rule",
			give: rules.Set{
				Flow: []rules.Flow{{Resource: "new", Threshold: 1}, {Metric: rules.Concurrency, Resource: "db", Threshold: 1}, {Metric: rules.Concurrency, Resource: "", Threshold: 1}},
			},
			want:     `rules: flow rule 2: Resource: must not be empty`,
			wantKind: "flow", wantIndex: 2, wantField: "Resource",
		},
		{
			name: "valid flow rules, invalid circuit breaker rule",
			give: rules.Set{
				Flow:           []rules.Flow{{Resource: "new", Threshold: 1}},
				CircuitBreaker: []rules.CircuitBreaker{{Resource: "inventory", Strategy: rules.ErrorRatio, Threshold: 2, RetryTimeout: time.Second}},
			},
			wantKind: "circuit breaker", wantIndex: 0, wantField: "Threshold",
		},
		{
			name: "valid flow and isolation rules, invalid param rule",
			give: rules.Set{
				Flow:  []rules.Flow{{Resource: "new", Threshold: 1}, {Metric: rules.Concurrency, Resource: "db", Threshold: 9}},
				Param: []rules.Param{{Resource: "p", Threshold: 0}},
			},
			wantKind: "param", wantIndex: 0, wantField: "Threshold",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, _ := newTestEngine(t, 0)
			before := fullRuleSet()
			require.NoError(t, g.LoadRules(before))

			err := g.LoadRules(tt.give)
			require.Error(t, err)
			if tt.want != "" {
				assert.EqualError(t, err, tt.want)
			}
			var re *rules.Error
			require.ErrorAs(t, err, &re)
			assert.Equal(t, tt.wantKind, re.Kind)
			assert.Equal(t, tt.wantIndex, re.Index)
			assert.Equal(t, tt.wantField, re.Field)
			assert.Equal(t, before, g.Rules(), "nothing changed")
			assert.Equal(t, before.Flow, g.Rules().Flow)
		})
	}
}

// failingKind is a rule kind whose rules validate but fail to build.
type failingKind struct{ err error }

func (f failingKind) validateIn(*Engine, *rules.Set) error        { return nil }
func (f failingKind) stageIn(*Engine, *rules.Set) (func(), error) { return nil, f.err }
func (f failingKind) readInto(*Engine, *rules.Set)                {}
func (f failingKind) claimsNodes() bool                           { return false }
func (f failingKind) kindName() string                            { return "failing" }

// TestLoadRulesIsAtomic makes the last kind fail after every other kind
// compiled: nothing of the new set goes into force, and the counting state
// of the rules in force is untouched.
func TestLoadRulesIsAtomic(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	before := fullRuleSet()
	require.NoError(t, g.LoadRules(before))
	for i := 0; i < 5; i++ {
		require.True(t, try(g, "GET /orders"), "pass %d of 5", i)
	}

	refused := errors.New("refused by the last kind")
	saved := ruleKinds
	ruleKinds = append(append([]anyKind(nil), saved...), failingKind{refused})
	defer func() { ruleKinds = saved }()

	next := fullRuleSet()
	next.Flow[0].Threshold = 50 // counts the same way: would inherit the window
	next.Flow[2].Threshold = 1
	next.System = nil
	err := g.LoadRules(next)
	require.ErrorIs(t, err, refused)
	assert.Equal(t, before, g.Rules())
	assert.False(t, try(g, "GET /orders"), "the old threshold, with its window, is in force")
	assert.Equal(t, before.System, g.Rules().System)
	var held []Pass
	for i := 0; i < 4; i++ {
		p, err := g.Entry("db")
		require.NoError(t, err, "isolation threshold 4 is in force")
		held = append(held, p)
	}
	for _, p := range held {
		p.Exit()
	}
}

// TestLoadersRefuseAfterClose checks that no loader changes the rules of a
// closed engine: each returns ErrClosed.
func TestLoadersRefuseAfterClose(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	before := fullRuleSet()
	require.NoError(t, g.LoadRules(before))
	require.NoError(t, g.Close())
	tests := []struct {
		name string
		load func() error
	}{
		{"flow", func() error { _, err := loadFlow(g, nil); return err }},
		{"isolation", func() error { _, err := loadFlow(g, nil); return err }},
		{"system", func() error { _, err := loadSystem(g, nil); return err }},
		{"circuit breaker", func() error { _, err := loadBreakers(g, nil); return err }},
		{"param", func() error { _, err := loadParams(g, nil); return err }},
		{"rule set", func() error { return g.LoadRules(rules.Set{}) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.ErrorIs(t, tt.load(), ErrClosed)
			assert.Equal(t, before, g.Rules(), "nothing changed")
		})
	}
}

func TestPackageLevelLoadRules(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	old := SetDefault(g)
	defer SetDefault(old)

	set := rules.Set{Flow: []rules.Flow{{Resource: "x", Threshold: 2}}}
	require.NoError(t, LoadRules(set))
	assert.Equal(t, set, Default().Rules())
	assert.Equal(t, set, g.Rules())
}

// TestLoadersRefuseDuplicates checks that every kind's loader refuses two
// rules that count the same thing the same way, naming the later one, and
// keeps the rules in force.
func TestLoadersRefuseDuplicates(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	iso := rules.Flow{Metric: rules.Concurrency, Resource: "r", Threshold: 2}
	cb := rules.CircuitBreaker{Resource: "r", Strategy: rules.ErrorCount, Threshold: 5, RetryTimeout: time.Second}
	par := rules.Param{Resource: "r", Threshold: 3, Duration: time.Second}
	sys := rules.System{Metric: rules.InboundQPS, Threshold: 100}
	_, err := loadFlow(g, []rules.Flow{iso})
	require.NoError(t, err)
	_, err = loadBreakers(g, []rules.CircuitBreaker{cb})
	require.NoError(t, err)
	_, err = loadParams(g, []rules.Param{par})
	require.NoError(t, err)
	_, err = loadSystem(g, []rules.System{sys})
	require.NoError(t, err)

	tests := []struct {
		name string
		load func() error
		kind string
	}{
		{"isolation", func() error {
			_, err := loadFlow(g, []rules.Flow{iso, {Metric: rules.Concurrency, Resource: "x", Threshold: 1}, {Metric: rules.Concurrency, Resource: "r", Threshold: 9}})
			return err
		}, "flow"},
		{"circuit breaker", func() error {
			_, err := loadBreakers(g, []rules.CircuitBreaker{cb, {Resource: "x", Strategy: rules.ErrorCount, Threshold: 1, RetryTimeout: time.Second}, cb})
			return err
		}, "circuit breaker"},
		{"param", func() error {
			_, err := loadParams(g, []rules.Param{par, {Resource: "x", Threshold: 1, Duration: time.Second}, {Resource: "r", Threshold: 7, Duration: time.Second}})
			return err
		}, "param"},
		{"system", func() error {
			_, err := loadSystem(g, []rules.System{sys, {Metric: rules.InboundConcurrency, Threshold: 4}, {Metric: rules.InboundQPS, Threshold: 50}})
			return err
		}, "system"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.load()
			var re *rules.Error
			require.ErrorAs(t, err, &re)
			require.Equal(t, tt.kind, re.Kind)
			require.Equal(t, 2, re.Index)
			require.ErrorContains(t, err, "duplicates rule 0")
		})
	}
	require.Equal(t, []rules.Flow{iso}, g.Rules().Flow)
	require.Equal(t, []rules.CircuitBreaker{cb}, g.Rules().CircuitBreaker)
	require.Equal(t, []rules.Param{par}, g.Rules().Param)
	require.Equal(t, []rules.System{sys}, g.Rules().System)
}

// TestUpdateRulesConcurrent: updaters of different kinds, and several of
// one kind, run at once; each read-modify-write happens under the engine's
// load lock, so none loses another's change (a Rules then LoadRules from
// each goroutine would).
func TestUpdateRulesConcurrent(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	const writers, each = 4, 25
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range each {
				res := fmt.Sprintf("f%d-%d", w, i)
				require.NoError(t, g.UpdateRules(func(s *rules.Set) {
					s.Flow = append(s.Flow, rules.Flow{Resource: res, Threshold: 1})
				}))
			}
		}()
		go func() {
			defer wg.Done()
			for i := range each {
				res := fmt.Sprintf("b%d-%d", w, i)
				require.NoError(t, g.UpdateRules(func(s *rules.Set) {
					s.CircuitBreaker = append(s.CircuitBreaker, rules.CircuitBreaker{Resource: res, Strategy: rules.ErrorCount, Threshold: 1, RetryTimeout: time.Second})
				}))
			}
		}()
	}
	wg.Wait()
	set := g.Rules()
	assert.Len(t, set.Flow, writers*each)
	assert.Len(t, set.CircuitBreaker, writers*each)
	for _, r := range set.Flow {
		assert.True(t, try(g, r.Resource))
		assert.False(t, try(g, r.Resource), "%s: every flow rule in force", r.Resource)
	}
}

// TestUpdateRules: f sees the rules in force and changes only what it sets;
// an invalid result changes nothing and names the rule; events are per kind
// changed; a closed engine refuses without calling f.
func TestUpdateRules(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	var evs []string
	g.Subscribe(func(e stat.Event) { evs = append(evs, string(e.Kind)+" "+e.RuleKind) })
	base := rules.Set{
		Flow:   []rules.Flow{{Resource: "a", Threshold: 1}},
		System: []rules.System{{Metric: rules.InboundQPS, Threshold: 100}},
	}
	require.NoError(t, g.LoadRules(base))
	require.NoError(t, g.UpdateRules(func(s *rules.Set) {
		assert.Equal(t, base, *s)
		s.Param = []rules.Param{{Resource: "a", Threshold: 5, Duration: time.Second}}
	}))
	want := base
	want.Param = []rules.Param{{Resource: "a", Threshold: 5, Duration: time.Second}}
	assert.Equal(t, want, g.Rules())
	require.NoError(t, g.UpdateRules(func(*rules.Set) {}), "no change, no event")

	err := g.UpdateRules(func(s *rules.Set) { s.Flow[0].Threshold = -1 })
	var re *rules.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "flow", re.Kind)
	assert.Equal(t, want, g.Rules(), "the rules in force stay")
	assert.Equal(t, []string{"rules-loaded flow", "rules-loaded system", "rules-loaded param", "rules-refused set"}, evs)

	require.NoError(t, g.Close())
	called := false
	require.ErrorIs(t, g.UpdateRules(func(*rules.Set) { called = true }), ErrClosed)
	assert.False(t, called)
}
