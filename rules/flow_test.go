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
		{"below one per interval, throttle", func(r *Flow) { r.Threshold = 0.5; r.Throttle = &Throttle{} }, ""},
		{"below one per interval, warm-up", func(r *Flow) { r.Threshold = 0.5; r.WarmUp = &WarmUp{Period: time.Minute} }, ""},
		{"below one per interval, token bucket", func(r *Flow) { r.Threshold = 0.5; r.Bucket = &Bucket{Burst: 1} }, ""},
		{"below one per interval, associated", func(r *Flow) { r.Threshold = 0.5; r.RefResource = "x" }, ""},
		{"fractional concurrency", func(r *Flow) { r.Metric = Concurrency; r.Threshold = 1.5 }, "Threshold"},
		{"unknown metric", func(r *Flow) { r.Metric = "rps" }, "Metric"},
		{"interval 10ms", func(r *Flow) { r.StatInterval = 10 * time.Millisecond }, ""},
		{"interval 1h", func(r *Flow) { r.StatInterval = time.Hour }, ""},
		{"interval too short", func(r *Flow) { r.StatInterval = 9 * time.Millisecond }, "StatInterval"},
		{"interval too long", func(r *Flow) { r.StatInterval = time.Hour + time.Millisecond }, "StatInterval"},
		{"interval not whole ms", func(r *Flow) { r.StatInterval = 20*time.Millisecond + 1 }, "StatInterval"},
		{"interval with concurrency", func(r *Flow) { r.Metric = Concurrency; r.StatInterval = time.Second }, "StatInterval"},
		{"associated", func(r *Flow) { r.RefResource = "other" }, ""},
		{"associated self", func(r *Flow) { r.RefResource = "r" }, "RefResource"},
		{"associated interval", func(r *Flow) { r.RefResource = "o"; r.StatInterval = 2 * time.Second }, "StatInterval"},
		{"exact", func(r *Flow) { r.Exact = true }, ""},
		{"exact fractional", func(r *Flow) { r.Exact = true; r.Threshold = 1.5 }, "Threshold"},
		{"exact too large", func(r *Flow) { r.Exact = true; r.Threshold = 10001 }, "Threshold"},
		{"exact on concurrency", func(r *Flow) { r.Exact = true; r.Metric = Concurrency }, "Exact"},
		{"exact throttle", func(r *Flow) { r.Exact = true; r.Throttle = &Throttle{} }, "Exact"},
		{"exact associated", func(r *Flow) { r.Exact = true; r.RefResource = "o" }, "Exact"},
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
				"write Threshold 1 with StatInterval 2s, or for that rate add a throttle section (one request every StatInterval/Threshold) or a bucket with Burst 1",
		},
		{
			"a third per 100 ms", Flow{Resource: "r", Threshold: 1.0 / 3, StatInterval: 100 * time.Millisecond}, "Threshold",
			"0.3333333333333333 per 100ms would refuse every request: the reject behavior counts whole requests in a window of StatInterval, so Threshold must be at least 1; " +
				"write Threshold 1 with StatInterval 300ms, or for that rate add a throttle section (one request every StatInterval/Threshold) or a bucket with Burst 1",
		},
		{
			"1e-300", Flow{Resource: "r", Threshold: 1e-300}, "Threshold",
			"1e-300 per 1s would refuse every request: the reject behavior counts whole requests in a window of StatInterval, so Threshold must be at least 1; " +
				"for that rate add a throttle section (one request every StatInterval/Threshold) or a bucket with Burst 1 (one request per StatInterval of at most 1h is faster)",
		},
		{"cluster", Flow{Resource: "r", Threshold: 0.5, Cluster: &Cluster{}}, "Threshold", ""},
		{
			"cluster fallback", Flow{Resource: "r", Threshold: 10, Cluster: &Cluster{Fallback: FallbackLocal, LocalThreshold: 0.25}}, "Cluster.LocalThreshold",
			"0.25 per 1s would refuse every request while the store fails: it must be 0 or at least 1; " +
				"write Threshold 1 with StatInterval 4s, or for that rate add a throttle section (one request every StatInterval/Threshold) or a bucket with Burst 1",
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

// TestFlowSections: each strategy section checks its own fields and the
// rules it applies to, naming the rule and the section's field.
func TestFlowSections(t *testing.T) {
	tests := []struct {
		name      string
		give      func(r *Flow)
		wantField string // empty: valid
		want      string // in the reason
	}{
		{"warm-up", func(r *Flow) { r.WarmUp = &WarmUp{Period: time.Minute} }, "", ""},
		{"warm-up with cold factor", func(r *Flow) { r.WarmUp = &WarmUp{Period: time.Minute, ColdFactor: 4} }, "", ""},
		{"warm-up throttle", func(r *Flow) {
			r.WarmUp = &WarmUp{Period: time.Minute}
			r.Throttle = &Throttle{MaxQueueing: time.Second}
		}, "", ""},
		{"warm-up without period", func(r *Flow) { r.WarmUp = &WarmUp{} }, "WarmUp.Period", "must be in (0, 24h], got 0s"},
		{"warm-up period too long", func(r *Flow) { r.WarmUp = &WarmUp{Period: 25 * time.Hour} }, "WarmUp.Period", "got 25h0m0s"},
		{"warm-up cold factor 1", func(r *Flow) { r.WarmUp = &WarmUp{Period: time.Minute, ColdFactor: 1} }, "WarmUp.ColdFactor", "(1, 1000]"},
		{"warm-up cold factor NaN", func(r *Flow) { r.WarmUp = &WarmUp{Period: time.Minute, ColdFactor: math.NaN()} }, "WarmUp.ColdFactor", "got NaN"},
		{"warm-up cold factor 1001", func(r *Flow) { r.WarmUp = &WarmUp{Period: time.Minute, ColdFactor: 1001} }, "WarmUp.ColdFactor", "got 1001"},
		{"warm-up on concurrency", func(r *Flow) { r.WarmUp = &WarmUp{Period: time.Minute}; r.Metric = Concurrency }, "WarmUp", "qps metric"},
		{"warm-up on another resource", func(r *Flow) { r.WarmUp = &WarmUp{Period: time.Minute}; r.RefResource = "x" }, "WarmUp", "own resource"},
		{"warm-up and bucket", func(r *Flow) { r.WarmUp = &WarmUp{Period: time.Minute}; r.Bucket = &Bucket{} }, "WarmUp", "not both"},
		{"warm-up exact", func(r *Flow) { r.WarmUp = &WarmUp{Period: time.Minute}; r.Exact = true }, "Exact", "without WarmUp"},
		{"token bucket", func(r *Flow) { r.Bucket = &Bucket{} }, "", ""},
		{"token bucket with burst", func(r *Flow) { r.Bucket = &Bucket{Burst: 2.5} }, "", ""},
		{"token bucket burst 1", func(r *Flow) { r.Bucket = &Bucket{Burst: 1} }, "", ""},
		{"token bucket throttle", func(r *Flow) { r.Bucket = &Bucket{}; r.Throttle = &Throttle{MaxQueueing: time.Second} }, "", ""},
		{"token bucket, threshold below 1", func(r *Flow) { r.Bucket = &Bucket{}; r.Threshold = 0.5 }, "Bucket.Burst", "must be set"},
		{"token bucket, threshold below 1 with burst", func(r *Flow) { r.Bucket = &Bucket{Burst: 1}; r.Threshold = 0.5 }, "", ""},
		{"token bucket burst below 1", func(r *Flow) { r.Bucket = &Bucket{Burst: 0.9} }, "Bucket.Burst", "got 0.9"},
		{"token bucket negative burst", func(r *Flow) { r.Bucket = &Bucket{Burst: -1} }, "Bucket.Burst", "got -1"},
		{"token bucket NaN burst", func(r *Flow) { r.Bucket = &Bucket{Burst: math.NaN()} }, "Bucket.Burst", "got NaN"},
		{"token bucket absurd burst", func(r *Flow) { r.Bucket = &Bucket{Burst: 2 * MaxThreshold} }, "Bucket.Burst", "got 2e+12"},
		{"token bucket on concurrency", func(r *Flow) { r.Bucket = &Bucket{}; r.Metric = Concurrency }, "Bucket", "qps metric"},
		{"token bucket on another resource", func(r *Flow) { r.Bucket = &Bucket{}; r.RefResource = "x" }, "Bucket", "own resource"},
		{"token bucket exact", func(r *Flow) { r.Bucket = &Bucket{}; r.Exact = true }, "Exact", "without WarmUp, Bucket"},
		{"throttle", func(r *Flow) { r.Throttle = &Throttle{} }, "", ""},
		{"throttle with queueing", func(r *Flow) { r.Throttle = &Throttle{MaxQueueing: time.Hour} }, "", ""},
		{"negative queueing", func(r *Flow) { r.Throttle = &Throttle{MaxQueueing: -1} }, "Throttle.MaxQueueing", "must be in [0, 1h], got -1ns"},
		{"queueing too long", func(r *Flow) { r.Throttle = &Throttle{MaxQueueing: time.Hour + 1} }, "Throttle.MaxQueueing", "must be in [0, 1h]"},
		{"throttle on concurrency", func(r *Flow) { r.Metric = Concurrency; r.Throttle = &Throttle{} }, "Throttle", "qps metric"},
		{"associated throttle", func(r *Flow) { r.RefResource = "o"; r.Throttle = &Throttle{} }, "Throttle", "another resource"},
		{"cluster throttle", func(r *Flow) { r.Cluster = &Cluster{}; r.Throttle = &Throttle{} }, "", ""},
		{"cluster bucket", func(r *Flow) { r.Cluster = &Cluster{}; r.Bucket = &Bucket{} }, "", ""},
		{"cluster bucket throttle", func(r *Flow) { r.Cluster = &Cluster{}; r.Bucket = &Bucket{}; r.Throttle = &Throttle{} }, "Throttle", "cluster"},
		{"cluster warm-up", func(r *Flow) { r.Cluster = &Cluster{}; r.WarmUp = &WarmUp{Period: time.Minute} }, "WarmUp", "cluster"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Flow{Resource: "r", Threshold: 10}
			tt.give(&r)
			err := (&Set{Flow: []Flow{{Resource: "other", Threshold: 1}, r}}).Validate()
			if tt.wantField == "" {
				require.NoError(t, err)
				return
			}
			var re *Error
			require.ErrorAs(t, err, &re)
			assert.Equal(t, Error{Kind: "flow", Index: 1, Resource: "r", Field: tt.wantField, Reason: re.Reason}, *re)
			assert.Contains(t, re.Reason, tt.want)
			assert.Contains(t, err.Error(), `rules: flow rule 1 (resource "r"): `+tt.wantField+": ")
		})
	}
}
