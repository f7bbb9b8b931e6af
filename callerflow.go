package sluice

import (
	"context"
	"strings"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/param"
	"github.com/sluice-go/sluice/rules"
)

// Per-caller flow rules (rules.Flow.Caller): a rule for one named caller,
// or for each caller without a rule of its own ("other"), counted per
// caller by the param rules' machinery (internal/param): each caller's
// count lives in a bounded table of that rule (10,000 callers for an
// "other" rule; when full, the quietest is forgotten, never one with requests
// in flight), keyed by the caller. A QPS rule counts each caller as
// Sentinel's limitApp rules count an origin in its origin node: a sliding
// window of StatInterval in two buckets of StatInterval/2 aligned on the
// clock, an entry of n passing while the two buckets hold at most
// Threshold-n (param.BuildCallers; param rules keep their token buckets); a
// concurrency rule an in-flight count; throttle a pacing schedule. They
// are checked after the flow rules without Caller, and refuse as flow
// rules do (BlockFlow). A cluster one gives each caller a budget in
// the cluster store shared by the fleet (a key per caller, named by a
// digest of the caller), as a cluster param rule does per value: for QPS
// a sliding window of Threshold per StatInterval, whose local fallback
// share is a token bucket (internal/param, checkShare).

// callerOther is Flow.Caller's value for each caller without a rule of its own.
const callerOther = "other"

// callerFlow is the per-caller flow rules of one resource.
type callerFlow struct {
	named map[string][]*param.Controller // by caller
	other []*param.Controller
}

// check decides the entry c of caller (never kept) against the rules of
// caller, or else the "other" rules. An entry without a caller passes.
func (f *callerFlow) check(ctx context.Context, c *entry.Context, caller string, clk core.Clock) *core.BlockError {
	if caller == "" {
		return nil
	}
	cs, ok := f.named[caller]
	if !ok {
		cs = f.other
	}
	for _, p := range cs {
		if be := p.CheckKey(ctx, c, caller, clk); be != nil {
			if be.Type == core.BlockParam {
				// The controller's refusal may be shared (never written
				// once made): the caller's flow refusal is a copy.
				cp := *be
				cp.Type = core.BlockFlow // a cluster rule's stays BlockCluster
				return &cp
			}
			return be
		}
	}
	return nil
}

// callerFlowState is the engine's per-caller flow rules in force: their
// controllers by the name callerParam gives them, and by resource; next is
// what the flow rules' build staged, put in force by their commit.
type callerFlowState struct {
	ctl, nextCtl     map[string][]*param.Controller
	byRes, nextByRes map[string]*callerFlow
}

// splitCallerFlows returns the rules of rs without Caller, and those with.
func splitCallerFlows(rs []rules.Flow) (plain, callers []rules.Flow) {
	for i := range rs {
		if rs[i].Caller == "" {
			continue
		}
		plain = make([]rules.Flow, 0, len(rs))
		for _, r := range rs {
			if r.Caller == "" {
				plain = append(plain, r)
			} else {
				callers = append(callers, r)
			}
		}
		return plain, callers
	}
	return rs, nil
}

// callerSep joins a resource and a rule's Caller into the name of its
// param controller: no caller holds it (a control character).
const callerSep = "\x00"

// callerParam is the param rule that counts per caller what flow rule r
// (valid, with Caller) counts.
func callerParam(r *rules.Flow) rules.Param {
	p := rules.Param{
		ID: r.ID, Resource: r.Resource + callerSep + r.Caller,
		Metric: r.Metric, Threshold: int64(r.Threshold), Duration: r.StatInterval,
		Throttle: r.Throttle, Shadow: r.Shadow,
		Cluster: r.Cluster,
	}
	if r.Caller != callerOther {
		p.Capacity = 1 // one caller only
	}
	return p
}

// stageCallerFlows builds the per-caller rules rs against those in force,
// keeping the counts of those that count the same way, and stages them
// for useCallerFlows. Must hold eng.mu.
func (eng *Engine) stageCallerFlows(rs []rules.Flow) error {
	ps := make([]rules.Param, len(rs))
	for i := range rs {
		ps[i] = callerParam(&rs[i])
	}
	ctl, err := param.BuildCallers(ps, eng.callers.ctl, eng.cluster.params())
	if err != nil {
		return err
	}
	byRes := map[string]*callerFlow{}
	for name, cs := range ctl {
		i := strings.LastIndex(name, callerSep)
		res, caller := name[:i], name[i+len(callerSep):]
		f := byRes[res]
		if f == nil {
			f = &callerFlow{named: map[string][]*param.Controller{}}
			byRes[res] = f
		}
		if caller == callerOther {
			f.other = cs
		} else {
			f.named[caller] = cs
		}
	}
	eng.callers.nextCtl, eng.callers.nextByRes = ctl, byRes
	return nil
}

// useCallerFlows puts the staged per-caller rules in force (publish
// follows). Must hold eng.mu.
func (eng *Engine) useCallerFlows() {
	eng.callers.ctl, eng.callers.byRes = eng.callers.nextCtl, eng.callers.nextByRes
	eng.callers.nextCtl, eng.callers.nextByRes = nil, nil
}
