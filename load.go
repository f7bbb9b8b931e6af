package sluice

import (
	"reflect"
	"slices"

	"github.com/sluice-go/sluice/internal/degrade"
	"github.com/sluice-go/sluice/internal/flow"
	"github.com/sluice-go/sluice/internal/param"
	"github.com/sluice-go/sluice/internal/rulewalk"
	"github.com/sluice-go/sluice/internal/system"
	"github.com/sluice-go/sluice/rules"
)

// Every kind of rule is loaded by the same code: validate the whole slice,
// build its compiled form against the one in force (so that counting state
// survives an equivalent reload), then put it in force. LoadRules loads
// every kind at once; UpdateRules is LoadRules of the set in force as a
// function changed it.

// kindState is the rules of one kind in force (the engine's own copy) and
// their compiled form.
type kindState[R, C any] struct {
	rules []R
	ctl   C
}

// ruleKind is how the engine loads rules of type R, compiled to C.
type ruleKind[R, C any] struct {
	// name is the kind's name in events and errors ("flow", ...).
	name string
	// state returns the engine's rules of this kind.
	state func(*Engine) *kindState[R, C]
	// of returns this kind's rules in a rules.Set.
	of func(*rules.Set) *[]R
	// validate checks a whole slice and returns an *rules.Error naming the
	// first invalid rule's index. It is the only validation of this kind
	// of rule in the engine (called through check, before any build).
	validate func([]R) error
	equal    func(a, b []R) bool
	clone    func([]R) []R
	// build compiles valid rules, taking over the state of old. It must
	// change nothing the rules in force use unless it succeeds (see
	// claims).
	build func(eng *Engine, rs []R, old C) (C, error)
	// use puts compiled rules in force beyond the resources' rule sets,
	// which publish rebuilds; nil when there is nothing else.
	use func(eng *Engine, c C)
	// claims is set when a successful build changes resource nodes (flow
	// rules claim the nodes' admission windows): LoadRules then builds
	// this kind after every other, so nothing can fail after it.
	claims bool
}

func equalRules[R comparable](a, b []R) bool { return slices.Equal(a, b) }

// cloneRules returns a copy of rs, nil when it is empty.
func cloneRules[R any](rs []R) []R {
	if len(rs) == 0 {
		return nil
	}
	return slices.Clone(rs)
}

// cloneFlows is cloneRules for flow rules, whose cluster sections are
// pointers: the copy shares none with rs.
func cloneFlows(rs []rules.Flow) []rules.Flow {
	out := cloneRules(rs)
	for i := range out {
		out[i] = rulewalk.Clone(out[i])
	}
	return out
}

