package flow

import (
	"cmp"
	"time"

	"github.com/sluice-go/sluice/internal/ruledef"
	"github.com/sluice-go/sluice/rules"
)

// maxQueueing is the longest wait of rule r's throttle section, or 0.
func maxQueueing(r *rules.Flow) time.Duration {
	if r.Throttle == nil {
		return 0
	}
	return r.Throttle.MaxQueueing
}

// burst is the Burst of rule r's bucket section, or 0 (Threshold).
func burst(r *rules.Flow) float64 {
	if r.Bucket == nil {
		return 0
	}
	return r.Bucket.Burst
}

// warmUpOf is rule r's warm-up section with its defaults, or the zero
// section when r does not warm up.
func warmUpOf(r *rules.Flow) rules.WarmUp {
	if r.WarmUp == nil {
		return rules.WarmUp{}
	}
	return rules.WarmUp{Period: r.WarmUp.Period, ColdFactor: cmp.Or(r.WarmUp.ColdFactor, ruledef.ColdFactor)}
}

// kindOf names how rule r counts, as its cluster budget's store key spells
// it: "token-bucket", "throttle" or "reject" (and "warm-up", never a
// cluster rule's).
func kindOf(r *rules.Flow) string {
	switch {
	case r.Bucket != nil:
		return "token-bucket"
	case r.WarmUp != nil:
		return "warm-up"
	case r.Throttle != nil:
		return "throttle"
	}
	return "reject"
}
