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
// the first 3 requests pass, the other 3 get 429 with Retry-After (run
// itself fails unless exactly 3 passed).
func TestRun(t *testing.T) {
	var out strings.Builder
	if err := run(&out, sluice.WithClock(sluicetest.NewManualClock(int64(time.Hour)))); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	want := []string{
		"GET /users/1 -> 200 user 1",
		"GET /users/3 -> 200 user 3",
		"GET /users/4 -> 429",
		"GET /users/6 -> 429",
		"Retry-After: ",
		`resource "GET /users/:id": 3 passed, 3 blocked`,
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
}
