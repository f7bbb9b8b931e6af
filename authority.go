package sluice

import (
	"reflect"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/rulewalk"
	"github.com/sluice-go/sluice/rules"
)

// Authority rules (rules.Authority): a resource's allow or deny list of
// callers and its strict mode, checked after system protection and before
// every rule that counts (flow, param, breakers), so that a refused caller
// takes no share of a limit. Sentinel checks them first of all; system
// protection coming first here changes no decision (it counts nothing) and
// keeps the check off the path of resources without such a rule.

// authorityCheck is the compiled authority rule of one resource.
type authorityCheck struct {
	allow   bool                // Allow (else Deny, or Strict alone)
	strict  bool                // an entry without a caller is refused
	callers map[string]struct{} // Allow's or Deny's callers
	ref     core.RuleRef
	shadow  bool
	// refusals shares the rule's equal refusals: those of one reason
	// (a refusal allocates nothing, see entry.Refusals).
	refusals entry.Refusals
}

// Reasons of authority refusals (BlockError.Reason), constants so that
// a refusal builds no string.
const (
	reasonNoCaller   = "no caller, and the authority rule is strict"
	reasonNotAllowed = "caller not on the authority rule's allow list"
	reasonDenied     = "caller on the authority rule's deny list"
)

// check returns the refusal of c, whose caller is caller, or nil when it
// may enter.
func (a *authorityCheck) check(c *entry.Context, caller string) *core.BlockError {
	reason := ""
	switch _, listed := a.callers[caller]; {
	case caller == "":
		if a.strict {
			reason = reasonNoCaller
		}
	case a.allow && !listed:
		reason = reasonNotAllowed
	case !a.allow && listed:
		reason = reasonDenied
	}
	if reason == "" {
		return nil
	}
	return a.refusals.Share(&core.BlockError{Type: core.BlockAuthority, Shadow: a.shadow, Resource: c.Resource, Rule: a.ref, Reason: reason})
}

// compileAuthority compiles valid authority rules, one per resource.
func compileAuthority(rs []rules.Authority) map[string]*authorityCheck {
	out := make(map[string]*authorityCheck, len(rs))
	for _, r := range rs {
		a := &authorityCheck{allow: len(r.Allow) > 0, strict: r.Strict, shadow: r.Shadow, ref: core.RuleRef{ID: r.ID, Metric: authorityMetric(&r)}}
		list := r.Allow
		if !a.allow {
			list = r.Deny
		}
		a.callers = make(map[string]struct{}, len(list))
		for _, s := range list {
			a.callers[s] = struct{}{}
		}
		out[r.Resource] = a
	}
	return out
}

// authorityMetric is the RuleRef.Metric of an authority rule: "allow",
// "deny" or "strict" (Strict alone).
func authorityMetric(r *rules.Authority) string {
	switch {
	case len(r.Allow) > 0:
		return "allow"
	case len(r.Deny) > 0:
		return "deny"
	}
	return "strict"
}

func cloneAuthorities(rs []rules.Authority) []rules.Authority {
	out := cloneRules(rs)
	for i := range out {
		out[i] = rulewalk.Clone(out[i])
	}
	return out
}

var authorityKind = &ruleKind[rules.Authority, map[string]*authorityCheck]{
	name: "authority",
	state: func(eng *Engine) *kindState[rules.Authority, map[string]*authorityCheck] {
		return &eng.authority
	},
	of:       func(s *rules.Set) *[]rules.Authority { return &s.Authority },
	validate: func(rs []rules.Authority) error { return (&rules.Set{Authority: rs}).Validate() },
	equal:    func(a, b []rules.Authority) bool { return reflect.DeepEqual(a, b) },
	clone:    cloneAuthorities,
	build: func(_ *Engine, rs []rules.Authority, _ map[string]*authorityCheck) (map[string]*authorityCheck, error) {
		return compileAuthority(rs), nil
	},
}
