package flow

import (
	"cmp"
	"time"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/rules"
)

// shared is refuse for a checker whose refusals nobody modifies once
// returned: the refusal equal to the latest in s is that one, so that a
// refusal allocates nothing while the rule's state stays the same (see
// entry.Refusals). Cluster checkers, whose callers rewrite the refusals of
// their local checks, use refuse.
func (b *base) shared(s *entry.Refusals, ec *entry.Context, observed, limit float64, retry time.Duration, reason string) *core.BlockError {
	want := core.BlockError{
		Type:       core.BlockFlow,
		Resource:   ec.Resource,
		Rule:       core.RuleRef{ID: b.rule.ID, Metric: string(cmp.Or(b.rule.Metric, rules.QPS))},
		Observed:   observed,
		Threshold:  limit,
		RetryAfter: retry,
		Reason:     reason,
		Shadow:     b.rule.Shadow,
	}
	return s.Share(&want)
}
