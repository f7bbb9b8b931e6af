package main

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDescribe checks that each transition line says what its value means.
func TestDescribe(t *testing.T) {
	ratio := rules.CircuitBreaker{
		Resource: "r", Strategy: rules.ErrorRatio, Threshold: 0.5, MinRequestAmount: 5,
		StatInterval: 500 * time.Millisecond, RetryTimeout: 300 * time.Millisecond, Probes: 2,
	}
	slow := ratio
	slow.Strategy, slow.MaxAllowedRT, slow.MinRequestAmount = rules.SlowRequestRatio, 20*time.Millisecond, 0
	count := ratio
	count.Strategy, count.Threshold = rules.ErrorCount, 3
	tr := func(r rules.CircuitBreaker, from, to stat.BreakerState, v float64) stat.Event {
		return stat.Event{Kind: stat.EventBreaker, Resource: "r", Rule: r, From: from.String(), To: to.String(), Value: v}
	}
	tests := []struct {
		name string
		give stat.Event
		want string
	}{
		{
			name: "opened by the error ratio",
			give: tr(ratio, stat.BreakerClosed, stat.BreakerOpen, 1),
			want: "100% of the calls in the last 500ms failed (5 calls at least), over the threshold 50%; refusing calls for 300ms",
		},
		{
			name: "opened by slow calls, default minimum",
			give: tr(slow, stat.BreakerClosed, stat.BreakerOpen, 0.75),
			want: "75% of the calls in the last 500ms were slower than 20ms (5 calls at least), over the threshold 50%; refusing calls for 300ms",
		},
		{
			name: "opened by the error count",
			give: tr(count, stat.BreakerClosed, stat.BreakerOpen, 3),
			want: "3 errors in the last 500ms reached the threshold 3; refusing calls for 300ms",
		},
		{
			name: "half-open",
			give: tr(ratio, stat.BreakerOpen, stat.BreakerHalfOpen, 0),
			want: "300ms since opening: the next 2 calls are probes",
		},
		{
			name: "a probe failed: the value is its response time",
			give: tr(ratio, stat.BreakerHalfOpen, stat.BreakerOpen, 0.25),
			want: "a probe failed after 0.25 ms; refusing calls for another 300ms",
		},
		{
			name: "probes given up: the value is the time since the last was admitted",
			give: tr(ratio, stat.BreakerHalfOpen, stat.BreakerOpen, 512),
			want: "a probe was out 512ms, not less than the 500ms interval: given up as failed; refusing calls for 300ms",
		},
		{
			name: "closed: the value is the successful probes",
			give: tr(ratio, stat.BreakerHalfOpen, stat.BreakerClosed, 2),
			want: "2 of 2 probes succeeded; counting calls again from an empty window",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, describe(tt.give))
		})
	}
}
