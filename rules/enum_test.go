package rules

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEnumValidation: every enumerated field takes "" (its default, except
// System.Metric) and its constants, and refuses anything else with an
// *Error naming the rule and the field and listing the values.
func TestEnumValidation(t *testing.T) {
	tests := []struct {
		name, field, want string
		rule              func(s string) interface{ validate() error }
	}{
		{"flow metric", "Metric", "qps, concurrency", func(s string) interface{ validate() error } {
			return &Flow{Resource: "r", Threshold: 1, Metric: FlowMetric(s)}
		}},
		{"param metric", "Metric", "qps, concurrency", func(s string) interface{ validate() error } {
			return &Param{Resource: "r", Threshold: 1, Metric: FlowMetric(s)}
		}},
		{"breaker strategy", "Strategy", "slow-request-ratio, error-ratio, error-count", func(s string) interface{ validate() error } {
			r := &CircuitBreaker{Resource: "r", RetryTimeout: time.Second, Strategy: BreakerStrategy(s)}
			if s == "" || s == string(SlowRequestRatio) {
				r.MaxAllowedRT = time.Second
			}
			return r
		}},
		{"system strategy", "Strategy", "threshold, bbr", func(s string) interface{ validate() error } {
			return &System{Metric: Load1, Threshold: 1, Strategy: SystemStrategy(s)}
		}},
		{"cluster mode", "Cluster.Mode", "total, per-instance", func(s string) interface{ validate() error } {
			return &Flow{Resource: "r", Threshold: 1, Cluster: &Cluster{Mode: ClusterMode(s)}}
		}},
		{"cluster fallback", "Cluster.Fallback", "local, pass, block", func(s string) interface{ validate() error } {
			return &Flow{Resource: "r", Threshold: 1, Cluster: &Cluster{Fallback: ClusterFallback(s)}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NoError(t, tt.rule("").validate(), "the zero value is the default")
			for _, v := range splitNames(tt.want) {
				var e *Error
				if err := tt.rule(v).validate(); errors.As(err, &e) {
					assert.NotEqual(t, tt.field, e.Field, "%s: %v", v, err)
				}
			}
			for _, bad := range []string{"bogus", "QPS", "warm_up", " reject"} {
				err := tt.rule(bad).validate()
				var e *Error
				require.True(t, errors.As(err, &e), "%q: want *Error, got %v", bad, err)
				assert.Equal(t, tt.field, e.Field, bad)
				assert.Contains(t, e.Reason, "unknown value", bad)
				assert.Contains(t, e.Reason, tt.want, bad)
			}
		})
	}
	err := (&System{Threshold: 1}).validate()
	require.EqualError(t, err, "rules: system rule 0: Metric: must be set (one of qps, concurrency, avg-rt, load1, cpu-usage)")
}

func splitNames(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != ',' {
			i++
		}
		out = append(out, s[:i])
		if i < len(s) {
			i += 2
		}
		s = s[i:]
	}
	return out
}

// TestEnumDefaultsAreNotDuplicates: a rule with a default left "" and one
// spelling the default out count the same thing, so a list holding both is
// refused as a duplicate.
func TestEnumDefaultsAreNotDuplicates(t *testing.T) {
	err := (&Set{Flow: []Flow{
		{Resource: "r", Threshold: 5},
		{Resource: "r", Threshold: 3, Metric: QPS},
	}}).Validate()
	require.ErrorContains(t, err, "duplicates rule 0")
}
