package sluice

import (
	"sync"

	"github.com/sluice-go/sluice/rules"
)

// ruleKind loads and reads one kind of rule of a rules.Set through the
// engine's own loader for that kind.
type ruleKind struct {
	name string
	load func(eng *Engine, s rules.Set) error
	get  func(eng *Engine, s *rules.Set)
}

// ruleKinds are the kinds LoadRuleSet loads, in the order of the slot
// chain. A kind with no rules reads back as nil.
var ruleKinds = []ruleKind{
	{
		name: "system",
		load: func(eng *Engine, s rules.Set) error { _, err := eng.LoadSystemRules(s.System); return err },
		get:  func(eng *Engine, s *rules.Set) { s.System = nilIfEmpty(eng.SystemRules()) },
	},
	{
		name: "flow",
		load: func(eng *Engine, s rules.Set) error { _, err := eng.LoadFlowRules(s.Flow); return err },
		get:  func(eng *Engine, s *rules.Set) { s.Flow = nilIfEmpty(eng.FlowRules()) },
	},
	{
		name: "isolation",
		load: func(eng *Engine, s rules.Set) error { _, err := eng.LoadIsolationRules(s.Isolation); return err },
		get:  func(eng *Engine, s *rules.Set) { s.Isolation = nilIfEmpty(eng.IsolationRules()) },
	},
	{
		name: "param",
		load: func(eng *Engine, s rules.Set) error { _, err := eng.LoadParamRules(s.Param); return err },
		get:  func(eng *Engine, s *rules.Set) { s.Param = nilIfEmpty(eng.ParamRules()) },
	},
	{
		name: "circuit breaker",
		load: func(eng *Engine, s rules.Set) error {
			_, err := eng.LoadCircuitBreakerRules(s.CircuitBreaker)
			return err
		},
		get: func(eng *Engine, s *rules.Set) { s.CircuitBreaker = nilIfEmpty(eng.CircuitBreakerRules()) },
	},
}

func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

// ruleSetMu serializes LoadRuleSet calls (of every engine: they are rare),
// so two loads never interleave their kinds.
var ruleSetMu sync.Mutex

// LoadRuleSet replaces the engine's rules of every kind with those of set:
// a kind with no rules in set has none afterwards, so set is the whole
// truth (as a rule file is).
//
// It is all-or-nothing across kinds. Every rule of every kind is validated
// first (rules.Set.Validate); if any is invalid, nothing changes and the
// error (an *rules.Error, reached with errors.As) names the rule's kind,
// index, resource and field. The kinds are then loaded one after another
// through the engine's loaders (LoadSystemRules, LoadFlowRules,
// LoadIsolationRules, LoadParamRules, LoadCircuitBreakerRules), each keeping the state of rules that did not change; if
// a loader still refuses its rules, the kinds already loaded are put back
// as they were and its error is returned. An entry made during the load may
// see the new rules of one kind beside the old rules of another.
func (eng *Engine) LoadRuleSet(set rules.Set) error {
	if err := set.Validate(); err != nil {
		return err
	}
	ruleSetMu.Lock()
	defer ruleSetMu.Unlock()
	old := eng.RuleSet()
	for i, k := range ruleKinds {
		if err := k.load(eng, set); err != nil {
			for j := i - 1; j >= 0; j-- {
				_ = ruleKinds[j].load(eng, old) // rules that were in force load again
			}
			return err
		}
	}
	return nil
}

// RuleSet returns a copy of the engine's rules of every kind.
func (eng *Engine) RuleSet() rules.Set {
	var s rules.Set
	for _, k := range ruleKinds {
		k.get(eng, &s)
	}
	return s
}

// WatchRuleFile loads the rule file at path into the engine with
// LoadRuleSet and keeps watching it (see rules.FileSource): every valid
// edit is loaded after the next poll; a malformed file, an invalid rule or
// a file that disappears is reported to the error handler
// (rules.WithErrorHandler; by default the standard logger) and the rules in
// force stay. The source polls on the engine's clock unless opts say
// otherwise.
//
// If the file cannot be loaded at first, WatchRuleFile returns the error and
// watches nothing. Otherwise the caller owns the returned source and must
// Close it; closing the engine does not.
func (eng *Engine) WatchRuleFile(path string, opts ...rules.FileSourceOption) (*rules.FileSource, error) {
	opts = append([]rules.FileSourceOption{rules.WithClock(eng.clock)}, opts...)
	src, err := rules.NewFileSource(path, eng.LoadRuleSet, opts...)
	if err != nil {
		return nil, err
	}
	if err := src.Start(); err != nil {
		return nil, err
	}
	return src, nil
}

// LoadRuleSet replaces the default engine's rules of every kind (see
// Engine.LoadRuleSet).
func LoadRuleSet(set rules.Set) error { return defaultEngine().LoadRuleSet(set) }

// RuleSet returns the default engine's rules of every kind.
func RuleSet() rules.Set { return defaultEngine().RuleSet() }

// WatchRuleFile watches a rule file for the default engine (see
// Engine.WatchRuleFile). The source keeps loading into the engine that was
// the default when it was called.
func WatchRuleFile(path string, opts ...rules.FileSourceOption) (*rules.FileSource, error) {
	return defaultEngine().WatchRuleFile(path, opts...)
}
