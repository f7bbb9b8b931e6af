package sluice

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
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

// ruleFile is a rule file watched by an engine on a manual clock.
type ruleFile struct {
	t    *testing.T
	path string
	mu   sync.Mutex
	errs []error
}

func (f *ruleFile) write(content string) {
	f.t.Helper()
	require.NoError(f.t, os.WriteFile(f.path, []byte(content), 0o600))
}

func (f *ruleFile) report(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, err)
}

func (f *ruleFile) reported() []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]error(nil), f.errs...)
}

func TestWatchRuleFile(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	g, clk := newTestEngine(t, 0)
	f := &ruleFile{t: t, path: filepath.Join(t.TempDir(), "rules.yaml")}
	f.write("flow:\n  - resource: api\n    threshold: 1\n")

	src, err := g.WatchRuleFile(f.path, rules.WithErrorHandler(f.report))
	require.NoError(t, err)
	defer src.Close()
	assert.Equal(t, []rules.Flow{{Resource: "api", Threshold: 1}}, g.Rules().Flow, "loaded at once")
	assert.True(t, try(g, "api"))
	assert.False(t, try(g, "api"), "threshold 1 is in force")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// poll moves the engine's clock one poll interval and waits until the
	// watcher has looked at the file and waits again.
	poll := func() {
		t.Helper()
		require.NoError(t, clk.BlockUntil(ctx, 1))
		clk.Advance(time.Second)
		require.NoError(t, clk.BlockUntil(ctx, 1))
	}
	inForce := []rules.Flow{{Resource: "api", Threshold: 1}}

	// A malformed file keeps the rules.
	f.write("flow:\n  - resource: api\n    threshold: [\n")
	poll()
	assert.Equal(t, inForce, g.Rules().Flow)
	require.Len(t, f.reported(), 1)
	assert.ErrorContains(t, f.reported()[0], "rules: yaml: ")

	// An invalid rule is refused whole, naming its index and field.
	f.write(`flow:
  - {resource: api, threshold: 50}
  - {resource: b, threshold: 1}
  - {resource: c, threshold: -2}
`)
	poll()
	assert.Equal(t, inForce, g.Rules().Flow, "the valid rules of a refused file are not loaded either")
	require.Len(t, f.reported(), 2)
	assert.EqualError(t, f.reported()[1], f.path+`: rules: flow rule 2 (resource "c"): Threshold: must be a positive number, got -2`)
	var re *rules.Error
	require.ErrorAs(t, f.reported()[1], &re)
	assert.Equal(t, 2, re.Index)
	assert.Equal(t, "Threshold", re.Field)

	// A valid edit is loaded at the next poll.
	f.write("flow:\n  - resource: api\n    threshold: 3\nisolation:\n  - resource: db\n    threshold: 2\n")
	poll()
	withDB := []rules.Flow{{Resource: "api", Threshold: 3}, {Metric: rules.Concurrency, Resource: "db", Threshold: 2}}
	assert.Equal(t, withDB, g.Rules().Flow, "isolation rules are read as concurrency flow rules, after the flow rules")
	assert.Len(t, f.reported(), 2, "no new error")
	passed := 0
	for range 5 {
		if try(g, "api") {
			passed++
		}
	}
	assert.Equal(t, 3, passed, "the new threshold is in force")

	// A file that disappears is reported and keeps the rules.
	require.NoError(t, os.Remove(f.path))
	poll()
	assert.Equal(t, withDB, g.Rules().Flow)
	require.Len(t, f.reported(), 3)
	assert.ErrorIs(t, f.reported()[2], os.ErrNotExist)

	require.NoError(t, src.Close())
	assert.Equal(t, 0, clk.Waiters(), "Close stops the watcher")
}

func TestWatchRuleFileRefusesBadStart(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	dir := t.TempDir()
	bad := filepath.Join(dir, "rules.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"flow": [{"resource": "a", "threshold": "x"}]}`), 0o600))
	before := []rules.Flow{{Resource: "keep", Threshold: 1}}
	mustLoadFlow(t, g, before...)

	src, err := g.WatchRuleFile(bad)
	require.EqualError(t, err, bad+`: rules: flow rule 0 (resource "a"): Threshold: want a number, got string "x" at line 1`)
	assert.Nil(t, src)
	assert.Equal(t, before, g.Rules().Flow)
	assert.Equal(t, 0, clk.Waiters(), "nothing is watched")

	_, err = g.WatchRuleFile(filepath.Join(dir, "missing.yaml"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestPackageLevelLoadRules(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	old := SetDefault(g)
	defer SetDefault(old)

	set := rules.Set{Flow: []rules.Flow{{Resource: "x", Threshold: 2}}}
	require.NoError(t, LoadRules(set))
	assert.Equal(t, set, Default().Rules())
	assert.Equal(t, set, g.Rules())

	p := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(p, []byte("isolation:\n  - {resource: y, threshold: 3}\n"), 0o600))
	src, err := WatchRuleFile(p)
	require.NoError(t, err)
	require.NoError(t, src.Close())
	assert.Equal(t, rules.Set{Flow: []rules.Flow{{Metric: rules.Concurrency, Resource: "y", Threshold: 3}}}, g.Rules())
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
