package main

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/sluicetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the example on a manual clock, which stays in one second
// and gives every call a response time of 0: every data point is exact.
func TestRun(t *testing.T) {
	var out strings.Builder
	if err := run(&out, sluice.WithClock(sluicetest.NewManualClock(int64(time.Hour)))); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}

const want = `collected (name{attributes} value unit):
sluice.blocked{resource="GET /orders",type="flow"} 3 {request}
sluice.blocked{resource="payments",type="degrade"} 2 {request}
sluice.breaker.state{resource="payments",rule="payments"} 1
sluice.breaker.transitions{resource="payments",rule="payments",to="closed"} 0 {transition}
sluice.breaker.transitions{resource="payments",rule="payments",to="half-open"} 0 {transition}
sluice.breaker.transitions{resource="payments",rule="payments",to="open"} 1 {transition}
sluice.completed{resource="GET /orders"} 5 {request}
sluice.completed{resource="payments"} 3 {request}
sluice.errors{resource="GET /orders"} 0 {request}
sluice.errors{resource="payments"} 3 {request}
sluice.in_flight{resource="GET /orders"} 0 {request}
sluice.in_flight{resource="payments"} 0 {request}
sluice.passed{resource="GET /orders"} 5 {request}
sluice.passed{resource="payments"} 3 {request}
sluice.rt{resource="GET /orders"} 0 s
sluice.rt{resource="payments"} 0 s
`
