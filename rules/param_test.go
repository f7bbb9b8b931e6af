package rules

import (
	"encoding/json"
	"errors"
	"github.com/sluice-go/sluice/internal/rulewalk"
	"math"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/ruledef"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParamValidate(t *testing.T) {
	ok := Param{Resource: "r", Threshold: 1}
	tests := []struct {
		name      string
		give      func(r *Param)
		wantField string // "" for valid
	}{
		{"minimal", func(r *Param) {}, ""},
		{"per day with burst and exceptions", func(r *Param) {
			r.Duration, r.Burst, r.Exceptions = 24*time.Hour, 5, map[string]int64{"vip": 100, "banned": 0}
		}, ""},
		{"attachment key", func(r *Param) { r.Key = "ip" }, ""},
		{"throttle", func(r *Param) { r.Throttle = &Throttle{MaxQueueing: time.Second} }, ""},
		{"concurrency", func(r *Param) { r.Metric = Concurrency }, ""},
		{"no resource", func(r *Param) { r.Resource = "" }, "Resource"},
		{"zero threshold", func(r *Param) { r.Threshold = 0 }, "Threshold"},
		{"absurd threshold", func(r *Param) { r.Threshold = 2e12 }, "Threshold"},
		{"negative index", func(r *Param) { r.Index = -1 }, "Index"},
		{"index too large", func(r *Param) { r.Index = ruledef.MaxParamIndex + 1 }, "Index"},
		{"index with key", func(r *Param) { r.Key, r.Index = "ip", 1 }, "Index"},
		{"negative burst", func(r *Param) { r.Burst = -1 }, "Burst"},
		{"burst with throttle", func(r *Param) { r.Burst, r.Throttle = 1, &Throttle{} }, "Burst"},
		{"burst with concurrency", func(r *Param) { r.Burst, r.Metric = 1, Concurrency }, "Burst"},
		{"unknown metric", func(r *Param) { r.Metric = "rps" }, "Metric"},
		{"concurrency throttle", func(r *Param) { r.Metric, r.Throttle = Concurrency, &Throttle{} }, "Throttle"},
		{"concurrency with sentinel-golang's DurationInSec: 1", func(r *Param) { r.Metric, r.Duration = Concurrency, time.Second }, ""},
		{"concurrency duration", func(r *Param) { r.Metric, r.Duration = Concurrency, 2*time.Second }, "Duration"},
		{"concurrency duration 1ms", func(r *Param) { r.Metric, r.Duration = Concurrency, time.Millisecond }, "Duration"},
		{"sub-millisecond duration", func(r *Param) { r.Duration = time.Microsecond }, "Duration"},
		{"fractional-ms duration", func(r *Param) { r.Duration = 1500 * time.Microsecond }, "Duration"},
		{"duration over a year", func(r *Param) { r.Duration = ruledef.MaxParamDuration + time.Millisecond }, "Duration"},
		{"queueing too long", func(r *Param) { r.Throttle = &Throttle{MaxQueueing: 2 * time.Hour} }, "Throttle.MaxQueueing"},
		{"negative capacity", func(r *Param) { r.Capacity = -1 }, "Capacity"},
		{"capacity too large", func(r *Param) { r.Capacity = ruledef.MaxParamCapacity + 1 }, "Capacity"},
		{"negative exception", func(r *Param) { r.Exceptions = map[string]int64{"b": -1, "a": -2} }, "Exceptions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rulewalk.Clone(ok)
			tt.give(&r)
			err := r.validate()
			if tt.wantField == "" {
				require.NoError(t, err)
				return
			}
			var re *Error
			require.ErrorAs(t, err, &re)
			assert.Equal(t, tt.wantField, re.Field)
			assert.Equal(t, "param", re.Kind)
		})
	}
}

