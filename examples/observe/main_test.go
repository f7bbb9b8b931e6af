package main

import (
	"regexp"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wallClock matches the block log's wall-clock times, the only part of the
// output that differs between runs.
var wallClock = regexp.MustCompile(`at \d\d:\d\d:\d\d`)

// TestRun runs the example: on its manual clock every run prints exactly
// this, the block log's wall-clock times aside.
func TestRun(t *testing.T) {
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := wallClock.ReplaceAllString(out.String(), "at HH:MM:SS")
	if got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}

const want = `     0s  event rules-loaded: flow
     0s  event rules-loaded: circuit breaker
     0s  event rules-refused: rules: flow rule 0 (resource "GET /orders"): Threshold: must be a positive number, got -5
  270ms  event breaker: payments closed -> open (1)
  950ms  snapshot GET /orders: 5 passed/s, 3 refused/s, 5 errors/s, avg RT 16ms
  950ms  snapshot payments: 3 passed/s, 2 refused/s, 3 errors/s, avg RT 10ms
  1.01s  event breaker: payments open -> half-open (0)
  1.02s  event breaker: payments half-open -> open (10)
level=INFO msg="GET /orders refused 3 by flow rule \"orders\" (threshold 5) at HH:MM:SS" resource="GET /orders" type=flow rule=orders threshold=5 count=3
level=INFO msg="payments refused 2 by degrade rule \"payments\" (threshold 0.5) at HH:MM:SS" resource=payments type=degrade rule=payments threshold=0.5 count=2
  1.95s  snapshot GET /orders: 5 passed/s, 3 refused/s, 5 errors/s, avg RT 12ms
  1.95s  snapshot payments: 1 passed/s, 4 refused/s, 1 errors/s, avg RT 10ms
  2.01s  event breaker: payments open -> half-open (0)
  2.02s  event breaker: payments half-open -> closed (1)
level=INFO msg="GET /orders refused 3 by flow rule \"orders\" (threshold 5) at HH:MM:SS" resource="GET /orders" type=flow rule=orders threshold=5 count=3
level=INFO msg="payments refused 4 by degrade rule \"payments\" (threshold 0.5) at HH:MM:SS" resource=payments type=degrade rule=payments threshold=0.5 count=4
  2.95s  snapshot GET /orders: 5 passed/s, 3 refused/s, 0 errors/s, avg RT 20ms
  2.95s  snapshot payments: 5 passed/s, 0 refused/s, 0 errors/s, avg RT 10ms
level=INFO msg="GET /orders refused 3 by flow rule \"orders\" (threshold 5) at HH:MM:SS" resource="GET /orders" type=flow rule=orders threshold=5 count=3

History of GET /orders, oldest second first:
second passed  refused errors   avg RT
    0s      5        3      5     16ms
    1s      5        3      5     12ms
    2s      5        3      0     20ms
GET /orders since start: 15 passed, 9 refused (9 by flow rules, 0 by circuit breakers), 10 errors
payments since start: 9 passed, 6 refused (0 by flow rules, 6 by circuit breakers), 4 errors
`
