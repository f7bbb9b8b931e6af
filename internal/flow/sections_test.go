package flow

import (
	"time"

	"github.com/sluice-go/sluice/rules"
)

// behavior is how the tests name what a rule does over the limit: refuse
// (no throttle section) or pace (a throttle section).
type behavior string

const (
	behReject   behavior = "reject"
	behThrottle behavior = "throttle"
)

// section returns the throttle section of behavior b waiting at most q,
// or nil for reject.
func (b behavior) section(q time.Duration) *rules.Throttle {
	if b == behThrottle {
		return &rules.Throttle{MaxQueueing: q}
	}
	return nil
}

// behaviorOf returns the behavior of rule r.
func behaviorOf(r *rules.Flow) behavior {
	if r.Throttle != nil {
		return behThrottle
	}
	return behReject
}

// strategyOf names the strategy of rule r, as a subtest's name spells it.
func strategyOf(r *rules.Flow) string {
	switch {
	case r.WarmUp != nil:
		return "warm-up"
	case r.Bucket != nil:
		return "token-bucket"
	}
	return "direct"
}
