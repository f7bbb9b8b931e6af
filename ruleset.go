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
func (eng *Engine) LoadRuleSet(set rules.Set) error {
	for _, k := range ruleKinds {
		if err := k.validateIn(eng, &set); err != nil {
			eng.events.Publish(stat.Event{Kind: stat.EventRulesRefused, At: eng.clock.Nanotime(), RuleKind: "set", Err: err})
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
		eng.events.Enqueue(stat.Event{Kind: stat.EventRulesRefused, At: eng.clock.Nanotime(), RuleKind: "set", Err: err})
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
				eng.events.Enqueue(stat.Event{Kind: stat.EventRulesRefused, At: eng.clock.Nanotime(), RuleKind: "set", Err: err})
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
			eng.events.Enqueue(stat.Event{Kind: stat.EventRulesLoaded, At: now, RuleKind: k.kindName()})
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

// LoadRuleSet replaces the default engine's rules of every kind (see
// Engine.LoadRuleSet).
func LoadRuleSet(set rules.Set) error { return defaultEngine().LoadRuleSet(set) }

// RuleSet returns the default engine's rules of every kind.
func RuleSet() rules.Set { return defaultEngine().RuleSet() }
