package sluice

import (
	"cmp"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/rules"
)

// The applications allowed to draw on a shared budget (rules.Cluster.Apps,
// as the Redis limiter this project's cluster design starts from keeps
// beside each bucket): each cluster flow or param rule listing them is
// compiled, when rules are put in force, into an appsCheck of its
// resource, checked right after the resource's authority rule and before
// every rule that counts, so that a refused entry takes no share of any
// budget. It refuses as an authority rule does (BlockAuthority),
// naming the cluster rule. The check is rebuilt on every load, apart
// from the budgets: a reload that changes only Apps applies at once and
// keeps the counts.

// reasonNotApp is the Reason of an appsCheck refusal.
const reasonNotApp = "caller not among the applications the cluster rule's budget allows (Cluster.Apps)"

// appsCheck is the Cluster.Apps of one cluster rule.
type appsCheck struct {
	apps   map[string]struct{}
	ref    core.RuleRef
	shadow bool
	// refusals shares the rule's refusals, which all agree (a refusal
	// allocates nothing, see entry.Refusals).
	refusals entry.Refusals
}

// check returns the refusal of c, whose caller is caller, or nil when it
// may draw on the budget. An entry without a caller is refused.
func (a *appsCheck) check(c *entry.Context, caller string) *core.BlockError {
	if _, ok := a.apps[caller]; ok && caller != "" {
		return nil
	}
	return a.refusals.Share(&core.BlockError{Type: core.BlockAuthority, Shadow: a.shadow, Resource: c.Resource, Rule: a.ref, Reason: reasonNotApp})
}

// newAppsCheck compiles cl.Apps of the rule with ID id counting metric,
// or returns nil when the rule lists none.
func newAppsCheck(cl *rules.Cluster, id string, metric rules.FlowMetric, shadow bool) *appsCheck {
	if cl == nil || len(cl.Apps) == 0 {
		return nil
	}
	a := &appsCheck{apps: make(map[string]struct{}, len(cl.Apps)), shadow: shadow,
		ref: core.RuleRef{ID: id, Metric: string(cmp.Or(metric, rules.QPS))}}
	for _, s := range cl.Apps {
		a.apps[s] = struct{}{}
	}
	return a
}

// compileApps returns the appsChecks of the flow and param rules in force,
// by resource, in rule order (flow rules first).
func compileApps(fl []rules.Flow, pr []rules.Param) map[string][]*appsCheck {
	out := map[string][]*appsCheck{}
	for i := range fl {
		if a := newAppsCheck(fl[i].Cluster, fl[i].ID, fl[i].Metric, fl[i].Shadow); a != nil {
			out[fl[i].Resource] = append(out[fl[i].Resource], a)
		}
	}
	for i := range pr {
		if a := newAppsCheck(pr[i].Cluster, pr[i].ID, pr[i].Metric, pr[i].Shadow); a != nil {
			out[pr[i].Resource] = append(out[pr[i].Resource], a)
		}
	}
	return out
}
