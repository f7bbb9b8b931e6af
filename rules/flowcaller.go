package rules

import (
	"cmp"
	"math"

	"github.com/sluice-go/sluice/internal/ruledef"
)

// callerOther is the value of Flow.Caller that limits each caller without
// a flow rule of its own on the resource, every one counted apart
// (Sentinel's limitApp "other").
const callerOther = "other"

// validateCaller checks Flow.Caller (see its doc) and the fields a
// per-caller rule cannot use: a per-caller rule keeps one count per caller
// in a bounded table (the param rules' machinery), which counts whole
// requests of the rule's own resource with the direct strategy.
func (r *Flow) validateCaller(c *check) {
	if r.Caller == "" || c.err != nil {
		return
	}
	c.fail(r.Caller == "default", "Caller", `"default" is Sentinel's name for every caller together: leave Caller empty`)
	if r.Caller != callerOther {
		if p := ruledef.CallerProblem(r.Caller); p != "" {
			c.fail(true, "Caller", "%q is not a caller an entry can name: %s", clip(r.Caller, 40), p)
		}
	}
	const why = "a per-caller rule (Caller set) counts whole requests of its own resource, without WarmUp or Bucket"
	c.fail(r.WarmUp != nil, "WarmUp", "must be empty: %s", why)
	c.fail(r.Bucket != nil, "Bucket", "must be empty: %s", why)
	c.fail(r.Quota != nil, "Quota", "is not available to a per-caller rule; leave it empty")
	c.fail(r.Threshold != math.Trunc(r.Threshold) || r.Threshold < 1, "Threshold",
		"must be a whole number of at least 1: %s, got %v", why, r.Threshold)
	c.fail(r.Exact, "Exact", "is not available to a per-caller rule; leave it false")
	c.fail(r.RefResource != "", "RefResource", "must be empty: %s", why)
	c.fail(len(r.Tiers) > 0, "Tiers", "must be empty: %s", why)
	c.fail(r.Adaptive != nil, "Adaptive", "must be empty: %s", why)
	c.fail(r.PriorityWait != 0, "PriorityWait", "must be zero: %s", why)
	if cl := r.Cluster; cl != nil {
		c.fail(cmp.Or(cl.Fallback, FallbackLocal) == FallbackLocal && cl.LocalThreshold != math.Trunc(cl.LocalThreshold),
			"Cluster.LocalThreshold",
			"must be a whole number for a per-caller rule (each caller's local bucket counts whole requests), got %v",
			cl.LocalThreshold)
		c.fail(len(cl.Apps) > 0, "Cluster.Apps",
			"has no meaning on a per-caller rule (Caller chooses its callers); use an authority rule to refuse the others")
	}
}