// The kinds, in the order of rules.Set (and of the errors LoadRules
// reports). Each kind's validate field is the single place its rules are
// validated: package rules' whole-slice validator, which also refuses
// duplicate rules (docs/design/rule-files.md says what counts as a duplicate).
var (
	flowKind = &ruleKind[rules.Flow, map[string][]*flow.Controller]{
		name:     "flow",
		state:    func(eng *Engine) *kindState[rules.Flow, map[string][]*flow.Controller] { return &eng.flow },
		of:       func(s *rules.Set) *[]rules.Flow { return &s.Flow },
		validate: func(rs []rules.Flow) error { return (&rules.Set{Flow: rs}).Validate() },
		equal:    func(a, b []rules.Flow) bool { return reflect.DeepEqual(a, b) },
		clone:    cloneFlows,
		build: func(eng *Engine, rs []rules.Flow, old map[string][]*flow.Controller) (map[string][]*flow.Controller, error) {
			if err := eng.cluster.refuses(rs); err != nil {
				return nil, err
			}
			rs, callers := splitCallerFlows(rs) // callerflow.go
			if err := eng.stageCallerFlows(callers); err != nil {
				return nil, err
			}
			ctl, err := flow.Build(rs, old, eng.node, eng.cluster.leases())
			eng.hookTiers(rs, ctl)          // tiered.go
			eng.hookAdaptive(old, ctl, err) // adaptive.go
			return ctl, err
		},
		use:    func(eng *Engine, _ map[string][]*flow.Controller) { eng.useCallerFlows() },
		claims: true,
	}
	systemKind = &ruleKind[rules.System, *system.RuleSet]{
		name:     "system",
		state:    func(eng *Engine) *kindState[rules.System, *system.RuleSet] { return &eng.sys },
		of:       func(s *rules.Set) *[]rules.System { return &s.System },
		validate: func(rs []rules.System) error { return (&rules.Set{System: rs}).Validate() },
		equal:    equalRules[rules.System],
		clone:    cloneRules[rules.System],
		build: func(_ *Engine, rs []rules.System, _ *system.RuleSet) (*system.RuleSet, error) {
			return system.Compile(rs), nil
		},
		use: useSystem,
	}
	breakerKind = &ruleKind[rules.CircuitBreaker, map[string][]*degrade.Breaker]{
		name: "circuit breaker",
		state: func(eng *Engine) *kindState[rules.CircuitBreaker, map[string][]*degrade.Breaker] {
			return &eng.breakers
		},
		of:       func(s *rules.Set) *[]rules.CircuitBreaker { return &s.CircuitBreaker },
		validate: func(rs []rules.CircuitBreaker) error { return (&rules.Set{CircuitBreaker: rs}).Validate() },
		equal:    equalRules[rules.CircuitBreaker],
		clone:    cloneRules[rules.CircuitBreaker],
		build: func(eng *Engine, rs []rules.CircuitBreaker, old map[string][]*degrade.Breaker) (map[string][]*degrade.Breaker, error) {
			return degrade.Build(rs, old, eng.breakerHub), nil
		},
		use: func(_ *Engine, bs map[string][]*degrade.Breaker) { degrade.Use(bs) },
	}
	paramKind = &ruleKind[rules.Param, map[string][]*param.Controller]{
		name:     "param",
		state:    func(eng *Engine) *kindState[rules.Param, map[string][]*param.Controller] { return &eng.param },
		of:       func(s *rules.Set) *[]rules.Param { return &s.Param },
		validate: func(rs []rules.Param) error { return (&rules.Set{Param: rs}).Validate() },
		equal:    func(a, b []rules.Param) bool { return reflect.DeepEqual(a, b) },
		clone:    cloneParams,
		build: func(eng *Engine, rs []rules.Param, old map[string][]*param.Controller) (map[string][]*param.Controller, error) {
			if err := eng.cluster.refusesParams(rs); err != nil {
				return nil, err
			}
			return param.Build(rs, old, eng.cluster.params())
		},
	}
)

// anyKind is a ruleKind of any rule type, as LoadRules and Rules see it.
type anyKind interface {
	// validateIn validates the kind's rules in set, and checks them against
	// eng's limits.
	validateIn(eng *Engine, set *rules.Set) error
	// stageIn builds the kind's rules in set; see ruleKind.stage.
	stageIn(eng *Engine, set *rules.Set) (commit func(), err error)
	// readInto copies the kind's rules in force into set. Must hold eng.mu.
	readInto(eng *Engine, set *rules.Set)
	// claimsNodes reports ruleKind.claims.
	claimsNodes() bool
	// kindName reports ruleKind.name.
	kindName() string
}

// ruleKinds are every kind, in the order of rules.Set.
var ruleKinds = []anyKind{flowKind, systemKind, breakerKind, paramKind, authorityKind}

// check validates rs whole (see validate) and checks them against the
// engine's limits (limits.go).
func (k *ruleKind[R, C]) check(eng *Engine, rs []R) error {
	if err := k.validate(rs); err != nil {
		return err
	}
	return checkLimits(eng, k, rs)
}

func (k *ruleKind[R, C]) validateIn(eng *Engine, set *rules.Set) error {
	return k.check(eng, *k.of(set))
}

func (k *ruleKind[R, C]) stageIn(eng *Engine, set *rules.Set) (func(), error) {
	return k.stage(eng, *k.of(set))
}

func (k *ruleKind[R, C]) readInto(eng *Engine, set *rules.Set) {
	*k.of(set) = k.clone(k.state(eng).rules)
}

func (k *ruleKind[R, C]) claimsNodes() bool { return k.claims }

func (k *ruleKind[R, C]) kindName() string { return k.name }

// stage builds valid rules rs against the engine's rules of this kind and
// returns the function that puts them in force (publish must follow it), or
// nil when rs are the rules in force. When it fails, nothing changed. Must
// hold eng.mu.
func (k *ruleKind[R, C]) stage(eng *Engine, rs []R) (commit func(), err error) {
	st := k.state(eng)
	if k.equal(st.rules, rs) {
		return nil, nil
	}
	ctl, err := k.build(eng, rs, st.ctl)
	if err != nil {
		return nil, err
	}
	kept := k.clone(rs)
	return func() {
		st.rules, st.ctl = kept, ctl
		if k.use != nil {
			k.use(eng, ctl)
		}
	}, nil
}
