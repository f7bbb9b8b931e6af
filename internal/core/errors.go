package core

import (
	"errors"
	"strconv"
	"time"
)

// ErrBlocked is matched by every error returned for an entry that a rule
// refused: errors.Is(err, ErrBlocked) is true for any *BlockError.
var ErrBlocked = errors.New("sluice: blocked")

// BlockError describes why an entry was refused. It is always returned as an
// error (never as a typed nil) and is reached with errors.As.
//
// The error is the caller's to keep, and nothing changes it once returned;
// but it may be shared: refusals of a QPS reject rule that agree on every
// field return one error, so that they allocate nothing. Read it, never
// write to it.
type BlockError struct {
	// Type is the kind of rule that fired.
	Type BlockType
	// Shadow marks the would-be refusal of a rule in shadow mode
	// (rules.Flow.Shadow, ...): the entry was not refused. Entry never
	// returns such an error, nor do custom slots see one; the engine
	// counts it (stat.Snapshot.ShadowBlockedBy) and logs it.
	// (Next to Type, in the padding of its word: the error is then 112
	// bytes, not 120, and allocates from a smaller size class.)
	Shadow bool
	// Resource is the name of the resource the entry was for.
	Resource string
	// Rule names the rule that fired; zero for a custom slot.
	Rule RuleRef
	// Observed is the value the rule measured when it refused the entry, in
	// the rule's own unit (requests per interval, in-flight count, ratio...).
	Observed float64
	// Threshold is the limit the observed value was compared with, in the
	// same unit.
	Threshold float64
	// RetryAfter is how long the caller should wait before trying again, when
	// the rule can tell; zero when it cannot. A QPS reject rule, a rule on
	// another resource, an open circuit breaker and a local param rule's
	// bucket round it up to the millisecond, so that the refusals of one
	// millisecond share one error.
	RetryAfter time.Duration
	// Reason is a short free-form explanation for cases the numbers do not
	// carry (for example "wait exceeds max queueing"); it may be empty.
	Reason string
	// Cause is the underlying error when the entry was refused because of
	// one, such as the caller's context ending while it waited in a queue;
	// errors.Is(err, context.Canceled) then holds. Nil otherwise.
	Cause error
}

// RuleRef names the rule that refused an entry: enough to find it in the
// rules in force and to classify the refusal, without holding on to them.
type RuleRef struct {
	// ID is the rule's ID label (rules.Flow.ID, ...); it may be empty.
	ID string
	// Metric is what the rule counts, as a rule file writes it: "qps" or
	// "concurrency" for flow and param rules (a flow rule written with no
	// metric, or an isolation rule, "qps" or "concurrency" as it limits),
	// the system rule's metric ("cpu-usage", ...), the breaker's strategy.
	Metric string
}

// Overloaded reports whether the entry was refused to protect the
// service's capacity rather than to hold callers to a rate: a full
// concurrency limit (a flow rule of metric "concurrency"), system adaptive protection, or an open or probing
// circuit breaker. Rate limits (flow rules counting QPS, param rules) are
// not overload, nor are cluster and custom rules, whose purpose sluice
// cannot tell. A nil e is not overloaded.
//
// The adapters answer overload with 503 Service Unavailable (gRPC:
// codes.Unavailable), which clients and proxies take as "try later, or
// elsewhere", and other refusals with 429 Too Many Requests (gRPC:
// codes.ResourceExhausted), which says the caller asked too often.
func (e *BlockError) Overloaded() bool {
	if e == nil {
		return false
	}
	switch e.Type {
	case BlockSystem, BlockDegrade:
		return true
	case BlockFlow:
		return e.Rule.Metric == "concurrency"
	}
	return false
}

// Unwrap returns Cause.
func (e *BlockError) Unwrap() error { return e.Cause }

// Error returns a one-line description naming the block type, resource, the
// observed value and the threshold.
func (e *BlockError) Error() string {
	b := make([]byte, 0, 96)
	b = append(b, "sluice: blocked by "...)
	b = append(b, e.Type.String()...)
	b = append(b, " rule on "...)
	b = strconv.AppendQuote(b, e.Resource)
	b = append(b, ": observed "...)
	b = strconv.AppendFloat(b, e.Observed, 'g', -1, 64)
	b = append(b, ", threshold "...)
	b = strconv.AppendFloat(b, e.Threshold, 'g', -1, 64)
	if e.Reason != "" {
		b = append(b, " ("...)
		b = append(b, e.Reason...)
		b = append(b, ')')
	}
	if e.RetryAfter > 0 {
		b = append(b, ", retry after "...)
		b = append(b, e.RetryAfter.String()...)
	}
	return string(b)
}

// Is reports whether target is ErrBlocked.
func (e *BlockError) Is(target error) bool { return target == ErrBlocked }
