package rls

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/sluicetest"
)

// TestRulesCallerKey: with CallerKey the api_key entry is the caller:
// per-caller flow rules count each caller (one of its own, the others
// each apart), an authority rule refuses one, also on another
// descriptor of its request, and a caller no entry can name is refused
// as an invalid argument. Exact counts on a manual clock.
func TestRulesCallerKey(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rules.yaml")
	doc := `flow:
  - resource: edge/api_key
    caller: gold
    threshold: 5
  - resource: edge/api_key
    caller: other
    threshold: 2
authority:
  - resource: edge/api_key
    deny: [stolen]
  - resource: edge/path
    deny: [stolen]
`
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	clk := sluicetest.NewManualClock(int64(time.Hour))
	srv := startServer(t, ServerOptions{Rules: file, Service: Options{CallerKey: "api_key"}, EngineOptions: []sluice.Option{sluice.WithClock(clk)}})
	c := pb.NewRateLimitServiceClient(dial(t, srv.addr))
	for _, tc := range []struct {
		key      string
		n, admit int
	}{{"gold", 7, 5}, {"k1", 3, 2}, {"k2", 3, 2}, {"stolen", 2, 0}} {
		if ok, _ := ask(t, c, tc.n, "api_key", tc.key); ok != tc.admit {
			t.Errorf("caller %s: %d of %d admitted, want %d", tc.key, ok, tc.n, tc.admit)
		}
	}
	if ok, _ := ask(t, c, 3, "path", "/x"); ok != 3 {
		t.Errorf("no caller: %d of 3 admitted", ok)
	}
	entry := func(k, v string) *rlv3.RateLimitDescriptor {
		return &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
	}
	resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "edge",
		Descriptors: []*rlv3.RateLimitDescriptor{entry("path", "/x"), entry("api_key", "stolen")}})
	if err != nil || resp.Statuses[0].Code != pb.RateLimitResponse_OVER_LIMIT || resp.Statuses[1].Code != pb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("the request's caller on its other descriptor: %v %v", resp, err)
	}
	_, err = c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{entry("api_key", "bad\x01key")}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("a caller with a control character: %v", err)
	}
}
