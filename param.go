package sluice

import (
	"github.com/sluice-go/sluice/internal/rulewalk"
	"github.com/sluice-go/sluice/rules"
)

// LoadParamRules replaces every param (hot-parameter) rule of the engine
// with rs. The whole set is validated first: if any rule is invalid, nothing
// changes and the error (an *rules.Error, reached with errors.As) names the
// rule's index, resource and field. A rule that counts the same way as one in
// force (same resource, argument, metric, behavior, duration and capacity)
// keeps that rule's per-value state — token buckets, pacing schedules and
// in-flight counts — even when its thresholds, burst or exceptions change, so
// a reload under traffic neither forgets a value nor hands out a fresh burst.
//
// It reports whether the rules in force changed. Passing nil or an empty
// slice removes all param rules. The engine keeps its own copy of rs
// (including the Exceptions maps).
func (g *Engine) LoadParamRules(rs []rules.Param) (bool, error) { return load(g, paramKind, rs) }

// ParamRules returns a copy of the param rules in force.
func (g *Engine) ParamRules() []rules.Param { return rulesIn(g, paramKind) }

func cloneParams(rs []rules.Param) []rules.Param {
	if len(rs) == 0 {
		return nil
	}
	out := make([]rules.Param, len(rs))
	for i := range rs {
		out[i] = rulewalk.Clone(rs[i])
	}
	return out
}

// LoadParamRules replaces the default engine's param rules (see
// Engine.LoadParamRules).
func LoadParamRules(rs []rules.Param) (bool, error) { return defaultEngine().LoadParamRules(rs) }

// ParamRules returns the default engine's param rules.
func ParamRules() []rules.Param { return defaultEngine().ParamRules() }
