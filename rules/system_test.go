package rules_test

import (
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/rules"
)

func TestSystemValidate(t *testing.T) {
	tests := []struct {
		name      string
		give      rules.System
		wantField string // empty: valid
		wantIn    string // substring of the reason
	}{
		{"qps", rules.System{Metric: rules.InboundQPS, Threshold: 1000}, "", ""},
		{"fractional qps", rules.System{Metric: rules.InboundQPS, Threshold: 1.5}, "", ""},
		{"qps below one would refuse everything", rules.System{Metric: rules.InboundQPS, Threshold: 0.5}, "Threshold", "would refuse every inbound request"},
		{"qps 1e-300", rules.System{Metric: rules.InboundQPS, Threshold: 1e-300}, "Threshold", "must be at least 1"},
		{"concurrency", rules.System{Metric: rules.InboundConcurrency, Threshold: 64}, "", ""},
		{"avg rt", rules.System{Metric: rules.InboundAvgRT, Threshold: 12.5}, "", ""},
		{"load", rules.System{Metric: rules.Load1, Threshold: 8}, "", ""},
		{"load bbr", rules.System{Metric: rules.Load1, Threshold: 8, Strategy: rules.BBR}, "", ""},
		{"cpu", rules.System{Metric: rules.CPUUsage, Threshold: 0.8}, "", ""},
		{"cpu one", rules.System{Metric: rules.CPUUsage, Threshold: 1}, "", ""},
		{"cpu bbr", rules.System{Metric: rules.CPUUsage, Threshold: 0.8, Strategy: rules.BBR}, "", ""},

		{"metric unset", rules.System{Threshold: 1}, "Metric", "must be set"},
		{"metric unknown", rules.System{Metric: 6, Threshold: 1}, "Metric", "unknown metric 6"},
		{"strategy unknown", rules.System{Metric: rules.Load1, Threshold: 1, Strategy: 2}, "Strategy", "unknown strategy 2"},
		{"zero threshold", rules.System{Metric: rules.InboundQPS}, "Threshold", "positive"},
		{"negative threshold", rules.System{Metric: rules.Load1, Threshold: -1}, "Threshold", "positive"},
		{"NaN threshold", rules.System{Metric: rules.Load1, Threshold: math.NaN()}, "Threshold", "positive"},
		{"Inf threshold", rules.System{Metric: rules.InboundQPS, Threshold: math.Inf(1)}, "Threshold", "positive"},
		{"absurd threshold", rules.System{Metric: rules.InboundQPS, Threshold: 1e13}, "Threshold", "at most"},
		{"fractional concurrency", rules.System{Metric: rules.InboundConcurrency, Threshold: 2.5}, "Threshold", "whole number"},
		{"cpu percent", rules.System{Metric: rules.CPUUsage, Threshold: 80}, "Threshold", "did you mean 0.8?"},
		{"cpu above one", rules.System{Metric: rules.CPUUsage, Threshold: 1.01}, "Threshold", "ratio in (0, 1]"},
		{"cpu absurd", rules.System{Metric: rules.CPUUsage, Threshold: 500}, "Threshold", "ratio in (0, 1], got 500"},
		{"bbr on qps", rules.System{Metric: rules.InboundQPS, Threshold: 10, Strategy: rules.BBR}, "Strategy", "not qps"},
		{"bbr on concurrency", rules.System{Metric: rules.InboundConcurrency, Threshold: 10, Strategy: rules.BBR}, "Strategy", "load1 and cpu-usage"},
		{"bbr on rt", rules.System{Metric: rules.InboundAvgRT, Threshold: 10, Strategy: rules.BBR}, "Strategy", "not avg-rt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.Validate()
			if tt.wantField == "" {
				require.NoError(t, err)
				return
			}
			var re *rules.Error
			require.True(t, errors.As(err, &re), "Validate() = %v, want *rules.Error", err)
			assert.Equal(t, "system", re.Kind)
			assert.Equal(t, -1, re.Index)
			assert.Equal(t, tt.wantField, re.Field)
			assert.Contains(t, re.Reason, tt.wantIn)
		})
	}
}

func TestSystemErrorAt(t *testing.T) {
	r := rules.System{Metric: rules.CPUUsage, Threshold: 90}
	err := rules.At(r.Validate(), 2)
	require.EqualError(t, err, "rules: system rule 2: Threshold: cpu usage is a ratio in (0, 1], got 90; did you mean 0.9?")
}

func TestSystemJSON(t *testing.T) {
	tests := []struct {
		give string
		want rules.System
	}{
		{`{"metric":"cpu-usage","threshold":0.8,"strategy":"bbr"}`, rules.System{Metric: rules.CPUUsage, Threshold: 0.8, Strategy: rules.BBR}},
		{`{"metric":"CPU_USAGE","threshold":0.8}`, rules.System{Metric: rules.CPUUsage, Threshold: 0.8}},
		{`{"id":"l","metric":"Load1","threshold":4,"strategy":"BBR"}`, rules.System{ID: "l", Metric: rules.Load1, Threshold: 4, Strategy: rules.BBR}},
		{`{"metric":"qps","threshold":100}`, rules.System{Metric: rules.InboundQPS, Threshold: 100}},
		{`{"metric":"concurrency","threshold":8,"strategy":"threshold"}`, rules.System{Metric: rules.InboundConcurrency, Threshold: 8}},
		{`{"metric":"avgRT","threshold":20}`, rules.System{Metric: rules.InboundAvgRT, Threshold: 20}},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			var got rules.System
			require.NoError(t, json.Unmarshal([]byte(tt.give), &got))
			assert.Equal(t, tt.want, got)
			// Round trip through the canonical names.
			b, err := json.Marshal(got)
			require.NoError(t, err)
			var back rules.System
			require.NoError(t, json.Unmarshal(b, &back))
			assert.Equal(t, got, back)
		})
	}
}

func TestSystemJSONRefused(t *testing.T) {
	var got rules.System
	err := json.Unmarshal([]byte(`{"metric":"memory","threshold":1}`), &got)
	require.ErrorContains(t, err, `unknown system metric "memory" (want one of qps, concurrency, avg-rt, load1, cpu-usage)`)
	err = json.Unmarshal([]byte(`{"metric":"load1","threshold":1,"strategy":"adaptive"}`), &got)
	require.ErrorContains(t, err, `unknown system strategy "adaptive"`)
	_, err = json.Marshal(rules.System{Threshold: 1})
	require.ErrorContains(t, err, "invalid system metric")
}

func TestSystemNames(t *testing.T) {
	tests := []struct {
		give fmtStringer
		want string
	}{
		{rules.InboundQPS, "qps"},
		{rules.InboundConcurrency, "concurrency"},
		{rules.InboundAvgRT, "avg-rt"},
		{rules.Load1, "load1"},
		{rules.CPUUsage, "cpu-usage"},
		{rules.SystemMetric(0), "unset"},
		{rules.SystemMetric(9), "system metric(9)"},
		{rules.PlainThreshold, "threshold"},
		{rules.BBR, "bbr"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.give.String())
	}
}

type fmtStringer interface{ String() string }
