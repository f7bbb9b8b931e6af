package sluicehttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	"github.com/sluice-go/sluice/rules"
)

// unwrapper stands for another middleware between the two: it wraps the
// writer and unwraps for http.ResponseController.
type unwrapper struct{ http.ResponseWriter }

func (u unwrapper) Unwrap() http.ResponseWriter { return u.ResponseWriter }

// TestMiddlewareOnMuxAndRouteCountsOnce: the middleware around the mux and
// around a route, on the same engine, enters each request once: one pass
// counted, and a concurrency limit of 1 is not taken twice by one request.
// Another engine, or another resource name inside, still counts (layered
// limits).
func TestMiddlewareOnMuxAndRouteCountsOnce(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	between := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(unwrapper{w}, r) })
	}
	const res = "GET /users/{id}"
	passes := func(g *sluice.Engine, name string) uint64 {
		s, _ := g.Snapshot(name)
		return s.TotalPass
	}

	for _, tc := range []struct {
		name  string
		inner func(g *sluice.Engine) func(http.Handler) http.Handler
	}{
		{"directly", func(g *sluice.Engine) func(http.Handler) http.Handler { return sluicehttp.Middleware(g) }},
		{"through a wrapping middleware", func(g *sluice.Engine) func(http.Handler) http.Handler {
			return func(h http.Handler) http.Handler { return between(sluicehttp.Middleware(g)(h)) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, _ := newEngine(t)
			err := g.LoadRules(rules.Set{Flow: []rules.Flow{{Metric: rules.Concurrency, Resource: res, Threshold: 1}}})
			require.NoError(t, err)
			mux := http.NewServeMux()
			mux.Handle(res, tc.inner(g)(ok))
			h := sluicehttp.Middleware(g)(mux)
			for i := 1; i <= 3; i++ {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest("GET", "/users/42", nil))
				require.Equal(t, http.StatusOK, w.Code, "request %d refused by its own outer entry", i)
				assert.Equal(t, uint64(i), passes(g, res))
			}
		})
	}

	t.Run("another resource or engine counts", func(t *testing.T) {
		g, _ := newEngine(t)
		other, _ := newEngine(t)
		mux := http.NewServeMux()
		mux.Handle(res, sluicehttp.Middleware(other)(ok))
		mux.Handle("GET /a", sluicehttp.Middleware(g, sluicehttp.WithResourceName(func(*http.Request) string { return "a" }))(ok))
		h := sluicehttp.Middleware(g)(mux)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/users/42", nil))
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/a", nil))
		assert.Equal(t, uint64(1), passes(g, res))
		assert.Equal(t, uint64(1), passes(other, res))
		assert.Equal(t, uint64(1), passes(g, "GET /a"))
		assert.Equal(t, uint64(1), passes(g, "a"))
	})
}
