//go:build unix

package main

import (
	"bufio"
	"context"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The command prints "listening on HOST:PORT" once it serves, answers
// there, and stops on SIGTERM with a nil error.
func TestCommand(t *testing.T) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run([]string{"-addr", "127.0.0.1:0", "-config", "../../testdata/readme.yaml"}, pw)
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
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), &pb.RateLimitRequest{
		Domain:      "edge_proxy_per_ip",
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "50.0.0.5"}}}},
	})
	if err != nil || resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("blocked address: %v %v", resp, err)
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
}

func TestCommandErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"-config", "missing.yaml"}, {"-bogus"}, {"-config", "x", "extra"}, {"-rules", "missing.yaml"},
		{"-rules", "../../testdata/rules.yaml", "-config", "../../testdata/readme.yaml"},
		{"-config", "../../testdata/readme.yaml", "-caller-key", "api_key"}, {"-rules", "redis://127.0.0.1:1/0"}} {
		if err := run(args, io.Discard); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}
