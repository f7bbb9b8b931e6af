package rules

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFlowValidate(t *testing.T) {
	ok := Flow{Resource: "r", Threshold: 10}
	tests := []struct {
		name      string
		give      func(r *Flow)
		wantField string // empty: valid
	}{
		{"minimal", func(r *Flow) {}, ""},
		{"empty resource", func(r *Flow) { r.Resource = "" }, "Resource"},
		{"zero threshold", func(r *Flow) { r.Threshold = 0 }, "Threshold"},
		{"NaN threshold", func(r *Flow) { r.Threshold = math.NaN() }, "Threshold"},
		{"infinite threshold", func(r *Flow) { r.Threshold = math.Inf(1) }, "Threshold"},
		{"absurd threshold", func(r *Flow) { r.Threshold = 2 * MaxThreshold }, "Threshold"},
		{"fractional QPS is fine", func(r *Flow) { r.Threshold = 1.5 }, ""},
		{"below one per interval, reject", func(r *Flow) { r.Threshold = 0.5 }, "Threshold"},
		{"below one per interval, throttle", func(r *Flow) { r.Threshold = 0.5; r.Behavior = Throttle }, ""},
		{"below one per interval, warm-up", func(r *Flow) { r.Threshold = 0.5; r.Strategy = WarmUp; r.WarmUpPeriod = time.Minute }, ""},
		{"below one per interval, token bucket", func(r *Flow) { r.Threshold = 0.5; r.Strategy = TokenBucket; r.Burst = 1 }, ""},
		{"below one per interval, associated", func(r *Flow) { r.Threshold = 0.5; r.RefResource = "x" }, ""},
		{"fractional concurrency", func(r *Flow) { r.Metric = Concurrency; r.Threshold = 1.5 }, "Threshold"},
		{"unknown metric", func(r *Flow) { r.Metric = "rps" }, "Metric"},
		{"unknown strategy", func(r *Flow) { r.Strategy = "rps" }, "Strategy"},
		{"unknown behavior", func(r *Flow) { r.Behavior = "rps" }, "Behavior"},
		{"interval 10ms", func(r *Flow) { r.StatInterval = 10 * time.Millisecond }, ""},
		{"interval 1h", func(r *Flow) { r.StatInterval = time.Hour }, ""},
		{"interval too short", func(r *Flow) { r.StatInterval = 9 * time.Millisecond }, "StatInterval"},
		{"interval too long", func(r *Flow) { r.StatInterval = time.Hour + time.Millisecond }, "StatInterval"},
		{"interval not whole ms", func(r *Flow) { r.StatInterval = 20*time.Millisecond + 1 }, "StatInterval"},
		{"interval with concurrency", func(r *Flow) { r.Metric = Concurrency; r.StatInterval = time.Second }, "StatInterval"},
		{"negative queueing", func(r *Flow) { r.Behavior = Throttle; r.MaxQueueing = -1 }, "MaxQueueing"},
		{"queueing without throttle", func(r *Flow) { r.MaxQueueing = time.Second }, "MaxQueueing"},
		{"throttle with queueing", func(r *Flow) { r.Behavior = Throttle; r.MaxQueueing = time.Second }, ""},
		{"throttle on concurrency", func(r *Flow) { r.Metric = Concurrency; r.Behavior = Throttle }, "Behavior"},
		{"warm-up", func(r *Flow) { r.Strategy = WarmUp; r.WarmUpPeriod = time.Minute }, ""},
		{"warm-up with cold factor", func(r *Flow) { r.Strategy = WarmUp; r.WarmUpPeriod = time.Minute; r.ColdFactor = 4 }, ""},
		{"warm-up without period", func(r *Flow) { r.Strategy = WarmUp }, "WarmUpPeriod"},
		{"warm-up cold factor 1", func(r *Flow) { r.Strategy = WarmUp; r.WarmUpPeriod = time.Minute; r.ColdFactor = 1 }, "ColdFactor"},
		{"warm-up on concurrency", func(r *Flow) { r.Strategy = WarmUp; r.WarmUpPeriod = time.Minute; r.Metric = Concurrency }, "Strategy"},
		{"warm-up on another resource", func(r *Flow) { r.Strategy = WarmUp; r.WarmUpPeriod = time.Minute; r.RefResource = "x" }, "RefResource"},
		{"period without warm-up", func(r *Flow) { r.WarmUpPeriod = time.Minute }, "WarmUpPeriod"},
		{"cold factor without warm-up", func(r *Flow) { r.ColdFactor = 3 }, "ColdFactor"},
		{"token bucket", func(r *Flow) { r.Strategy = TokenBucket }, ""},
		{"token bucket with burst", func(r *Flow) { r.Strategy = TokenBucket; r.Burst = 2.5 }, ""},
		{"token bucket burst 1", func(r *Flow) { r.Strategy = TokenBucket; r.Burst = 1 }, ""},
		{"token bucket throttle", func(r *Flow) {
			r.Strategy = TokenBucket
			r.Behavior = Throttle
			r.MaxQueueing = time.Second
		}, ""},
		{"token bucket, threshold below 1", func(r *Flow) { r.Strategy = TokenBucket; r.Threshold = 0.5 }, "Burst"},
		{"token bucket, threshold below 1 with burst", func(r *Flow) { r.Strategy = TokenBucket; r.Threshold = 0.5; r.Burst = 1 }, ""},
		{"token bucket burst below 1", func(r *Flow) { r.Strategy = TokenBucket; r.Burst = 0.9 }, "Burst"},
		{"token bucket negative burst", func(r *Flow) { r.Strategy = TokenBucket; r.Burst = -1 }, "Burst"},
		{"token bucket NaN burst", func(r *Flow) { r.Strategy = TokenBucket; r.Burst = math.NaN() }, "Burst"},
		{"token bucket absurd burst", func(r *Flow) { r.Strategy = TokenBucket; r.Burst = 2 * MaxThreshold }, "Burst"},
		{"burst without token bucket", func(r *Flow) { r.Burst = 5 }, "Burst"},
		{"token bucket on concurrency", func(r *Flow) { r.Strategy = TokenBucket; r.Metric = Concurrency }, "Strategy"},
		{"token bucket on another resource", func(r *Flow) { r.Strategy = TokenBucket; r.RefResource = "x" }, "RefResource"},
		{"token bucket exact", func(r *Flow) { r.Strategy = TokenBucket; r.Exact = true }, "Exact"},
		{"token bucket with period", func(r *Flow) { r.Strategy = TokenBucket; r.WarmUpPeriod = time.Minute }, "WarmUpPeriod"},
		{"associated", func(r *Flow) { r.RefResource = "other" }, ""},
		{"associated self", func(r *Flow) { r.RefResource = "r" }, "RefResource"},
		{"associated throttle", func(r *Flow) { r.RefResource = "o"; r.Behavior = Throttle }, "Behavior"},
		{"associated interval", func(r *Flow) { r.RefResource = "o"; r.StatInterval = 2 * time.Second }, "StatInterval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ok
			tt.give(&r)
			err := r.validate()
			if tt.wantField == "" {
				require.NoError(t, err)
				return
			}
			var re *Error
			require.True(t, errors.As(err, &re), "Validate() = %v, want *Error", err)
			assert.Equal(t, tt.wantField, re.Field)
			assert.Equal(t, "flow", re.Kind)
			assert.Equal(t, 0, re.Index)
			assert.Contains(t, err.Error(), tt.wantField)
		})
	}
}

