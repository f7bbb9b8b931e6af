package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the demo for a second: it stops by itself, and what it
// prints is the service's own /metrics.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out, time.Second, 0); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	t.Log(got)
	for _, want := range []string{
		`sluice_passed_total{resource="GET /orders"}`,
		`sluice_passed_total{resource="POST /pay"}`,
		`sluice_breaker_state{resource="POST /pay",rule="pay-errors"}`,
		`sluice_breaker_transitions_total{resource="POST /pay",rule="pay-errors",to="open"}`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %s", want)
		}
	}
	// 20 a second pass on GET /orders; the load sends more, whatever the
	// host's speed, unless it manages fewer than 20 in the second.
	m := regexp.MustCompile(`sent (\d+) requests`).FindStringSubmatch(got)
	if m == nil {
		t.Fatal("no request count")
	}
	if n, _ := strconv.Atoi(m[1]); n > 100 && !strings.Contains(got, `sluice_blocked_total{resource="GET /orders",type="flow"}`) {
		t.Errorf("%d requests sent and none refused by the flow rule", n)
	}
}
