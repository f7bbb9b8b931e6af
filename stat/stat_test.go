package stat

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestEventKindString(t *testing.T) {
	tests := []struct {
		give EventKind
		want string
	}{
		{EventRulesLoaded, "rules-loaded"},
		{EventRulesRefused, "rules-refused"},
		{EventBreaker, "breaker"},
		{EventSheddingStarted, "shedding-started"},
		{EventSheddingStopped, "shedding-stopped"},
		{EventClusterFallback, "cluster-fallback"},
		{EventClusterRecovered, "cluster-recovered"},
		{EventWatchFired, "watch-fired"},
		{EventWatchCleared, "watch-cleared"},
		{EventTier, "tier"},
		{0, "EventKind(0)"},
		{EventTier + 1, "EventKind(11)"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.give.String())
	}
}

func TestMetricString(t *testing.T) {
	tests := []struct {
		give Metric
		want string
	}{
		{MetricPass, "pass"},
		{MetricBlock, "block"},
		{MetricComplete, "complete"},
		{MetricError, "error"},
		{MetricAvgRT, "avg-rt"},
		{MetricMaxConcurrency, "max-concurrency"},
		{0, "Metric(0)"},
		{MetricMaxConcurrency + 1, "Metric(7)"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.give.String())
	}
}
