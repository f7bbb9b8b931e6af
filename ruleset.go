package sluice

import (
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// LoadRules replaces the engine's rules of every kind with those of set:
// a kind with no rules in set has none afterwards, so set is the whole
// truth (as a rule file is). To change the rules of some kinds and keep the
// others, use UpdateRules.
//
// It is all-or-nothing. Every rule of every kind is validated first, kind
// by kind in the order of rules.Set; if any is invalid, nothing changes and
// the error (an *rules.Error, reached with errors.As) names the rule's kind,
// index, resource and field. Then every kind is compiled against the rules
// in force, keeping the counting state of rules that count the same way,
// and only when all compiled does the new set go into force. Each resource
// then switches from its old rules of every kind to its new ones at once;
// system rules, which are not a resource's, switch just before.
//
// A flow rule that counts the same way as one in force (same resource,
// metric, sections (warm-up, bucket, throttle), interval and associated
// resource) keeps that rule's counters and pacing schedule whatever else
// changed, so reloading under traffic admits no extra burst. A warm-up rule
// also keeps its warm-up tokens (how warm it is) when its curve is
// unchanged: the same Threshold and WarmUp section (ColdFactor 0 and 3 are
// the same); a change of ID, MaxQueueing or Shadow alone leaves it as warm as it was, as a Guava limiter
// stays warm whatever its callers' timeouts. Another curve starts it cold,
// with its queue kept. What circuit-breaker and
// param rules keep is said in docs/design/limits.md and on CircuitBreakerStates.
//
// The engine keeps its own copy of set. Its event stream (Subscribe) gets
// one stat.EventRulesLoaded per kind whose rules changed (none when set is
// the rules in force), or one stat.EventRulesRefused. Loads into one engine
// are serialized; loads into different engines are independent. On a
// closed engine it returns ErrClosed and changes nothing.
func (eng *Engine) LoadRules(set rules.Set) error {
	if err := eng.validateSet(&set); err != nil {
		eng.events.Publish(stat.Event{Kind: stat.EventRulesRefused, At: eng.clock.Nanotime(), RuleKind: "set", Err: err})
		return err
	}
	defer eng.events.Drain() // after the unlock: deferred first, runs last
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if eng.closed.Load() {
		return ErrClosed
	}
	return eng.applyLocked(&set)
}

// UpdateRules loads the rules f makes of a copy of the rules in force, as
// LoadRules does: f sets the kinds to change and leaves the others as they
// are, for example
//
//	err := eng.UpdateRules(func(s *rules.Set) { s.Flow = append(s.Flow, r) })
//
// The read, f and the load happen under the lock that serializes the
// engine's loads, so two updates of different kinds made at once both stay
// in force, and no load comes between f's read and its write. f must not
// call the engine's rule loaders (it would deadlock); it may be called
// once, or not at all on a closed engine. When the new set is invalid,
// nothing changes and the error names the rule, as with LoadRules.
func (eng *Engine) UpdateRules(f func(*rules.Set)) error {
	defer eng.events.Drain() // after the unlock: deferred first, runs last
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if eng.closed.Load() {
		return ErrClosed
	}
	set := eng.rulesLocked()
	f(&set)
	if err := eng.validateSet(&set); err != nil {
		eng.events.Enqueue(stat.Event{Kind: stat.EventRulesRefused, At: eng.clock.Nanotime(), RuleKind: "set", Err: err})
		return err
	}
	return eng.applyLocked(&set)
}

// validateSet validates every kind of set, in the order of rules.Set, and
// checks them against the engine's limits.
func (eng *Engine) validateSet(set *rules.Set) error {
	for _, k := range ruleKinds {
		if err := k.validateIn(eng, set); err != nil {
			return err
		}
	}
	return nil
}

// applyLocked puts the valid set in force (see LoadRules). Must hold eng.mu,
// on an engine not closed; the caller drains the events after unlocking.
func (eng *Engine) applyLocked(set *rules.Set) error {
	defer eng.sweep() // a rule load is the regular time to forget idle resources
	if err := eng.checkResources(set); err != nil {
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
			commit, err := k.stageIn(eng, set)
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

// Rules returns a copy of the engine's rules of every kind, as one
// consistent set (a kind with no rules is nil).
func (eng *Engine) Rules() rules.Set {
	eng.mu.Lock()
	defer eng.mu.Unlock()
	return eng.rulesLocked()
}

// rulesLocked is Rules. Must hold eng.mu.
func (eng *Engine) rulesLocked() rules.Set {
	var s rules.Set
	for _, k := range ruleKinds {
		k.readInto(eng, &s)
	}
	return s
}

// LoadRules replaces the default engine's rules of every kind (see
// Engine.LoadRules).
func LoadRules(set rules.Set) error { return defaultEngine().LoadRules(set) }
