package rules

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/ruledef"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCircuitBreakerValidate(t *testing.T) {
	slow := CircuitBreaker{Resource: "db", Strategy: SlowRequestRatio, Threshold: 0.5, MaxAllowedRT: 100 * time.Millisecond, RetryTimeout: time.Second}
	errRatio := CircuitBreaker{Resource: "db", Strategy: ErrorRatio, Threshold: 0.5, RetryTimeout: time.Second}
	errCount := CircuitBreaker{Resource: "db", Strategy: ErrorCount, Threshold: 3, RetryTimeout: time.Second}
	with := func(r CircuitBreaker, f func(*CircuitBreaker)) CircuitBreaker { f(&r); return r }
	tests := []struct {
		name      string
		give      CircuitBreaker
		wantField string // "" means valid
	}{
		{"slow ratio", slow, ""},
		{"error ratio", errRatio, ""},
		{"error count", errCount, ""},
		{"ratio 0", with(errRatio, func(r *CircuitBreaker) { r.Threshold = 0 }), ""},
		{"ratio 1", with(errRatio, func(r *CircuitBreaker) { r.Threshold = 1 }), ""},
		{"all optional fields", with(slow, func(r *CircuitBreaker) {
			r.MinRequestAmount, r.StatInterval, r.Probes = 1, 10*time.Millisecond, ruledef.MaxProbes
		}), ""},
		{"no resource", with(slow, func(r *CircuitBreaker) { r.Resource = "" }), "Resource"},
		{"unknown strategy", with(slow, func(r *CircuitBreaker) { r.Strategy = "error-rate" }), "Strategy"},
		{"ratio above 1", with(errRatio, func(r *CircuitBreaker) { r.Threshold = 1.01 }), "Threshold"},
		{"negative ratio", with(slow, func(r *CircuitBreaker) { r.Threshold = -0.1 }), "Threshold"},
		{"NaN ratio", with(errRatio, func(r *CircuitBreaker) { r.Threshold = math.NaN() }), "Threshold"},
		{"infinite count", with(errCount, func(r *CircuitBreaker) { r.Threshold = math.Inf(1) }), "Threshold"},
		{"count 0", with(errCount, func(r *CircuitBreaker) { r.Threshold = 0 }), "Threshold"},
		{"fractional count", with(errCount, func(r *CircuitBreaker) { r.Threshold = 2.5 }), "Threshold"},
		{"absurd count", with(errCount, func(r *CircuitBreaker) { r.Threshold = 2e12 }), "Threshold"},
		{"slow without max RT", with(slow, func(r *CircuitBreaker) { r.MaxAllowedRT = 0 }), "MaxAllowedRT"},
		{"slow with max RT over 1h", with(slow, func(r *CircuitBreaker) { r.MaxAllowedRT = time.Hour + 1 }), "MaxAllowedRT"},
		{"max RT on error ratio", with(errRatio, func(r *CircuitBreaker) { r.MaxAllowedRT = time.Second }), "MaxAllowedRT"},
		{"negative min requests", with(errRatio, func(r *CircuitBreaker) { r.MinRequestAmount = -1 }), "MinRequestAmount"},
		{"absurd min requests", with(errRatio, func(r *CircuitBreaker) { r.MinRequestAmount = 1e9 + 1 }), "MinRequestAmount"},
		{"interval below 10ms", with(errRatio, func(r *CircuitBreaker) { r.StatInterval = 9 * time.Millisecond }), "StatInterval"},
		{"interval not whole ms", with(errRatio, func(r *CircuitBreaker) { r.StatInterval = 10*time.Millisecond + 1 }), "StatInterval"},
		{"interval over 1h", with(errRatio, func(r *CircuitBreaker) { r.StatInterval = time.Hour + time.Millisecond }), "StatInterval"},
		{"no retry timeout", with(errRatio, func(r *CircuitBreaker) { r.RetryTimeout = 0 }), "RetryTimeout"},
		{"retry timeout over 24h", with(errRatio, func(r *CircuitBreaker) { r.RetryTimeout = 25 * time.Hour }), "RetryTimeout"},
		{"negative probes", with(errRatio, func(r *CircuitBreaker) { r.Probes = -1 }), "Probes"},
		{"too many probes", with(errRatio, func(r *CircuitBreaker) { r.Probes = ruledef.MaxProbes + 1 }), "Probes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.validate()
			if tt.wantField == "" {
				require.NoError(t, err)
				return
			}
			var re *Error
			require.True(t, errors.As(err, &re), "Validate() = %v, want *rules.Error", err)
			assert.Equal(t, "circuit breaker", re.Kind)
			assert.Equal(t, tt.wantField, re.Field, "Validate() = %v", err)
			assert.Equal(t, 0, re.Index)
			assert.Equal(t, tt.give.Resource, re.Resource)
		})
	}
}
