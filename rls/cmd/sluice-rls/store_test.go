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
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-go/sluice/cluster"
	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
)

// TestCommandRuleStore: the command's flags -rules (a Redis rule store's
// URL), -app, -prefix and -caller-key reach the service: the rules saved
// for the application under the prefix decide, with the api_key entry as
// the caller.
func TestCommandRuleStore(t *testing.T) {
	red := redistest.Start(t)
	store := sluiceredis.NewRuleStore(red.Client(t), sluiceredis.RuleStoreConfig{Prefix: "ops"})
	doc := "authority:\n  - resource: edge/api_key\n    deny: [revoked]\n"
	if _, err := store.Save(context.Background(), "edge-rls", 0, cluster.RuleVersion{Doc: []byte(doc), Author: "ops"}); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run([]string{"-addr", "127.0.0.1:0", "-rules", "redis://" + red.Addr() + "/0", "-app", "edge-rls", "-prefix", "ops", "-caller-key", "api_key"}, pw)
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
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewRateLimitServiceClient(conn)
	for key, want := range map[string]pb.RateLimitResponse_Code{"revoked": pb.RateLimitResponse_OVER_LIMIT, "fine": pb.RateLimitResponse_OK} {
		resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "edge",
			Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "api_key", Value: key}}}}})
		if err != nil || resp.OverallCode != want {
			t.Errorf("api_key %s: %v %v, want %v", key, resp, err, want)
		}
	}
}