func TestErrorMessage(t *testing.T) {
	err := (&Set{Flow: []Flow{{Resource: "a", Threshold: 1}, {Resource: "GET /x", Threshold: -1}}}).Validate()
	assert.Equal(t, `rules: flow rule 1 (resource "GET /x"): Threshold: must be a positive number, got -1`, err.Error())
}

// No rule that Validate accepts can refuse every request: a QPS reject
// rule of the direct strategy below one request per StatInterval (0.5/s,
// 1e-300/s), also a cluster rule and its local fallback, is refused with
// what to write instead.
func TestFlowValidateRefusesRulesThatNeverAdmit(t *testing.T) {
	tests := []struct {
		name      string
		give      Flow
		wantField string
		want      string // the reason, in full
	}{
		{
			"half a request per second", Flow{Resource: "r", Threshold: 0.5}, "Threshold",
			"0.5 per 1s would refuse every request: the reject behavior counts whole requests in a window of StatInterval, so Threshold must be at least 1; " +
				"write Threshold 1 with StatInterval 2s, or for that rate set Behavior throttle (one request every StatInterval/Threshold) or Strategy token-bucket with Burst 1",
		},
		{
			"a third per 100 ms", Flow{Resource: "r", Threshold: 1.0 / 3, StatInterval: 100 * time.Millisecond}, "Threshold",
			"0.3333333333333333 per 100ms would refuse every request: the reject behavior counts whole requests in a window of StatInterval, so Threshold must be at least 1; " +
				"write Threshold 1 with StatInterval 300ms, or for that rate set Behavior throttle (one request every StatInterval/Threshold) or Strategy token-bucket with Burst 1",
		},
		{
			"1e-300", Flow{Resource: "r", Threshold: 1e-300}, "Threshold",
			"1e-300 per 1s would refuse every request: the reject behavior counts whole requests in a window of StatInterval, so Threshold must be at least 1; " +
				"for that rate set Behavior throttle (one request every StatInterval/Threshold) or Strategy token-bucket with Burst 1 (one request per StatInterval of at most 1h is faster)",
		},
		{"cluster", Flow{Resource: "r", Threshold: 0.5, Cluster: &Cluster{}}, "Threshold", ""},
		{
			"cluster fallback", Flow{Resource: "r", Threshold: 10, Cluster: &Cluster{Fallback: FallbackLocal, LocalThreshold: 0.25}}, "Cluster.LocalThreshold",
			"0.25 per 1s would refuse every request while the store fails: it must be 0 or at least 1; " +
				"write Threshold 1 with StatInterval 4s, or for that rate set Behavior throttle (one request every StatInterval/Threshold) or Strategy token-bucket with Burst 1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.validate()
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, tt.wantField, e.Field)
			assert.Equal(t, "r", e.Resource)
			if tt.want != "" {
				assert.Equal(t, tt.want, e.Reason)
			}
		})
	}
}
