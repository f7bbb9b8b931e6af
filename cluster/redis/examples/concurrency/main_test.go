package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestRun runs the example on a shorter script and checks its table: never
// more than 5 slots in use, and after instance c died, the last line has
// a and b holding all 5 (c's slots came back within their lease).
func TestRun(t *testing.T) {
	defer goleak.VerifyNone(t)
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redis-server not on PATH: install Redis (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis) to run this test"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	var out bytes.Buffer
	if err := run(&out, bin, 1500*time.Millisecond, 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	if strings.Contains(out.String(), "OVER THE LIMIT") {
		t.Error("more than 5 slots in use")
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.Contains(last, "slots in use 5/5") || strings.Contains(last, "c ") {
		t.Errorf("last line %q: want 5/5 held by a and b", last)
	}
}
