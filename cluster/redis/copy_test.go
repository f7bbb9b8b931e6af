package sluiceredis

import (
	"time"

	"maps"
	"slices"

	"github.com/sluice-go/sluice/rules"
)

// maxParamDuration is the longest Param.Duration the rules package accepts
// (366 days).
const maxParamDuration = 366 * 24 * time.Hour

// equalCopy returns a copy of a flow or param rule that shares no pointer,
// slice or map with it: an equal rule, as reloading the same document gives.
func equalCopy[T rules.Flow | rules.Param](r T) T {
	switch v := any(&r).(type) {
	case *rules.Flow:
		if v.Cluster != nil {
			c := *v.Cluster
			v.Cluster = &c
		}
		if v.Adaptive != nil {
			a := *v.Adaptive
			v.Adaptive = &a
		}
		v.Tiers = slices.Clone(v.Tiers)
	case *rules.Param:
		if v.Cluster != nil {
			c := *v.Cluster
			v.Cluster = &c
		}
		v.Exceptions = maps.Clone(v.Exceptions)
	}
	return r
}
