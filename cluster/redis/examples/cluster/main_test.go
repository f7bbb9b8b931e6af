package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestRun builds the example and runs it as a user would, on a shorter
// script (seven seconds, Redis down in seconds 3 and 4), and checks the
// table: while Redis decides, the fleet admits at most 300 per second in
// total (at least 250 once the leases are warm: alice's refused requests
// have spent API permits, about 25 a second) and alice at most 50; the
// seconds Redis is down are the fallback's, and Redis decides again within
// three seconds of its restart (a restart and a probe on a busy host), and
// from the first whole second it decides on, within the limits plus what
// leases hold.
func TestRun(t *testing.T) {
	defer goleak.VerifyNone(t)
	if _, err := exec.LookPath("redis-server"); err != nil {
		msg := "redis-server not on PATH: install Redis (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis) to run this test"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	bin := filepath.Join(t.TempDir(), "cluster")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, goBin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	const (
		seconds  = 10
		down, up = 3, 5
	)
	var out bytes.Buffer
	// A one-second Timeout: on a busy host (CI runs this beside -race
	// tests) a store call can take over the demo's 100 ms, which is not
	// what this test checks; a stopped Redis refuses connections at once,
	// so the fallback still starts at the first call after the stop.
	cmd := exec.CommandContext(ctx, bin, "-seconds", strconv.Itoa(seconds), "-down", strconv.Itoa(down), "-up", strconv.Itoa(up), "-timeout", "1s")
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())

	type row struct {
		total, alice int
		mode         string
	}
	var rows []row
	for _, l := range strings.Split(out.String(), "\n") {
		f := strings.Fields(l)
		if len(f) != 7 || f[0] == "second" {
			continue
		}
		sec, err1 := strconv.Atoi(f[0])
		total, err2 := strconv.Atoi(f[4])
		alice, err3 := strconv.Atoi(f[5])
		if err1 != nil || err2 != nil || err3 != nil || sec != len(rows) {
			t.Fatalf("malformed row %q", l)
		}
		sum := 0
		for _, x := range f[1:4] {
			n, err := strconv.Atoi(x)
			if err != nil {
				t.Fatalf("malformed row %q", l)
			}
			sum += n
		}
		if sum != total {
			t.Errorf("second %d: instances sum to %d, total says %d", sec, sum, total)
		}
		rows = append(rows, row{total, alice, f[6]})
	}
	if len(rows) != seconds {
		t.Fatalf("%d rows, want %d", len(rows), seconds)
	}
	// The first second that ends in remote mode after Redis came back.
	recovered := -1
	for s := up; s < len(rows); s++ {
		if rows[s].mode == "remote" {
			recovered = s
			break
		}
	}
	if recovered < 0 || recovered > up+3 {
		t.Errorf("Redis restarted in second %d; remote mode again in second %d, want within 3 seconds", up, recovered)
	}
	for s, r := range rows {
		switch {
		case s < down: // Redis decides
			if r.mode != "remote" {
				t.Errorf("second %d: mode %s, want remote", s, r.mode)
			}
			if r.total > 300 || r.alice > 50 {
				t.Errorf("second %d: admitted %d (alice %d), limits 300 (50)", s, r.total, r.alice)
			}
			if s > 0 && r.total < 250 {
				t.Errorf("second %d: admitted %d, want at least 250 of 300", s, r.total)
			}
		case s < up: // Redis is down
			if r.mode != "fallback" {
				t.Errorf("second %d: mode %s, want fallback while Redis is down", s, r.mode)
			}
		case s > up && s >= recovered: // Redis decides again
			// Redis's windows restarted within a second, not on one: an
			// aligned second then holds the end of one window and the
			// start of the next, and admits up to the limit plus the
			// permits held in leases at its start (docs/design/cluster.md,
			// Accuracy), about a tenth of the limit at this rate.
			if r.mode != "remote" {
				t.Errorf("second %d: mode %s after Redis decided again in second %d", s, r.mode, recovered)
			}
			if r.total > 330 || r.alice > 55 {
				t.Errorf("second %d: admitted %d (alice %d), limits 300 (50) plus a tenth in leases", s, r.total, r.alice)
			}
		}
	}
}
