package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestRun runs the example on a shorter script and checks its table: never
// more than 5 slots in use, and after instance c died, a and b holding
// all 5 (c's slots came back).
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
	// After c died, a and b alone hold all 5 at some sample: c's slots came
	// back.
	_, after, ok := strings.Cut(out.String(), "died")
	if !ok {
		t.Fatal("no death in the output")
	}
	back := false
	for _, l := range strings.Split(after, "\n") {
		var a, b int
		if i := strings.Index(l, "(a "); i >= 0 {
			if _, err := fmt.Sscanf(l[i:], "(a %d, b %d)", &a, &b); err == nil && a+b == limit {
				back = true
			}
		}
	}
	if !back {
		t.Error("a and b never held all 5 after c died")
	}
}
