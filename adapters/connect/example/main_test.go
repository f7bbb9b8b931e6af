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
// the first 3 calls pass, the other 3 fail with resource_exhausted and a
// retry delay (run itself fails unless exactly 3 passed).
func TestRun(t *testing.T) {
	var out strings.Builder
	if err := run(&out, sluice.WithClock(sluicetest.NewManualClock(int64(time.Hour)))); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	want := []string{
		"Greet(caller-1) -> hello caller-1",
		"Greet(caller-3) -> hello caller-3",
		"Greet(caller-4) -> resource_exhausted (retry in ",
		"Greet(caller-6) -> resource_exhausted",
		`resource "/example.v1.Greeter/Greet": 3 passed, 3 blocked`,
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
}