func TestParamExceptionErrorIsDeterministic(t *testing.T) {
	r := Param{Resource: "r", Threshold: 1, Exceptions: map[string]int64{"b": -1, "a": -2, "c": -3}}
	for i := 0; i < 20; i++ {
		assert.Contains(t, r.validate().Error(), `threshold of "a" must be`)
	}
}

func TestParamDefaults(t *testing.T) {
	r := Param{Resource: "r", Threshold: 2}
	assert.Equal(t, time.Second, r.window())
}

func TestParamJSON(t *testing.T) {
	in := `{"resource":"GET /feed","key":"ip","threshold":10,"burst":2,"duration":60000000000,"exceptions":{"vip-1":100}}`
	var r Param
	require.NoError(t, json.Unmarshal([]byte(in), &r))
	assert.Equal(t, Param{Resource: "GET /feed", Key: "ip", Threshold: 10, Burst: 2, Duration: time.Minute, Exceptions: map[string]int64{"vip-1": 100}}, r)
	require.NoError(t, r.validate())
}

func TestParamClusterValidate(t *testing.T) {
	tests := []struct {
		name      string
		give      func(r *Param)
		wantField string // empty: valid
	}{
		{"zero section", func(r *Param) {}, ""},
		{"per minute", func(r *Param) { r.Duration = time.Minute }, ""},
		{"burst and exceptions", func(r *Param) { r.Burst = 5; r.Exceptions = map[string]int64{"vip": 50, "bad": 0} }, ""},
		{"throttle", func(r *Param) { r.Throttle = &Throttle{MaxQueueing: time.Second} }, ""},
		{"leases", func(r *Param) { r.Cluster.Leases = true }, ""},
		{"strict", func(r *Param) { r.Cluster.Strict = true }, ""},
		{"per-instance", func(r *Param) { r.Cluster.Mode = ClusterPerInstance }, ""},
		{"local threshold", func(r *Param) { r.Cluster.LocalThreshold = 3 }, ""},
		{"block", func(r *Param) { r.Cluster.Fallback = FallbackBlock }, ""},
		{"concurrency", func(r *Param) { r.Metric = Concurrency }, ""},
		{"concurrency per instance", func(r *Param) { r.Metric = Concurrency; r.Cluster.Mode = ClusterPerInstance }, "Cluster.Mode"},
		{"concurrency leases", func(r *Param) { r.Metric = Concurrency; r.Cluster.Leases = true }, "Cluster.Leases"},
		{"strict and leases", func(r *Param) { r.Cluster.Strict = true; r.Cluster.Leases = true }, "Cluster.Leases"},
		{"fractional local threshold", func(r *Param) { r.Cluster.LocalThreshold = 2.5 }, "Cluster.LocalThreshold"},
		{"local threshold with pass", func(r *Param) { r.Cluster.Fallback = FallbackPass; r.Cluster.LocalThreshold = 2 }, "Cluster.LocalThreshold"},
		{"unknown mode", func(r *Param) { r.Cluster.Mode = "avg" }, "Cluster.Mode"},
		{"unknown fallback", func(r *Param) { r.Cluster.Fallback = "avg" }, "Cluster.Fallback"},
		{"NaN local threshold", func(r *Param) { r.Cluster.LocalThreshold = math.NaN() }, "Cluster.LocalThreshold"},
		{"rule errors first", func(r *Param) { r.Threshold = 0 }, "Threshold"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Param{Resource: "r", Key: "user", Threshold: 10, Cluster: &Cluster{}}
			tt.give(&r)
			err := r.validate()
			if tt.wantField == "" {
				require.NoError(t, err)
				return
			}
			var e *Error
			require.True(t, errors.As(err, &e), "want *Error, got %v", err)
			assert.Equal(t, tt.wantField, e.Field)
			assert.Equal(t, "r", e.Resource)
			assert.Equal(t, "param", e.Kind)
		})
	}
	// In a list the error names the rule's index.
	err := (&Set{Param: []Param{{Resource: "a", Threshold: 1, Metric: Concurrency, Cluster: &Cluster{}}, {Resource: "b", Threshold: 1, Metric: Concurrency, Cluster: &Cluster{Strict: true}}}}).Validate()
	var e *Error
	require.True(t, errors.As(err, &e))
	assert.Equal(t, 1, e.Index)
	assert.Equal(t, "Cluster.Strict", e.Field)
	assert.Contains(t, err.Error(), "concurrency metric")
}

