package rules

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFlowClusterValidate(t *testing.T) {
	tests := []struct {
		name      string
		give      func(r *Flow)
		wantField string // empty: valid
	}{
		{"zero section", func(r *Flow) {}, ""},
		{"throttle", func(r *Flow) { r.Throttle = &Throttle{MaxQueueing: time.Second} }, ""},
		{"strict", func(r *Flow) { r.Cluster.Strict = true; r.StatInterval = time.Hour }, ""},
		{"pass", func(r *Flow) { r.Cluster.Fallback = FallbackPass }, ""},
		{"block", func(r *Flow) { r.Cluster.Fallback = FallbackBlock }, ""},
		{"local threshold", func(r *Flow) { r.Cluster.LocalThreshold = 25 }, ""},
		{"per-instance", func(r *Flow) { r.Cluster.Mode = ClusterPerInstance }, ""},
		{"unknown mode", func(r *Flow) { r.Cluster.Mode = "avg" }, "Cluster.Mode"},
		{"unknown fallback", func(r *Flow) { r.Cluster.Fallback = "drop" }, "Cluster.Fallback"},
		{"negative local threshold", func(r *Flow) { r.Cluster.LocalThreshold = -1 }, "Cluster.LocalThreshold"},
		{"NaN local threshold", func(r *Flow) { r.Cluster.LocalThreshold = math.NaN() }, "Cluster.LocalThreshold"},
		{"absurd local threshold", func(r *Flow) { r.Cluster.LocalThreshold = 2 * MaxThreshold }, "Cluster.LocalThreshold"},
		{"local threshold with pass", func(r *Flow) { r.Cluster.Fallback = FallbackPass; r.Cluster.LocalThreshold = 5 }, "Cluster.LocalThreshold"},
		{"concurrency", func(r *Flow) { r.Metric = Concurrency }, ""},
		{"concurrency per instance", func(r *Flow) { r.Metric = Concurrency; r.Cluster.Mode = ClusterPerInstance }, "Cluster.Mode"},
		{"concurrency strict", func(r *Flow) { r.Metric = Concurrency; r.Cluster.Strict = true }, "Cluster.Strict"},
		{"concurrency leases", func(r *Flow) { r.Metric = Concurrency; r.Cluster.Leases = true }, "Cluster.Leases"},
		{"concurrency local fraction", func(r *Flow) { r.Metric = Concurrency; r.Cluster.LocalThreshold = 2.5 }, "Cluster.LocalThreshold"},
		{"concurrency adaptive", func(r *Flow) { r.Metric = Concurrency; r.Adaptive = &Adaptive{Min: 1, Max: 10} }, "Adaptive"},
		{"warm-up", func(r *Flow) { r.WarmUp = &WarmUp{Period: time.Minute} }, "WarmUp"},
		{"exact", func(r *Flow) { r.Exact = true }, "Exact"},
		{"associated", func(r *Flow) { r.RefResource = "other" }, "Cluster"},
		{"rule errors first", func(r *Flow) { r.Threshold = 0 }, "Threshold"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Flow{Resource: "r", Threshold: 100, Cluster: &Cluster{}}
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
		})
	}
}

func TestDecodeFlowCluster(t *testing.T) {
	yml := `
flow:
  - resource: api
    threshold: 1000
    cluster:
      fallback: pass
  - resource: post
    threshold: 20
    statInterval: 1h
    cluster: {strict: true, localThreshold: 2, mode: per-instance}
  - resource: local
    threshold: 5
`
	json := `{"flow":[{"resource":"api","threshold":1000,"cluster":{"fallback":"pass"}},
{"resource":"post","threshold":20,"statInterval":"1h","cluster":{"strict":true,"localThreshold":2,"mode":"per-instance"}},
{"resource":"local","threshold":5}]}`
	for _, tc := range []struct {
		f    Format
		data string
	}{{YAML, yml}, {JSON, json}} {
		s, err := Decode([]byte(tc.data), tc.f)
		require.NoError(t, err, tc.f)
		require.Len(t, s.Flow, 3)
		assert.Equal(t, &Cluster{Fallback: FallbackPass}, s.Flow[0].Cluster)
		assert.Equal(t, &Cluster{Mode: ClusterPerInstance, Strict: true, LocalThreshold: 2}, s.Flow[1].Cluster)
		assert.Nil(t, s.Flow[2].Cluster)
	}
	_, err := Decode([]byte("flow:\n  - resource: a\n    threshold: 1\n    cluster: {fallback: drop}\n"), YAML)
	assert.ErrorContains(t, err, "Fallback: unknown value \"drop\"")
	_, err = Decode([]byte("flow:\n  - resource: a\n    threshold: 1\n    cluster: {share: 1}\n"), YAML)
	assert.ErrorContains(t, err, "share")
}

// TestDecodeFlowClusterConcurrency: a fleet-wide concurrency rule reads
// and writes back; what its section may not hold is refused naming the
// field.
func TestDecodeFlowClusterConcurrency(t *testing.T) {
	doc := "flow:\n  - resource: export\n    metric: concurrency\n    threshold: 50\n    cluster: {fallback: local, localThreshold: 10}\n"
	s, err := Decode([]byte(doc), YAML)
	require.NoError(t, err)
	require.Equal(t, &Cluster{Fallback: FallbackLocal, LocalThreshold: 10}, s.Flow[0].Cluster)
	for _, out := range []Format{JSON, YAML} {
		enc, err := Encode(s, out)
		require.NoError(t, err)
		again, err := Decode(enc, out)
		require.NoError(t, err)
		assert.Equal(t, s, again, "%s", enc)
	}
	for field, sec := range map[string]string{
		"Cluster.Mode":           "{mode: per-instance}",
		"Cluster.Strict":         "{strict: true}",
		"Cluster.Leases":         "{leases: true}",
		"Cluster.LocalThreshold": "{localThreshold: 2.5}",
	} {
		_, err := Decode([]byte("flow:\n  - resource: export\n    metric: concurrency\n    threshold: 50\n    cluster: "+sec+"\n"), YAML)
		var e *Error
		require.True(t, errors.As(err, &e), "%s: %v", sec, err)
		assert.Equal(t, field, e.Field, "%s", sec)
	}
}
