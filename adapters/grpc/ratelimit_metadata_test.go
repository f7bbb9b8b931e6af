package sluicegrpc_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice"
	sluicegrpc "github.com/sluice-go/sluice/adapters/grpc"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

// budgetServer runs the echo service on 127.0.0.1 with the server
// interceptors of an engine on a manual clock, with opts, and dials it.
func budgetServer(t *testing.T, opts ...sluicegrpc.Option) (*sluice.Engine, *sluicetest.ManualClock, *grpc.ClientConn) {
	t.Helper()
	clk := sluicetest.NewManualClock(int64(time.Hour))
	g := sluice.New(sluice.WithClock(clk))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := grpc.NewServer(
		grpc.UnaryInterceptor(sluicegrpc.UnaryServerInterceptor(g, opts...)),
		grpc.StreamInterceptor(sluicegrpc.StreamServerInterceptor(g, opts...)),
	)
	s.RegisterService(&serviceDesc, &echo{})
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, conn.Close())
		s.Stop()
		require.NoError(t, <-served)
		require.NoError(t, g.Close())
	})
	return g, clk, conn
}

// rateLimitMD returns the RateLimit keys of md.
func rateLimitMD(md metadata.MD) metadata.MD {
	out := metadata.MD{}
	for _, k := range []string{"ratelimit-policy", "ratelimit", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"} {
		if v := md.Get(k); len(v) > 0 {
			out[k] = v
		}
	}
	return out
}

// TestRateLimitMetadata: through a real server on loopback, an admitted
// unary call carries the RateLimit keys in its header metadata and a
// refused one (ResourceExhausted) in its trailer, with the values of a
// model of the token bucket (3 tokens, one per 100 ms, counted in
// nanoseconds of credit) at adversarial instants on a manual clock; a
// stream gets them in its header.
func TestRateLimitMetadata(t *testing.T) {
	g, clk, conn := budgetServer(t, sluicegrpc.WithRateLimitMetadata(true))
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{
		{ID: "tb", Resource: unaryMethod, Threshold: 10, Bucket: &rules.Bucket{Burst: 3}},
		{Resource: bidiMethod, Threshold: 5},
	}}))
	const cost, capacity = int64(100 * time.Millisecond), 3 * int64(100*time.Millisecond)
	credit, at := capacity, clk.Nanotime()
	steps := []time.Duration{0, 0, 0, 0, 99 * time.Millisecond, time.Millisecond, 100 * time.Millisecond, 0, 0, 250 * time.Millisecond, time.Second, 0}
	for i, d := range steps {
		clk.Advance(d)
		now := clk.Nanotime()
		credit, at = min(capacity, credit+now-at), now
		ok := credit >= cost
		if ok {
			credit -= cost
		}
		secs := (capacity - credit + int64(time.Second) - 1) / int64(time.Second)
		want := metadata.Pairs(
			"ratelimit-policy", `"tb";q=3;w=1`,
			"ratelimit", fmt.Sprintf(`"tb";r=%d;t=%d`, credit/cost, secs),
			"x-ratelimit-limit", "3", "x-ratelimit-remaining", fmt.Sprint(credit/cost), "x-ratelimit-reset", fmt.Sprint(secs))
		var header, trailer metadata.MD
		err := conn.Invoke(context.Background(), unaryMethod, wrapperspb.String("x"), new(wrapperspb.StringValue), grpc.Header(&header), grpc.Trailer(&trailer))
		where := fmt.Sprintf("call %d at %v", i, time.Duration(now))
		if ok {
			require.NoError(t, err, where)
			assert.Equal(t, want, rateLimitMD(header), where)
		} else {
			require.Equal(t, codes.ResourceExhausted, status.Code(err), where)
			assert.Equal(t, want, rateLimitMD(trailer), where)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := conn.NewStream(ctx, &serviceDesc.Streams[0], bidiMethod)
	require.NoError(t, err)
	require.NoError(t, st.SendMsg(wrapperspb.String("y")))
	require.NoError(t, st.RecvMsg(new(wrapperspb.StringValue)))
	hdr, err := st.Header()
	require.NoError(t, err)
	assert.Equal(t, metadata.Pairs("ratelimit-policy", `"default";q=5;w=1`, "ratelimit", `"default";r=4;t=1`,
		"x-ratelimit-limit", "5", "x-ratelimit-remaining", "4", "x-ratelimit-reset", "1"), rateLimitMD(hdr))
	require.NoError(t, st.CloseSend())
}

// TestRateLimitMetadataOff: without the option no RateLimit key is sent.
func TestRateLimitMetadataOff(t *testing.T) {
	g, _, conn := budgetServer(t)
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: unaryMethod, Threshold: 10}}}))
	var header, trailer metadata.MD
	require.NoError(t, conn.Invoke(context.Background(), unaryMethod, wrapperspb.String("x"), new(wrapperspb.StringValue), grpc.Header(&header), grpc.Trailer(&trailer)))
	assert.Empty(t, rateLimitMD(header))
	assert.Empty(t, rateLimitMD(trailer))
}
