package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/sluice-go/sluice/rules"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the example and checks what it shows: the adaptive limit
// settles within 20% of the service's 50 workers with a p99 within twice the
// no-load RT, before and after the slowdown, while serving as much as the
// static limit set too high.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out, 20))
	assert.Contains(t, out.String(), "adaptive")

	a, err := simulate("adaptive", rules.Flow{Resource: "svc", Metric: rules.Concurrency, Adaptive: &rules.Adaptive{Min: 1, Max: 1000, Initial: 10}}, 20)
	require.NoError(t, err)
	for s := 3; s < 20; s++ {
		if s == 10 || s == 11 {
			continue // the slowdown's second and the one after
		}
		noLoad := service
		if s >= 10 {
			noLoad *= 2
		}
		assert.InDelta(t, 50, a.limit[s], 10, "second %d: limit", s+1)
		assert.LessOrEqual(t, a.p99[s], 2*noLoad, "second %d: p99", s+1)
		assert.Greater(t, a.served[s], int(0.95*float64(time.Second)/float64(noLoad)*workers), "second %d: served", s+1)
	}
}
