package sluice

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/rules"
)

func fullRuleSet() rules.Set {
	return rules.Set{
		Flow: []rules.Flow{
			{Resource: "GET /orders", Threshold: 5},
			{Resource: "POST /orders", Threshold: 20, Behavior: rules.Throttle, MaxQueueing: 500 * time.Millisecond},
			{Metric: rules.Concurrency, Resource: "db", Threshold: 4},
		},
		Param:          []rules.Param{{Resource: "GET /orders", Key: "user", Threshold: 2, Exceptions: map[string]int64{"vip": 10}}},
		System:         []rules.System{{Metric: rules.InboundQPS, Threshold: 1000}},
		CircuitBreaker: []rules.CircuitBreaker{{Resource: "inventory", Strategy: rules.ErrorRatio, Threshold: 0.5, MinRequestAmount: 10, StatInterval: 10 * time.Second, RetryTimeout: 30 * time.Second}},
	}
}

func TestLoadRuleSet(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	want := fullRuleSet()
	require.NoError(t, g.LoadRuleSet(want))
	assert.Equal(t, want, g.RuleSet())
	assert.Equal(t, want.Flow, g.FlowRules())
	assert.Equal(t, want.System, g.SystemRules())
	assert.Equal(t, want.CircuitBreaker, g.CircuitBreakerRules())
	assert.Equal(t, want.Param, g.ParamRules())

	assert.True(t, try(g, "db"), "concurrency rules are in force")

	// A set without a kind removes that kind.
	require.NoError(t, g.LoadRuleSet(rules.Set{Flow: want.Flow[:1]}))
	assert.Equal(t, rules.Set{Flow: want.Flow[:1]}, g.RuleSet())
	require.NoError(t, g.LoadRuleSet(rules.Set{}))
	assert.Equal(t, rules.Set{}, g.RuleSet())
}

func TestLoadRuleSetRefusesWhole(t *testing.T) {
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
			require.NoError(t, g.LoadRuleSet(before))

			err := g.LoadRuleSet(tt.give)
			require.Error(t, err)
			if tt.want != "" {
				assert.EqualError(t, err, tt.want)
			}
			var re *rules.Error
			require.ErrorAs(t, err, &re)
			assert.Equal(t, tt.wantKind, re.Kind)
			assert.Equal(t, tt.wantIndex, re.Index)
			assert.Equal(t, tt.wantField, re.Field)
			assert.Equal(t, before, g.RuleSet(), "nothing changed")
			assert.Equal(t, before.Flow, g.FlowRules())
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

// TestLoadRuleSetIsAtomic makes the last kind fail after every other kind
// compiled: nothing of the new set goes into force, and the counting state
// of the rules in force is untouched.
func TestLoadRuleSetIsAtomic(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	before := fullRuleSet()
	require.NoError(t, g.LoadRuleSet(before))
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
	err := g.LoadRuleSet(next)
	require.ErrorIs(t, err, refused)
	assert.Equal(t, before, g.RuleSet())
	assert.False(t, try(g, "GET /orders"), "the old threshold, with its window, is in force")
	assert.Equal(t, before.System, g.SystemRules())
	var held []*Pass
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
	require.NoError(t, g.LoadRuleSet(before))
	require.NoError(t, g.Close())
	tests := []struct {
		name string
		load func() error
	}{
		{"flow", func() error { _, err := g.LoadFlowRules(nil); return err }},
		{"isolation", func() error { _, err := g.LoadFlowRules(nil); return err }},
		{"system", func() error { _, err := g.LoadSystemRules(nil); return err }},
		{"circuit breaker", func() error { _, err := g.LoadCircuitBreakerRules(nil); return err }},
		{"param", func() error { _, err := g.LoadParamRules(nil); return err }},
		{"rule set", func() error { return g.LoadRuleSet(rules.Set{}) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.ErrorIs(t, tt.load(), ErrClosed)
			assert.Equal(t, before, g.RuleSet(), "nothing changed")
		})
	}
}

func TestPackageLevelRuleSet(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	old := SetDefault(g)
	defer SetDefault(old)

	set := rules.Set{Flow: []rules.Flow{{Resource: "x", Threshold: 2}}}
	require.NoError(t, LoadRuleSet(set))
	assert.Equal(t, set, RuleSet())
	assert.Equal(t, set, g.RuleSet())
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
	_, err := g.LoadFlowRules([]rules.Flow{iso})
	require.NoError(t, err)
	_, err = g.LoadCircuitBreakerRules([]rules.CircuitBreaker{cb})
	require.NoError(t, err)
	_, err = g.LoadParamRules([]rules.Param{par})
	require.NoError(t, err)
	_, err = g.LoadSystemRules([]rules.System{sys})
	require.NoError(t, err)

	tests := []struct {
		name string
		load func() error
		kind string
	}{
		{"isolation", func() error {
			_, err := g.LoadFlowRules([]rules.Flow{iso, {Metric: rules.Concurrency, Resource: "x", Threshold: 1}, {Metric: rules.Concurrency, Resource: "r", Threshold: 9}})
			return err
		}, "flow"},
		{"circuit breaker", func() error {
			_, err := g.LoadCircuitBreakerRules([]rules.CircuitBreaker{cb, {Resource: "x", Strategy: rules.ErrorCount, Threshold: 1, RetryTimeout: time.Second}, cb})
			return err
		}, "circuit breaker"},
		{"param", func() error {
			_, err := g.LoadParamRules([]rules.Param{par, {Resource: "x", Threshold: 1, Duration: time.Second}, {Resource: "r", Threshold: 7, Duration: time.Second}})
			return err
		}, "param"},
		{"system", func() error {
			_, err := g.LoadSystemRules([]rules.System{sys, {Metric: rules.InboundConcurrency, Threshold: 4}, {Metric: rules.InboundQPS, Threshold: 50}})
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
	require.Equal(t, []rules.Flow{iso}, g.FlowRules())
	require.Equal(t, []rules.CircuitBreaker{cb}, g.CircuitBreakerRules())
	require.Equal(t, []rules.Param{par}, g.ParamRules())
	require.Equal(t, []rules.System{sys}, g.SystemRules())
}
