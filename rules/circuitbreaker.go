package rules

import (
	"cmp"
	"math"
	"time"

	"github.com/sluice-go/sluice/internal/ruledef"
)

// CircuitBreaker cuts a resource off while its calls of the last
// StatInterval are too slow or fail too often (with at least
// MinRequestAmount of them), for RetryTimeout, then lets Probes calls
// through: it closes if all succeed. A zero optional field means its default.
type CircuitBreaker struct {
	// ID is an optional label, shown in block errors and logs.
	ID string `json:"id,omitempty" yaml:"id,omitempty"`
	// Resource is the name of the resource the rule protects. Required.
	Resource string `json:"resource" yaml:"resource"`
	// Strategy is what counts as a bad outcome: SlowRequestRatio (default),
	// ErrorRatio or ErrorCount.
	Strategy BreakerStrategy `json:"strategy,omitempty" yaml:"strategy,omitempty"`
	// Threshold is where the breaker opens: for the ratio strategies a
	// ratio in [0, 1] that the share of bad calls must exceed (1: every
	// call was bad), for ErrorCount a whole number of failed calls, at
	// least 1, that the window must hold.
	Threshold float64 `json:"threshold" yaml:"threshold"`
	// MaxAllowedRT is, with SlowRequestRatio, the longest response time
	// that is not slow. Required, in (0, 1h], with SlowRequestRatio only.
	MaxAllowedRT time.Duration `json:"maxAllowedRT,omitempty" yaml:"maxAllowedRT,omitempty"`
	// MinRequestAmount is the fewest calls the window must hold before the
	// breaker may open, at most 1e9. Zero means 5 (as in Sentinel).
	MinRequestAmount int64 `json:"minRequestAmount,omitempty" yaml:"minRequestAmount,omitempty"`
	// StatInterval is the length of the window, a whole number of
	// milliseconds in [10ms, 1h]; zero means one second. Probes that have
	// not exited StatInterval after the last one was admitted count as
	// failed.
	StatInterval time.Duration `json:"statInterval,omitempty" yaml:"statInterval,omitempty"`
	// RetryTimeout is how long the breaker stays Open before it lets probes
	// through. Required, in (0, 24h].
	RetryTimeout time.Duration `json:"retryTimeout" yaml:"retryTimeout"`
	// Probes is how many calls a HalfOpen breaker lets through, at most
	// 10,000; all must succeed for it to close. Zero means 1.
	Probes int `json:"probes,omitempty" yaml:"probes,omitempty"`
	// Shadow puts the rule in shadow mode (see Flow.Shadow).
	Shadow bool `json:"shadow,omitempty" yaml:"shadow,omitempty"`
}

// maxMinRequests bounds MinRequestAmount.
const maxMinRequests = 1e9

// validate reports the first problem with the rule as an *Error, or nil.
// complexity: one bounds check per field (&& and || of the checks count)
func (r *CircuitBreaker) validate() error {
	c := &check{kind: "circuit breaker", resource: r.Resource}
	c.fail(r.Resource == "", "Resource", "must not be empty")
	enum(c, "Strategy", r.Strategy, true, SlowRequestRatio, ErrorRatio, ErrorCount)
	t, strategy, iv := r.Threshold, cmp.Or(r.Strategy, SlowRequestRatio), r.StatInterval
	slow := strategy == SlowRequestRatio
	c.fail(math.IsNaN(t) || math.IsInf(t, 0), "Threshold", "must be a finite number, got %v", t)
	c.fail(r.Strategy == ErrorCount && (t < 1 || t > MaxThreshold || t != math.Trunc(t)), "Threshold",
		"must be a whole number in [1, %g] for the error-count strategy, got %v", MaxThreshold, t)
	c.fail(r.Strategy != ErrorCount && (t < 0 || t > 1), "Threshold",
		"must be a ratio in [0, 1] for the %s strategy, got %v", string(strategy), t)
	c.fail(slow && (r.MaxAllowedRT <= 0 || r.MaxAllowedRT > time.Hour), "MaxAllowedRT",
		"must be in (0, 1h] for the slow-request-ratio strategy, got %v", r.MaxAllowedRT)
	c.fail(!slow && r.MaxAllowedRT != 0, "MaxAllowedRT",
		"is only used with the slow-request-ratio strategy; leave it zero")
	c.fail(r.MinRequestAmount < 0 || r.MinRequestAmount > maxMinRequests, "MinRequestAmount",
		"must be in [0, %g], got %d", float64(maxMinRequests), r.MinRequestAmount)
	c.fail(iv != 0 && (iv < 10*time.Millisecond || iv > time.Hour || iv%time.Millisecond != 0), "StatInterval",
		"must be a whole number of milliseconds in [10ms, 1h], got %v", iv)
	c.fail(r.RetryTimeout <= 0 || r.RetryTimeout > 24*time.Hour, "RetryTimeout",
		"must be in (0, 24h], got %v", r.RetryTimeout)
	c.fail(r.Probes < 0 || r.Probes > ruledef.MaxProbes, "Probes",
		"must be in [0, %d], got %d", ruledef.MaxProbes, r.Probes)
	return c.err
}
