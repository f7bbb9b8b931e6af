package stat

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

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
