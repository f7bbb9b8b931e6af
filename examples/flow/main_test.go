package main

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the example: on its manual clocks every run prints exactly
// this, whatever the host's speed, and nothing is left running.
func TestRun(t *testing.T) {
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}

const want = `Four rules of 10/s under the same traffic: requests admitted per second
second offered       reject       pacing      warm-up token-bucket
     0      20           10           10            3           20
     1      20           10           10            3           19
     2      20           10           10            4           10
     3      20           10           10            5           10
     4      20           10           10            8           10
     5      20           10           10           10           10
     6       0            0            0            0            0
     7       0            0            0            0            0
     8      30           10            1            3           20
  reject:       at most 10 in the sliding window, the burst's first 10
  pacing:       one per 100 ms, so one of a burst at one instant
  warm-up:      10/3 while cold, 10 after the 5 s warm-up, cold again after the quiet spell
  token-bucket: the 20 stored tokens on top of 10/s, and 20 at once after the quiet spell

Throttle, 10/s, waiting at most 500 ms: 8 callers arrive together at 0 ms
    0s  admitted at once
    0s  refused at once: wait 600ms exceeds max queueing 500ms, retry after 100ms
    0s  refused at once: wait 600ms exceeds max queueing 500ms, retry after 100ms
 100ms  admitted after waiting 100ms
 200ms  admitted after waiting 200ms
 300ms  admitted after waiting 300ms
 400ms  admitted after waiting 400ms
 500ms  admitted after waiting 500ms

Concurrency rules as bulkheads: 2 in flight per dependency
  inventory admitted (1 in flight)
  inventory admitted (2 in flight)
  inventory refused: sluice: blocked by flow rule on "inventory": observed 2, threshold 2
  payments  admitted (1 in flight)
  inventory call returns
  inventory admitted (2 in flight)
`
