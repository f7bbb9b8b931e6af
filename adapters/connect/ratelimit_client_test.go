package sluiceconnect_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	sluiceconnect "github.com/sluice-go/sluice/adapters/connect"
	"github.com/sluice-go/sluice/adapters/connect/internal/adaptertest"
	"github.com/sluice-go/sluice/rules"
)

// TestRateLimitHeadersClient: a client's own outbound rule (3 per second,
// on a manual clock) tells its budget where the caller reads the
// server's: a call that passes has the server's fields then the client's
// in its response headers, a call the client refuses (ResourceExhausted,
// never sent) the client's alone in its error's metadata, exact against a
// model at adversarial instants; a client stream the client refuses too.
func TestRateLimitHeadersClient(t *testing.T) {
	sg, _ := newEngine(t)
	require.NoError(t, sg.LoadRules(rules.Set{Flow: []rules.Flow{{ID: "srv", Resource: payProc, Threshold: 1000}}}))
	srv, hc := adaptertest.Serve(t, payMux(sg, sluiceconnect.WithRateLimitHeaders(false)))
	g, clk := newEngine(t)
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{
		{ID: "mine", Resource: payProc, Threshold: 3},
		{ID: "streams", Resource: streamProc, Threshold: 1},
	}}))
	ic := connect.WithInterceptors(sluiceconnect.NewInterceptor(g, sluiceconnect.WithRateLimitHeaders(true)))
	client := connect.NewClient[msg, msg](hc, srv.URL+payProc, ic)
	m := &adaptertest.WindowModel{ID: "mine", Limit: 3}
	served := 0
	steps := []time.Duration{0, 0, 0, 0, 99 * time.Millisecond, time.Millisecond, 850 * time.Millisecond, 49 * time.Millisecond, time.Millisecond, 0, 0, 2 * time.Second, 0}
	for i, d := range steps {
		clk.Advance(d)
		ok, want := m.Decide(clk.Nanotime())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := client.CallUnary(ctx, connect.NewRequest(wrapperspb.String("1")))
		cancel()
		where := fmt.Sprintf("call %d at %v", i, time.Duration(clk.Nanotime()))
		if ok {
			served++
			require.NoError(t, err, where)
			h := resp.Header()
			assert.Equal(t, []string{`"srv";q=1000;w=1`, want.Get("RateLimit-Policy")}, h.Values("RateLimit-Policy"), where)
			assert.Equal(t, want.Get("RateLimit"), h.Values("RateLimit")[1], where)
			assert.Equal(t, []string{want.Get("X-RateLimit-Remaining")}, h.Values("X-RateLimit-Remaining"), "%s: the server sends no X- fields", where)
		} else {
			var ce *connect.Error
			require.True(t, errors.As(err, &ce), where)
			require.Equal(t, connect.CodeResourceExhausted, ce.Code(), where)
			assert.Equal(t, want, adaptertest.RateLimitHeaders(ce.Meta()), where)
		}
	}
	snap, _ := sg.Snapshot(payProc)
	assert.Equal(t, uint64(served), snap.TotalPass, "the server saw only what the client admitted")

	sc := connect.NewClient[msg, msg](hc, srv.URL+streamProc, ic)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := sc.CallServerStream(ctx, connect.NewRequest(wrapperspb.String("")))
	require.NoError(t, err)
	_, err = sc.CallServerStream(ctx, connect.NewRequest(wrapperspb.String("")))
	var ce *connect.Error
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Equal(t, connect.CodeResourceExhausted, ce.Code())
	assert.Equal(t, `"streams";q=1;w=1`, ce.Meta().Get("RateLimit-Policy"))
	assert.Equal(t, `"streams";r=0;t=1`, ce.Meta().Get("RateLimit"))
	require.NoError(t, st.Close())
}
