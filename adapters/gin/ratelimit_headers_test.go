package sluicegin_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicegin "github.com/sluice-go/sluice/adapters/gin"
	"github.com/sluice-go/sluice/adapters/gin/internal/adaptertest"
	"github.com/sluice-go/sluice/rules"
)

// TestRateLimitHeaders: through a real server on loopback, every response
// of a route under a rate rule, passed or refused (429 with Retry-After),
// carries the RateLimit fields and the X-RateLimit ones with the values of
// a model of the rule, at adversarial instants on a manual clock; without
// the option, none.
func TestRateLimitHeaders(t *testing.T) {
	g, clk := newEngine(t)
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{
		{ID: "users", Resource: "GET /users/:id", Threshold: 3},
		{Resource: "GET /health", Threshold: 3},
	}}))
	srv, c := serve(t, newRouter(g, sluicegin.WithRateLimitHeaders(true)))
	m := &adaptertest.WindowModel{ID: "users", Limit: 3}
	steps := []time.Duration{0, 0, 0, 0, 99 * time.Millisecond, time.Millisecond, 850 * time.Millisecond, 49 * time.Millisecond, time.Millisecond, 0, 0, 2 * time.Second, 0}
	for i, d := range steps {
		clk.Advance(d)
		ok, want := m.Decide(clk.Nanotime())
		resp, err := c.Get(srv.URL + "/users/7")
		require.NoError(t, err)
		_ = resp.Body.Close()
		where := fmt.Sprintf("request %d at %v", i, time.Duration(clk.Nanotime()))
		if ok {
			require.Equal(t, http.StatusOK, resp.StatusCode, where)
		} else {
			require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, where)
			assert.NotEmpty(t, resp.Header.Get("Retry-After"), where)
		}
		assert.Equal(t, want, adaptertest.RateLimitHeaders(resp.Header), where)
	}

	srv, c = serve(t, newRouter(g))
	resp, err := c.Get(srv.URL + "/health")
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Empty(t, adaptertest.RateLimitHeaders(resp.Header))
}
