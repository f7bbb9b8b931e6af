package sluice

import (
	"github.com/sluice-go/sluice/internal/flow"
	"github.com/sluice-go/sluice/internal/isolation"
	"github.com/sluice-go/sluice/rules"
)

// LoadFlowRules replaces every flow rule of the engine with rs. The whole set
// is validated first: if any rule is invalid, nothing changes and the error
// (an *rules.Error, reached with errors.As) names the rule's index, resource
// and field. A rule that counts the same way as one in force (same resource,
// metric, strategy, behavior, interval and associated resource) keeps that
// rule's counters, pacing schedule and, when identical, warm-up tokens, so
// reloading under traffic admits no extra burst.
//
// It reports whether the rules in force changed. Passing nil or an empty
// slice removes all flow rules.
func (eng *Engine) LoadFlowRules(rs []rules.Flow) (bool, error) {
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if equalRules(eng.flowRules, rs) {
		return false, nil
	}
	ctl, err := flow.Build(rs, eng.flowCtl, eng.node)
	if err != nil {
		return false, err
	}
	eng.flowRules = append([]rules.Flow(nil), rs...)
	eng.flowCtl = ctl
	eng.publish()
	return true, nil
}

// FlowRules returns a copy of the flow rules in force.
func (eng *Engine) FlowRules() []rules.Flow {
	eng.mu.Lock()
	defer eng.mu.Unlock()
	return append([]rules.Flow(nil), eng.flowRules...)
}

// LoadIsolationRules replaces every isolation rule of the engine with rs,
// with the same refuse-whole semantics as LoadFlowRules. Requests already in
// flight keep counting against the new thresholds.
func (eng *Engine) LoadIsolationRules(rs []rules.Isolation) (bool, error) {
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if equalRules(eng.isoRules, rs) {
		return false, nil
	}
	ctl, err := isolation.Build(rs, eng.isoCtl)
	if err != nil {
		return false, err
	}
	eng.isoRules = append([]rules.Isolation(nil), rs...)
	eng.isoCtl = ctl
	eng.publish()
	return true, nil
}

// IsolationRules returns a copy of the isolation rules in force.
func (eng *Engine) IsolationRules() []rules.Isolation {
	eng.mu.Lock()
	defer eng.mu.Unlock()
	return append([]rules.Isolation(nil), eng.isoRules...)
}

func equalRules[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
