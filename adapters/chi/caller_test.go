package sluicechi_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	sluicechi "github.com/sluice-go/sluice/adapters/chi"
	"github.com/sluice-go/sluice/adapters/chi/internal/adaptertest"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

func newEngine(t *testing.T) (*sluice.Engine, *sluicetest.ManualClock) {
	t.Helper()
	clk := sluicetest.NewManualClock(int64(time.Hour))
	g := sluice.New(sluice.WithClock(clk))
	t.Cleanup(func() { require.NoError(t, g.Close()) })
	return g, clk
}

func newRouter(g *sluice.Engine, opts ...sluicechi.Option) chi.Router {
	r := chi.NewRouter()
	r.Use(recoverer, sluicechi.Middleware(g, opts...))
	r.Get("/users/{id}", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("user")) })
	r.Post("/users/{id}", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) })
	r.Get("/health", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	return r
}

func postUser(t *testing.T, c *http.Client, u, caller string) int {
	t.Helper()
	req, err := http.NewRequest("POST", u+"/users/1", nil)
	require.NoError(t, err)
	if caller != "" {
		req.Header.Set("X-Caller", caller)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestCallerFromHeader: the net/http adapter's WithCaller, through chi's
// middleware, reads the caller from a header on the route's pattern; 403
// for a caller an authority rule refuses, 400 for one no entry may carry
// (not counted).
func TestCallerFromHeader(t *testing.T) {
	g, _ := newEngine(t)
	require.NoError(t, g.LoadRules(rules.Set{Authority: []rules.Authority{{Resource: "POST /users/{id}", Deny: []string{"mallory"}, Strict: true}}}))
	srv, c := adaptertest.Serve(t, newRouter(g, sluicehttp.WithCaller(sluicehttp.CallerSource{Header: "X-Caller"})))
	assert.Equal(t, 201, postUser(t, c, srv.URL, "checkout"))
	assert.Equal(t, 403, postUser(t, c, srv.URL, "mallory"))
	assert.Equal(t, 403, postUser(t, c, srv.URL, ""))
	assert.Equal(t, 400, postUser(t, c, srv.URL, strings.Repeat("x", 300)))
	s, _ := g.Snapshot("POST /users/{id}")
	assert.Equal(t, uint64(1), s.TotalPass)
	assert.Equal(t, uint64(2), s.BlockedBy[sluice.BlockAuthority])
	assert.Equal(t, uint64(2), s.TotalBlock)
}

// TestRateLimitHeaders: the net/http adapter's WithRateLimitHeaders,
// through chi's middleware: every response of a route under a rate rule,
// passed or refused (429 with Retry-After), carries the fields of a model
// of the rule, at adversarial instants on a manual clock; without the
// option, none.
func TestRateLimitHeaders(t *testing.T) {
	g, clk := newEngine(t)
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{
		{ID: "users", Resource: "GET /users/{id}", Threshold: 3},
		{Resource: "GET /health", Threshold: 3},
	}}))
	srv, c := adaptertest.Serve(t, newRouter(g, sluicehttp.WithRateLimitHeaders(true)))
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

	srv, c = adaptertest.Serve(t, newRouter(g))
	resp, err := c.Get(srv.URL + "/health")
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Empty(t, adaptertest.RateLimitHeaders(resp.Header))
}
