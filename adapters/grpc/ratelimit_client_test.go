package sluicegrpc_test

import (
	"context"
	"fmt"
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

// TestRateLimitMetadataClient: a client's own outbound rule (a token
// bucket of 3, one per 100 ms, on a manual clock) tells its budget where
// the caller reads the server's: an admitted unary call's grpc.Header has
// the server's policy then the client's, a call the client refuses
// (ResourceExhausted, the server never asked) has the client's in its
// grpc.Trailer, exact against a model at adversarial instants; so does a
// refused stream. A call given neither option asks for no budget.
func TestRateLimitMetadataClient(t *testing.T) {
	srv, _, conn := budgetServer(t, sluicegrpc.WithRateLimitMetadata(false))
	require.NoError(t, srv.LoadRules(rules.Set{Flow: []rules.Flow{{ID: "srv", Resource: unaryMethod, Threshold: 1000}}}))
	clk := sluicetest.NewManualClock(int64(time.Hour))
	g := sluice.New(sluice.WithClock(clk))
	defer g.Close()
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{
		{ID: "mine", Resource: unaryMethod, Threshold: 10, Bucket: &rules.Bucket{Burst: 3}},
		{ID: "streams", Resource: bidiMethod, Threshold: 1},
	}}))
	cc, err := grpc.NewClient(conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(sluicegrpc.UnaryClientInterceptor(g, sluicegrpc.WithRateLimitMetadata(true))),
		grpc.WithStreamInterceptor(sluicegrpc.StreamClientInterceptor(g, sluicegrpc.WithRateLimitMetadata(false))))
	require.NoError(t, err)
	defer cc.Close()

	const cost, capacity = int64(100 * time.Millisecond), 3 * int64(100*time.Millisecond)
	credit, at := capacity, clk.Nanotime()
	served := 0
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
		mine := []string{`"mine";q=3;w=1`, fmt.Sprintf(`"mine";r=%d;t=%d`, credit/cost, secs), "3", fmt.Sprint(credit / cost), fmt.Sprint(secs)}
		var header, trailer metadata.MD
		err := cc.Invoke(context.Background(), unaryMethod, wrapperspb.String("x"), new(wrapperspb.StringValue), grpc.Header(&header), grpc.Trailer(&trailer))
		where := fmt.Sprintf("call %d at %v", i, time.Duration(now))
		if ok {
			served++
			require.NoError(t, err, where)
			h := rateLimitMD(header)
			require.Len(t, h.Get("ratelimit-policy"), 2, "%s: %v", where, h)
			assert.Equal(t, []string{`"srv";q=1000;w=1`, mine[0]}, h.Get("ratelimit-policy"), where)
			assert.Equal(t, mine[1], h.Get("ratelimit")[1], where)
			assert.Equal(t, []string{mine[2]}, h.Get("x-ratelimit-limit"), "%s: the server sends no X- keys", where)
			assert.Equal(t, []string{mine[3]}, h.Get("x-ratelimit-remaining"), where)
			assert.Equal(t, []string{mine[4]}, h.Get("x-ratelimit-reset"), where)
			assert.Empty(t, rateLimitMD(trailer), where)
		} else {
			require.Equal(t, codes.ResourceExhausted, status.Code(err), where)
			assert.Equal(t, metadata.Pairs("ratelimit-policy", mine[0], "ratelimit", mine[1],
				"x-ratelimit-limit", mine[2], "x-ratelimit-remaining", mine[3], "x-ratelimit-reset", mine[4]), rateLimitMD(trailer), where)
			assert.Empty(t, header, where)
		}
	}
	snap, _ := srv.Snapshot(unaryMethod)
	assert.Equal(t, uint64(served), snap.TotalPass, "the server saw only what the client admitted")

	// Streams: the second is refused by the client, its trailer says why.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := cc.NewStream(ctx, &serviceDesc.Streams[0], bidiMethod)
	require.NoError(t, err)
	var trailer metadata.MD
	_, err = cc.NewStream(ctx, &serviceDesc.Streams[0], bidiMethod, grpc.Trailer(&trailer))
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, metadata.Pairs("ratelimit-policy", `"streams";q=1;w=1`, "ratelimit", `"streams";r=0;t=1`), rateLimitMD(trailer))
	require.NoError(t, st.CloseSend())
	cancel()
}
