package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestRun runs the example and checks that both engines ran both versions
// and reported the second.
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
	if err := run(&out, bin); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	for _, want := range []string{
		"version 1 saved by ops", "shop-1: GET /orders at 100/s", "shop-2: GET /orders at 100/s",
		"version 2 saved by ops", "shop-2: POST /orders at 20/s",
		"report: shop-1 runs version 2", "report: shop-2 runs version 2", "history: 2 versions, newest 2",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
