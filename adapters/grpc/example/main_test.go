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

// TestRun runs the example on a manual clock, which stays in one second:
// 2 of 4 Check calls pass, a second Watch stream is refused while the first
// is open and admitted after it ends (run itself fails on other counts).
func TestRun(t *testing.T) {
	var out strings.Builder
	if err := run(&out, sluice.WithClock(sluicetest.NewManualClock(int64(time.Hour)))); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	want := []string{
		"Check #2 -> SERVING",
		"Check #3 -> ResourceExhausted",
		"Check #4 -> ResourceExhausted",
		"Watch #2 while #1 is open -> Unavailable",
		"Watch #1 ended -> Canceled",
		"Watch #3 after #1 ended -> open",
		"2 passed, 2 blocked",
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
}
