package param

import (
	"cmp"
	"time"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/rules"
)

// refused is the refusal of a local rule's check (an exception of 0, a
// batch too large, a spent bucket, a value's in-flight limit): blocked,
// except that the refusals that agree on every field share one error
// (entry.Refusals), so that a flood of refusals allocates nothing. The
// error names no value, so refusals of different values share it when
// their counts, threshold and wait agree. The wait is rounded up to the
// millisecond (entry.RetryMs): a client that waits it out still passes on
// its first retry. A cluster rule (whose fallback rewrites the refusals of
// its local share) and a quota rule build theirs with blocked.
func (c *Controller) refused(ec *entry.Context, observed, threshold float64, retry int64, reason string) *core.BlockError {
	if c.cl != nil || c.q != nil {
		return c.blocked(ec, observed, threshold, retry, reason)
	}
	want := core.BlockError{
		Type:       core.BlockParam,
		Resource:   ec.Resource,
		Rule:       core.RuleRef{ID: c.rule.ID, Metric: string(cmp.Or(c.rule.Metric, rules.QPS))},
		Observed:   observed,
		Threshold:  threshold,
		RetryAfter: entry.RetryMs(time.Duration(retry)),
		Reason:     reason,
		Shadow:     c.rule.Shadow,
	}
	return c.refusals.Share(&want)
}
