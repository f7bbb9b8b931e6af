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
		{"metric unknown", rules.System{Metric: "rps", Threshold: 1}, "Metric", `unknown value "rps" (want one of qps, concurrency, avg-rt, load1, cpu-usage)`},
		{"strategy unknown", rules.System{Metric: rules.Load1, Threshold: 1, Strategy: "BBR"}, "Strategy", `unknown value "BBR"`},
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
			err := (&rules.Set{System: []rules.System{tt.give}}).Validate()
			if tt.wantField == "" {
				require.NoError(t, err)
				return
			}
			var re *rules.Error
			require.True(t, errors.As(err, &re), "Validate() = %v, want *rules.Error", err)
			assert.Equal(t, "system", re.Kind)
			assert.Equal(t, 0, re.Index)
			assert.Equal(t, tt.wantField, re.Field)
			assert.Contains(t, re.Reason, tt.wantIn)
		})
	}
}

func TestSystemErrorAt(t *testing.T) {
	err := (&rules.Set{System: []rules.System{
		{Metric: rules.Load1, Threshold: 4}, {Metric: rules.InboundQPS, Threshold: 9}, {Metric: rules.CPUUsage, Threshold: 90},
	}}).Validate()
	require.EqualError(t, err, "rules: system rule 2: Threshold: cpu usage is a ratio in (0, 1], got 90; did you mean 0.9?")
}

func TestSystemJSON(t *testing.T) {
	tests := []struct {
		give string
		want rules.System
	}{
		{`{"metric":"cpu-usage","threshold":0.8,"strategy":"bbr"}`, rules.System{Metric: rules.CPUUsage, Threshold: 0.8, Strategy: rules.BBR}},
		{`{"id":"l","metric":"load1","threshold":4,"strategy":"bbr"}`, rules.System{ID: "l", Metric: rules.Load1, Threshold: 4, Strategy: rules.BBR}},
		{`{"metric":"qps","threshold":100}`, rules.System{Metric: rules.InboundQPS, Threshold: 100}},
		{`{"metric":"concurrency","threshold":8,"strategy":"threshold"}`, rules.System{Metric: rules.InboundConcurrency, Threshold: 8, Strategy: rules.PlainThreshold}},
		{`{"metric":"avg-rt","threshold":20}`, rules.System{Metric: rules.InboundAvgRT, Threshold: 20}},
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
