package main

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the example: on its manual clock every run prints exactly
// this, and nothing is left running.
func TestRun(t *testing.T) {
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}

const want = `3 calls a month (UTC):
  2026-01-30 10:00:00Z a batch of 2: passed
  2026-01-31 23:59:58Z 1 call:      passed
  2026-01-31 23:59:59Z 1 call:      refused, retry after 1s (quota of 3 per month@UTC used; resets at 2026-02-01T00:00Z)
  2026-02-01 00:00:00Z 1 call:      passed
2 exports a day per user (New York, 2026-11-01 has 25 hours):
  2026-11-01 04:30:00Z ann: passed / passed
  2026-11-01 04:30:00Z ann: refused, retry after 24h30m0s (quota of 2 per day@America/New_York used; resets at 2026-11-02T00:00-05:00)
  2026-11-01 04:30:00Z bob: passed
  2026-11-02 04:59:59Z ann: refused, retry after 1s (quota of 2 per day@America/New_York used; resets at 2026-11-02T00:00-05:00)
  2026-11-02 05:00:00Z ann: passed
`
