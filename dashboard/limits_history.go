package dashboard

import (
	"context"
	"strconv"
	"sync"

	"github.com/sluice-go/sluice/cluster"
)

// A chart draws each rule's limit as it was at each second: a step line
// whose steps are the rule versions saved in the window (from the rule
// history), not the limit in force now over the whole window.

// limitStep is the rules on a resource from From (a Unix second) until the
// next step, or the window's end.
type limitStep struct {
	From    int64         `json:"from"`
	Version int64         `json:"version"`
	Rules   []appliedRule `json:"rules"`
}

// maxLimitVersions bounds the versions decoded for a chart's steps (the
// cache keeps as many).
const maxLimitVersions = 16

// stepCache keeps the decoded rules of the versions the charts' steps
// need: a version is decoded once, not once an answer. Keyed by
// application, version and date (a retired application's numbers start
// again).
type stepCache struct {
	mu sync.Mutex
	m  map[string]*ruleIndex
}

func (c *stepCache) get(key string, load func() *ruleIndex) *ruleIndex {
	c.mu.Lock()
	ix := c.m[key]
	c.mu.Unlock()
	if ix != nil {
		return ix
	}
	ix = load()
	c.mu.Lock()
	if c.m == nil || len(c.m) >= 4*maxLimitVersions {
		c.m = map[string]*ruleIndex{} // bounded: start afresh
	}
	c.m[key] = ix
	c.mu.Unlock()
	return ix
}

// limitSteps returns the versions in force over [since, now] from the
// history vs (newest first), oldest first, each with its rules decoded;
// nil when one version held the whole window (the charts draw the rules
// in force then).
func (d *Dashboard) limitSteps(ctx context.Context, app string, since, now int64, vs []cluster.RuleVersion) ([]int64, []*ruleIndex) {
	var in []cluster.RuleVersion // newest first
	for _, v := range vs {
		at := v.At.Unix()
		if at > now {
			continue
		}
		in = append(in, v)
		if at <= since || len(in) == maxLimitVersions {
			break
		}
	}
	if len(in) == 0 || len(in) == 1 && in[0].At.Unix() <= since {
		return nil, nil
	}
	var froms []int64
	var ixs []*ruleIndex
	if last := in[len(in)-1]; last.At.Unix() > since && last.Version == 1 {
		// Before the first version: no rules.
		froms, ixs = append(froms, since), append(ixs, &ruleIndex{byRes: map[string][]appliedRule{}})
	}
	for i := len(in) - 1; i >= 0; i-- {
		v := in[i]
		key := app + "\x00" + strconv.FormatInt(v.Version, 10) + "\x00" + strconv.FormatInt(v.At.UnixNano(), 10)
		ix := d.stepCache.get(key, func() *ruleIndex {
			if v.Doc == nil {
				full, err := d.store.Version(ctx, app, v.Version)
				if err != nil {
					return &ruleIndex{version: v.Version, byRes: map[string][]appliedRule{}, err: err}
				}
				v = full
			}
			return indexRules(v)
		})
		froms, ixs = append(froms, max(v.At.Unix(), since)), append(ixs, ix)
	}
	return froms, ixs
}

// stepsOf returns res's steps of the limit history.
func stepsOf(res string, froms []int64, ixs []*ruleIndex) []limitStep {
	if froms == nil {
		return nil
	}
	out := make([]limitStep, len(froms))
	for i := range froms {
		rs := ixs[i].byRes[res]
		if rs == nil {
			rs = []appliedRule{}
		}
		out[i] = limitStep{From: froms[i], Version: ixs[i].version, Rules: rs}
	}
	return out
}
