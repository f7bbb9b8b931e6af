package sluice

import (
	"github.com/sluice-go/sluice/internal/rulewalk"
	"github.com/sluice-go/sluice/rules"
)

// A param (hot-parameter) rule that counts the same way as one in force
// (same resource, argument, metric, behavior, duration and capacity) keeps
// that rule's per-value state across a load — token buckets, pacing
// schedules and in-flight counts — even when its thresholds, burst or
// exceptions change, so a reload under traffic neither forgets a value nor
// hands out a fresh burst. The engine keeps its own copy of the rules
// (including the Exceptions maps).

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