func TestDecodeParamCluster(t *testing.T) {
	yml := `
param:
  - resource: POST /posts
    key: user
    threshold: 5
    duration: 1m
    cluster: {}
  - resource: GET /api
    key: tenant
    threshold: 1000
    burst: 100
    cluster: {leases: true, fallback: local, localThreshold: 300, mode: per-instance}
  - resource: local
    threshold: 5
`
	json := `{"param":[{"resource":"POST /posts","key":"user","threshold":5,"duration":"1m","cluster":{}},
{"resource":"GET /api","key":"tenant","threshold":1000,"burst":100,"cluster":{"leases":true,"fallback":"local","localThreshold":300,"mode":"per-instance"}},
{"resource":"local","threshold":5}]}`
	for _, tc := range []struct {
		f    Format
		data string
	}{{YAML, yml}, {JSON, json}} {
		s, err := Decode([]byte(tc.data), tc.f)
		require.NoError(t, err, tc.f)
		require.Len(t, s.Param, 3)
		assert.Equal(t, &Cluster{}, s.Param[0].Cluster)
		assert.Equal(t, &Cluster{Leases: true, LocalThreshold: 300, Mode: ClusterPerInstance, Fallback: FallbackLocal}, s.Param[1].Cluster)
		assert.Nil(t, s.Param[2].Cluster)
		for _, out := range []Format{JSON, YAML} {
			enc, err := Encode(s, out)
			require.NoError(t, err)
			again, err := Decode(enc, out)
			require.NoError(t, err)
			assert.Equal(t, s, again, "round trip through %v:\n%s", out, enc)
		}
	}
	_, err := Decode([]byte("param:\n  - resource: a\n    threshold: 1\n    metric: concurrency\n    cluster: {mode: per-instance}\n"), YAML)
	assert.ErrorContains(t, err, "per-instance is a local concurrency limit")
	_, err = Decode([]byte("param:\n  - resource: a\n    threshold: 1\n    cluster: {lease: true}\n"), YAML)
	assert.ErrorContains(t, err, "lease")
}

// TestParamSentinelMigration: a concurrency rule carried over from
// sentinel-golang, which writes DurationInSec: 1 by default, loads (1s is
// the default Duration, so it means what zero means); a BurstCount or another
// duration, which sentinel-golang ignores for concurrency, is refused with a
// note saying so.
func TestParamSentinelMigration(t *testing.T) {
	s, err := Decode([]byte("param:\n- {resource: r, key: tenant, metric: concurrency, threshold: 2, duration: 1s}\n"), YAML)
	require.NoError(t, err)
	require.Len(t, s.Param, 1)
	assert.Equal(t, time.Second, s.Param[0].Duration)

	_, err = Decode([]byte("param:\n- {resource: r, metric: concurrency, threshold: 2, duration: 1s, burst: 3}\n"), YAML)
	require.EqualError(t, err, `rules: param rule 0 (resource "r"): Burst: is only used with the qps metric without Throttle; leave it zero (sentinel-golang ignores a BurstCount there: drop it when migrating)`)
	_, err = Decode([]byte("param:\n- {resource: r, metric: concurrency, threshold: 2, duration: 10s}\n"), YAML)
	require.EqualError(t, err, `rules: param rule 0 (resource "r"): Duration: has no meaning for the concurrency metric; leave it zero (or 1s, sentinel-golang's default DurationInSec: 1), got 10s`)
}
