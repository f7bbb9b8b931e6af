package rules

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSetValidateRefusesDuplicates(t *testing.T) {
	qps := func(res string, th float64) Flow { return Flow{Resource: res, Threshold: th} }
	cpu := System{Metric: CPUUsage, Threshold: 0.8}
	slow := CircuitBreaker{Resource: "a", Threshold: 0.5, MaxAllowedRT: time.Second, RetryTimeout: time.Second}
	tests := []struct {
		name string
		give Set
		// want is the whole message, empty when the set is valid;
		// wantIndex and wantResource are the *Error's.
		want         string
		wantIndex    int
		wantResource string
	}{
		{
			name:      "flow 5/s beside 3/s",
			give:      Set{Flow: []Flow{qps("a", 5), qps("b", 1), qps("a", 3)}},
			want:      `rules: flow rule 2 (resource "a"): duplicates rule 0: both have the same resource, metric, sections (warmUp, bucket, throttle), statInterval, refResource, caller and quota; keep one`,
			wantIndex: 2, wantResource: "a",
		},
		{
			name:      "flow zero interval is one second",
			give:      Set{Flow: []Flow{{Resource: "a", Threshold: 5, StatInterval: time.Second}, {ID: "other id", Resource: "a", Threshold: 5}}},
			want:      `rules: flow rule 1 (resource "a"): duplicates rule 0: both have the same resource, metric, sections (warmUp, bucket, throttle), statInterval, refResource, caller and quota; keep one`,
			wantIndex: 1, wantResource: "a",
		},
		{
			name: "flow concurrency of another resource",
			give: Set{Flow: []Flow{
				{Resource: "a", Metric: Concurrency, Threshold: 2, RefResource: "b"},
				{Resource: "a", Metric: Concurrency, Threshold: 3, RefResource: "b"},
			}},
			want:      `rules: flow rule 1 (resource "a"): duplicates rule 0: both have the same resource, metric, sections (warmUp, bucket, throttle), statInterval, refResource, caller and quota; keep one`,
			wantIndex: 1, wantResource: "a",
		},
		{
			name: "token buckets that differ only in burst",
			give: Set{Flow: []Flow{
				{Resource: "a", Threshold: 5, Bucket: &Bucket{Burst: 2}},
				{Resource: "a", Threshold: 5, Bucket: &Bucket{Burst: 20}},
			}},
			want:      `rules: flow rule 1 (resource "a"): duplicates rule 0: both have the same resource, metric, sections (warmUp, bucket, throttle), statInterval, refResource, caller and quota; keep one`,
			wantIndex: 1, wantResource: "a",
		},
		{
			name: "flow rules that count differently",
			give: Set{Flow: []Flow{
				qps("a", 5),
				{Resource: "a", Threshold: 100, StatInterval: time.Minute},
				{Resource: "a", Threshold: 2, Metric: Concurrency},
				{Resource: "a", Threshold: 5, Throttle: &Throttle{}},
				{Resource: "a", Threshold: 5, WarmUp: &WarmUp{Period: time.Minute}},
				{Resource: "a", Threshold: 5, Bucket: &Bucket{Burst: 2}},
				{Resource: "a", Threshold: 300, StatInterval: time.Minute, Bucket: &Bucket{Burst: 60}},
				{Resource: "a", Threshold: 5, RefResource: "b"},
				{Resource: "a", Threshold: 5, RefResource: "c"},
				qps("b", 5),
			}},
		},
		{
			name:      "isolation on one resource",
			give:      Set{Flow: []Flow{{Resource: "db", Metric: Concurrency, Threshold: 4}, {Resource: "cache", Metric: Concurrency, Threshold: 4}, {Resource: "db", Metric: Concurrency, Threshold: 8}}},
			want:      `rules: flow rule 2 (resource "db"): duplicates rule 0: both have the same resource, metric, sections (warmUp, bucket, throttle), statInterval, refResource, caller and quota; keep one`,
			wantIndex: 2, wantResource: "db",
		},
		{
			name:      "system rules on one metric, whatever the strategy",
			give:      Set{System: []System{cpu, {Metric: Load1, Threshold: 4}, {Metric: CPUUsage, Threshold: 0.9, Strategy: BBR}}},
			want:      `rules: system rule 2: duplicates rule 0: both have the same metric (the process takes one system rule per metric); keep one`,
			wantIndex: 2,
		},
		{
			name:      "two identical circuit breakers",
			give:      Set{CircuitBreaker: []CircuitBreaker{slow, slow}},
			want:      `rules: circuit breaker rule 1 (resource "a"): duplicates rule 0: both have the same resource and strategy (a resource takes one breaker per strategy); keep one`,
			wantIndex: 1, wantResource: "a",
		},
		{
			name: "circuit breakers with different strategies",
			give: Set{CircuitBreaker: []CircuitBreaker{slow, {Resource: "a", Strategy: ErrorCount, Threshold: 5, RetryTimeout: time.Second}}},
		},
		{
			name:      "param rules on one attachment",
			give:      Set{Param: []Param{{Resource: "a", Key: "tenant", Threshold: 5}, {Resource: "a", Key: "tenant", Threshold: 9, Duration: time.Second, Burst: 3}}},
			want:      `rules: param rule 1 (resource "a"): duplicates rule 0: both have the same resource, argument (key or index), metric and duration; keep one`,
			wantIndex: 1, wantResource: "a",
		},
		{
			name:      "param concurrency on one argument",
			give:      Set{Param: []Param{{Resource: "a", Index: 1, Metric: Concurrency, Threshold: 5}, {Resource: "a", Index: 1, Metric: Concurrency, Threshold: 2}}},
			want:      `rules: param rule 1 (resource "a"): duplicates rule 0: both have the same resource, argument (key or index), metric and duration; keep one`,
			wantIndex: 1, wantResource: "a",
		},
		{
			name: "param rules that count differently",
			give: Set{Param: []Param{
				{Resource: "a", Threshold: 5},
				{Resource: "a", Index: 1, Threshold: 5},
				{Resource: "a", Key: "tenant", Threshold: 5},
				{Resource: "a", Threshold: 500, Duration: time.Minute},
				{Resource: "a", Threshold: 5, Metric: Concurrency},
				{Resource: "b", Threshold: 5},
			}},
		},
		{
			name: "an invalid rule before a duplicate is reported first",
			give: Set{Flow: []Flow{qps("a", 5), qps("b", -1), qps("a", 5)}},
			want: `rules: flow rule 1 (resource "b"): Threshold: must be a positive number, got -1`, wantIndex: 1, wantResource: "b",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.Validate()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tt.want)
			var re *Error
			require.True(t, errors.As(err, &re), "%T is not an *Error", err)
			require.Equal(t, tt.wantIndex, re.Index)
			require.Equal(t, tt.wantResource, re.Resource)
		})
	}
}
