//go:build unix

package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildGrpcurl builds fullstorydev/grpcurl at the version the module
// ../../testdata/grpcurl requires as a tool (it needs Go 1.25, above this
// module's floor), once: go tool caches the binary. It skips saying how
// to run the test when it cannot be built; under CI=true it fails.
func buildGrpcurl(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("go", "tool", "-n", "grpcurl")
	cmd.Dir = "../../testdata/grpcurl"
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := "building grpcurl failed (it needs Go 1.25 or newer and the module proxy, or the modules of rls/testdata/grpcurl/go.sum in the module cache; " +
			"check with: cd rls/testdata/grpcurl && GOWORK=off go tool grpcurl -version)"
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s: %v\n%s", msg, err, stderr.String())
		}
		t.Skipf("%s: %v\n%s", msg, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// TestGrpcurl: grpcurl, a real client knowing nothing of the service but
// what server reflection (-reflection) tells it, lists the service, and
// its calls of ShouldRateLimit on the running command are answered by the
// rule file's exact window: 3 OK in any minute, then OVER_LIMIT.
func TestGrpcurl(t *testing.T) {
	grpcurl := buildGrpcurl(t)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run([]string{"-addr", "127.0.0.1:0", "-rules", "../../testdata/rules.yaml", "-reflection"}, pw)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr) //nolint:errcheck // drains until the pipe closes
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if !ok {
		t.Fatalf("first line %q", line)
	}
	defer func() {
		if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("no exit after SIGTERM")
		}
	}()
	grpc := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(grpcurl, append([]string{"-plaintext", "-max-time", "20"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("grpcurl %q: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := grpc(addr, "list"); !strings.Contains(out, "envoy.service.ratelimit.v3.RateLimitService") {
		t.Fatalf("grpcurl list:\n%s", out)
	}
	const req = `{"domain": "edge", "descriptors": [{"entries": [{"key": "path", "value": "/export"}]}]}`
	for i, want := range []string{"OK", "OK", "OK", "OVER_LIMIT"} {
		out := grpc("-d", req, addr, "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
		if !strings.Contains(out, `"overallCode": "`+want+`"`) {
			t.Fatalf("call %d: want %s, got\n%s", i+1, want, out)
		}
	}
}
