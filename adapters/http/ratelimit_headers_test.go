package sluicehttp_test

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	"github.com/sluice-go/sluice/adapters/http/internal/adaptertest"
	"github.com/sluice-go/sluice/rules"
)

// TestRateLimitHeaders: through a real server on loopback, every response
// of a route under a rate rule, passed or refused (429 with Retry-After),
// carries the RateLimit fields and, when asked, the X-RateLimit ones, with
// the values of a model of the rule; requests arrive at adversarial
// instants on a manual clock (on, just before and just after bucket
// boundaries, and at the same instant).
func TestRateLimitHeaders(t *testing.T) {
	g, clk := newEngine(t)
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{{ID: "items", Resource: "GET /items", Threshold: 3}}}))
	mux := http.NewServeMux()
	mux.Handle("GET /items", sluicehttp.Middleware(g, sluicehttp.WithRateLimitHeaders(true))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})))
	srv, c := serve(t, mux)
	m := &adaptertest.WindowModel{ID: "items", Limit: 3}
	steps := []time.Duration{0, 0, 0, 0, 99 * time.Millisecond, time.Millisecond, 850 * time.Millisecond, 49 * time.Millisecond, time.Millisecond, 0, 0, 2 * time.Second, 0}
	for i, d := range steps {
		clk.Advance(d)
		ok, want := m.Decide(clk.Nanotime())
		resp, err := c.Get(srv.URL + "/items")
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
}

// TestRateLimitHeadersOff: without the option, and on a resource without
// a rate rule, no RateLimit field is sent; without xRateLimit only the
// draft's two are.
func TestRateLimitHeadersOff(t *testing.T) {
	g, _ := newEngine(t)
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{
		{Resource: "GET /items", Threshold: 3},
		{Resource: "GET /held", Threshold: 3, Metric: rules.Concurrency},
	}}))
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux := http.NewServeMux()
	mux.Handle("GET /items", sluicehttp.Middleware(g)(ok))
	mux.Handle("GET /draft", sluicehttp.Middleware(g, sluicehttp.WithResourceName(func(*http.Request) string { return "GET /items" }), sluicehttp.WithRateLimitHeaders(false))(ok))
	mux.Handle("GET /held", sluicehttp.Middleware(g, sluicehttp.WithRateLimitHeaders(true))(ok))
	srv, c := serve(t, mux)
	header := func(path string) http.Header {
		resp, err := c.Get(srv.URL + path)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return adaptertest.RateLimitHeaders(resp.Header)
	}
	assert.Empty(t, header("/items"))
	assert.Empty(t, header("/held"), "a concurrency rule is not a rate")
	assert.Equal(t, http.Header{"Ratelimit-Policy": {`"default";q=3;w=1`}, "Ratelimit": {`"default";r=1;t=1`}}, header("/draft"))
}
