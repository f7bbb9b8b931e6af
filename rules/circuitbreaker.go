package rules

import (
	"math"
	"time"

	"github.com/sluice-go/sluice/internal/ruledef"
)

// CircuitBreaker is a degrade rule: it cuts a resource off while its recent
// calls are too slow or fail too often, and probes it back to health.
//
// The breaker counts the outcomes of the resource's calls over a sliding
// window of StatInterval (ten buckets). While Closed it lets every call
// through; it opens when, with at least MinRequestAmount calls in the
// window, the strategy's threshold is crossed. Open refuses every call for
// RetryTimeout; the breaker then turns HalfOpen and lets exactly Probes calls
// through. If all of them succeed it closes (with an empty window); if any
// fails it opens for another full RetryTimeout.
//
// The zero values of the optional fields are: Strategy SlowRequestRatio,
// MinRequestAmount 5, StatInterval one second, Probes 1.
type CircuitBreaker struct {
	// ID is an optional label for the rule, shown in block errors and logs.
	// It plays no part in matching rules across reloads.
	ID string `json:"id,omitempty" yaml:"id,omitempty"`
	// Resource is the name of the resource the rule protects. Required.
	Resource string `json:"resource" yaml:"resource"`
	// Strategy is what counts as a bad outcome: SlowRequestRatio (default),
	// ErrorRatio or ErrorCount.
	Strategy BreakerStrategy `json:"strategy,omitempty" yaml:"strategy,omitempty"`
	// Threshold is where the breaker opens. For the ratio strategies it is a
	// ratio in [0, 1] and the breaker opens when the share of bad calls
	// exceeds it (so 0 opens on the first bad call, 0.5 on more than half);
	// a Threshold of 1 opens when every call in the window was bad. For
	// ErrorCount it is a whole number of failed calls, at least 1, and the
	// breaker opens when the window holds that many.
	Threshold float64 `json:"threshold" yaml:"threshold"`
	// MaxAllowedRT is, with SlowRequestRatio, the longest response time
	// that is not slow: a call whose RT exceeds it is slow. Required (in
	// (0, 1h]) with SlowRequestRatio; must be zero otherwise.
	MaxAllowedRT time.Duration `json:"maxAllowedRT,omitempty" yaml:"maxAllowedRT,omitempty"`
	// MinRequestAmount is the fewest calls the window must hold before the
	// breaker may open; below it the breaker never opens, however bad the
	// calls. Zero means 5 (as in Sentinel); 1 means
	// no minimum. At most 1e9.
	MinRequestAmount int64 `json:"minRequestAmount,omitempty" yaml:"minRequestAmount,omitempty"`
	// StatInterval is the length of the window outcomes are counted over.
	// Zero means one second. It must be a whole number of milliseconds in
	// [10ms, 1h]. It also bounds a half-open round: probes that have not
	// exited StatInterval after the last one was admitted count as failed.
	StatInterval time.Duration `json:"statInterval,omitempty" yaml:"statInterval,omitempty"`
	// RetryTimeout is how long the breaker stays Open before it lets probes
	// through. Required, in (0, 24h].
	RetryTimeout time.Duration `json:"retryTimeout" yaml:"retryTimeout"`
	// Probes is how many calls a HalfOpen breaker lets through at once; all
	// of them must succeed for it to close. Zero means 1; at most
	// ruledef.MaxProbes.
	Probes int `json:"probes,omitempty" yaml:"probes,omitempty"`
}

// maxMinRequests bounds MinRequestAmount.
const maxMinRequests = 1e9

// validate reports the first problem with the rule as an *Error, or nil.
func (r *CircuitBreaker) validate() error {
	const kind = "circuit breaker"
	if r.Resource == "" {
		return fieldErr(kind, r.Resource, "Resource", "must not be empty")
	}
	if err := checkEnum(kind, r.Resource, "Strategy", r.Strategy, true, SlowRequestRatio, ErrorRatio, ErrorCount); err != nil {
		return err
	}
	t := r.Threshold
	switch {
	case math.IsNaN(t) || math.IsInf(t, 0):
		return fieldErr(kind, r.Resource, "Threshold", "must be a finite number, got %v", t)
	case r.Strategy == ErrorCount && (t < 1 || t > MaxThreshold || t != math.Trunc(t)):
		return fieldErr(kind, r.Resource, "Threshold", "must be a whole number in [1, %g] for the error-count strategy, got %v", MaxThreshold, t)
	case r.Strategy != ErrorCount && (t < 0 || t > 1):
		return fieldErr(kind, r.Resource, "Threshold", "must be a ratio in [0, 1] for the %s strategy, got %v", or(r.Strategy, SlowRequestRatio), t)
	}
	if or(r.Strategy, SlowRequestRatio) == SlowRequestRatio {
		if r.MaxAllowedRT <= 0 || r.MaxAllowedRT > time.Hour {
			return fieldErr(kind, r.Resource, "MaxAllowedRT", "must be in (0, 1h] for the slow-request-ratio strategy, got %v", r.MaxAllowedRT)
		}
	} else if r.MaxAllowedRT != 0 {
		return fieldErr(kind, r.Resource, "MaxAllowedRT", "is only used with the slow-request-ratio strategy; leave it zero")
	}
	if r.MinRequestAmount < 0 || r.MinRequestAmount > maxMinRequests {
		return fieldErr(kind, r.Resource, "MinRequestAmount", "must be in [0, %g], got %d", float64(maxMinRequests), r.MinRequestAmount)
	}
	if iv := r.StatInterval; iv != 0 && (iv < 10*time.Millisecond || iv > time.Hour || iv%time.Millisecond != 0) {
		return fieldErr(kind, r.Resource, "StatInterval", "must be a whole number of milliseconds in [10ms, 1h], got %v", iv)
	}
	if r.RetryTimeout <= 0 || r.RetryTimeout > 24*time.Hour {
		return fieldErr(kind, r.Resource, "RetryTimeout", "must be in (0, 24h], got %v", r.RetryTimeout)
	}
	if r.Probes < 0 || r.Probes > ruledef.MaxProbes {
		return fieldErr(kind, r.Resource, "Probes", "must be in [0, %d], got %d", ruledef.MaxProbes, r.Probes)
	}
	return nil
}
