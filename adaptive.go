package sluice

import (
	"github.com/sluice-go/sluice/internal/flow"
	"github.com/sluice-go/sluice/stat"
)

// snapshot returns the resource's figures at now, with the limit of its
// adaptive concurrency rule and the step of its tiered rule, if it has them.
func (r *resource) snapshot(now int64) stat.Snapshot {
	s := r.node.Snapshot(now)
	s.AdaptiveLimit = r.adaptiveLimit()
	if rs := r.rules.Load(); rs != nil {
		s.Tier, _ = flow.Tier(rs.flow)
	}
	return s
}

// adaptiveLimit returns the limit in force of the resource's adaptive
// concurrency rule (the lowest, should it have several), or 0.
func (r *resource) adaptiveLimit() int64 {
	rs := r.rules.Load()
	if rs == nil {
		return 0
	}
	var lim int64
	for i := range rs.flow {
		if l, ok := rs.flow[i].Limit(); ok && (lim == 0 || l < lim) {
			lim = l
		}
	}
	return lim
}
