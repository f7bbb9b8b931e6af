package param

import (
	"time"

	"github.com/sluice-go/sluice/rules"
)

// maxQueueing is the longest wait of rule r's throttle section, or 0.
func maxQueueing(r *rules.Param) time.Duration {
	if r.Throttle == nil {
		return 0
	}
	return r.Throttle.MaxQueueing
}

// behaviorKey names what rule r does over the limit, as its store keys spell
// it: "throttle" or "reject".
func behaviorKey(r *rules.Param) string {
	if r.Throttle != nil {
		return "throttle"
	}
	return "reject"
}
