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

const want = `    0s GET  /items 200  RateLimit: "reads";r=4;t=1  X-RateLimit-Remaining: 4  X-RateLimit-Reset: 1
    0s GET  /items 200  RateLimit: "reads";r=3;t=1  X-RateLimit-Remaining: 3  X-RateLimit-Reset: 1
    0s GET  /items 200  RateLimit: "reads";r=2;t=1  X-RateLimit-Remaining: 2  X-RateLimit-Reset: 1
    0s GET  /items 200  RateLimit: "reads";r=1;t=1  X-RateLimit-Remaining: 1  X-RateLimit-Reset: 1
    0s GET  /items 200  RateLimit: "reads";r=0;t=1  X-RateLimit-Remaining: 0  X-RateLimit-Reset: 1
    0s GET  /items 429  RateLimit: "reads";r=0;t=1  X-RateLimit-Remaining: 0  X-RateLimit-Reset: 1  Retry-After: 1
 600ms GET  /items 429  RateLimit: "reads";r=0;t=1  X-RateLimit-Remaining: 0  X-RateLimit-Reset: 1  Retry-After: 1
    1s GET  /items 200  RateLimit: "reads";r=4;t=1  X-RateLimit-Remaining: 4  X-RateLimit-Reset: 1
    1s POST /items 200  RateLimit: "writes";r=2;t=1  X-RateLimit-Remaining: 2  X-RateLimit-Reset: 1
    1s POST /items 200  RateLimit: "writes";r=1;t=1  X-RateLimit-Remaining: 1  X-RateLimit-Reset: 1
    1s POST /items 200  RateLimit: "writes";r=0;t=2  X-RateLimit-Remaining: 0  X-RateLimit-Reset: 2
    1s POST /items 429  RateLimit: "writes";r=0;t=2  X-RateLimit-Remaining: 0  X-RateLimit-Reset: 2  Retry-After: 1
  1.5s POST /items 200  RateLimit: "writes";r=0;t=2  X-RateLimit-Remaining: 0  X-RateLimit-Reset: 2
policies: GET "reads";q=5;w=1, POST "writes";q=3;w=2
`
