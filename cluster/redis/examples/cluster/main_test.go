package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestRun runs a shorter script (four seconds, Redis down in the second
// one) and checks the table's shape; the figures depend on the host.
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
	p := plan{seconds: 4, down: 1, up: 2, demand: 200, limit: 300, instances: 3, serverBinary: bin}
	if err := run(&out, p); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	lines := strings.Split(out.String(), "\n")
	var rows [][]string
	for _, l := range lines {
		if f := strings.Split(l, "\t"); len(f) == 6 && f[0] != "second" {
			rows = append(rows, f)
		}
	}
	if len(rows) != p.seconds {
		t.Fatalf("%d rows, want %d", len(rows), p.seconds)
	}
	if rows[0][5] != "remote" || rows[1][5] != "fallback" {
		t.Errorf("modes %q, %q: want remote, then fallback while Redis is down", rows[0][5], rows[1][5])
	}
}
