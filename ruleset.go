package sluice

import (
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// LoadRuleSet replaces the engine's rules of every kind with those of set:
// a kind with no rules in set has none afterwards, so set is the whole
// truth (as a rule file is).
//
// It is all-or-nothing. Every rule of every kind is validated first, kind
// by kind in the order of rules.Set; if any is invalid, nothing changes and
// the error (an *rules.Error, reached with errors.As) names the rule's kind,
// index, resource and field. Then every kind is compiled against the rules
// in force, keeping the counting state of rules that count the same way (as
// the Load*Rules methods do), and only when all compiled does the new set
// go into force. Each resource then switches from its old rules of every
// kind to its new ones at once; system rules, which are not a resource's,
// switch just before.
//
// Loads into one engine are serialized; loads into different engines are
// independent. On a closed engine it returns ErrClosed and changes nothing.
func (eng *Engine) LoadRuleSet(set rules.Set) error { return eng.loadRuleSet(set, 0) }

// loadRuleSet is LoadRuleSet of version of a rule store (0: none), which
// its events carry.
func (eng *Engine) loadRuleSet(set rules.Set, version int64) error {
	for _, k := range ruleKinds {
		if err := k.validateIn(eng, &set); err != nil {
			eng.events.Publish(stat.Event{Kind: stat.EventRulesRefused, At: eng.clock.Nanotime(), RuleKind: "set", Err: err, RuleVersion: version})
			return err
		}
	}
	defer eng.events.Drain() // after the unlock: deferred first, runs last
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if eng.closed.Load() {
		return ErrClosed
	}
	defer eng.sweep() // a rule load is the regular time to forget idle resources
	if err := eng.checkResources(&set); err != nil {
		eng.events.Enqueue(stat.Event{Kind: stat.EventRulesRefused, At: eng.clock.Nanotime(), RuleKind: "set", Err: err, RuleVersion: version})
		return err
	}
	var commits []func()
	changed := map[string]bool{}
	// Kinds whose build claims resource nodes come last: a failure after
	// them would leave their claims behind.
	for _, last := range [2]bool{false, true} {
		for _, k := range ruleKinds {
			if k.claimsNodes() != last {
				continue
			}
			commit, err := k.stageIn(eng, &set)
			if err != nil {
				eng.events.Enqueue(stat.Event{Kind: stat.EventRulesRefused, At: eng.clock.Nanotime(), RuleKind: "set", Err: err, RuleVersion: version})
				return err
			}
			if commit != nil {
				commits = append(commits, commit)
				changed[k.kindName()] = true
			}
		}
	}
	if len(commits) == 0 {
		return nil
	}
	for _, commit := range commits {
		commit()
	}
	eng.publish()
	now := eng.clock.Nanotime()
	for _, k := range ruleKinds { // in the order of rules.Set
		if changed[k.kindName()] {
			eng.events.Enqueue(stat.Event{Kind: stat.EventRulesLoaded, At: now, RuleKind: k.kindName(), RuleVersion: version})
		}
	}
	return nil
}

// RuleSet returns a copy of the engine's rules of every kind, as one
// consistent set (a kind with no rules is nil).
func (eng *Engine) RuleSet() rules.Set {
	eng.mu.Lock()
	defer eng.mu.Unlock()
	var s rules.Set
	for _, k := range ruleKinds {
		k.readInto(eng, &s)
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
