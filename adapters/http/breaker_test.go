package sluicehttp_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sync/atomic"

	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	"github.com/sluice-go/sluice/rules"
)

// TestCircuitBreakerOpensAndRecovers drives a breaker through the
// middleware: 5xx responses open it, it refuses with 503 and the time left,
// and after its retry timeout a successful probe closes it.
func TestCircuitBreakerOpensAndRecovers(t *testing.T) {
	g, clk := newEngine(t)
	err := g.UpdateRules(func(s *rules.Set) {
		s.CircuitBreaker = []rules.CircuitBreaker{{
			Resource: "GET /flaky", Strategy: rules.ErrorCount, Threshold: 2,
			MinRequestAmount: 1, RetryTimeout: 5 * time.Second,
		}}
	})

	require.NoError(t, err)
	var failing atomic.Bool
	served := new(atomic.Int64)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /flaky", func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		if failing.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "up")
	})
	srv, c := serve(t, sluicehttp.Middleware(g)(mux))

	tests := []struct {
		name       string
		advance    time.Duration
		failing    bool
		want       response
		wantServed int64
	}{
		{"first failure", 0, true, response{Status: 503, Body: "down"}, 1},
		{"second failure opens", 0, true, response{Status: 503, Body: "down"}, 2},
		{"open: refused with the time left", 0, false, response{Status: 503, Body: "Service Unavailable", RetryAfter: "5"}, 2},
		{"open: still refused", 3 * time.Second, false, response{Status: 503, Body: "Service Unavailable", RetryAfter: "2"}, 2},
		{"half-open: probe succeeds", 2 * time.Second, false, response{Status: 200, Body: "up"}, 3},
		{"closed again", 0, false, response{Status: 200, Body: "up"}, 4},
	}
	for _, tt := range tests {
		clk.Advance(tt.advance)
		failing.Store(tt.failing)
		assert.Equal(t, tt.want, get(t, c, "GET", srv.URL+"/flaky"), tt.name)
		assert.Equal(t, tt.wantServed, served.Load(), tt.name)
	}
	_, _, errs, conc := snapshot(t, g, "GET /flaky")
	assert.Equal(t, uint64(2), errs)
	assert.Zero(t, conc)
}

// TestParamRuleOnPathValue limits each user id separately.
func TestParamRuleOnPathValue(t *testing.T) {
	g, _ := newEngine(t)
	err := g.UpdateRules(func(s *rules.Set) { s.Param = []rules.Param{{Resource: "GET /users/{id}", Threshold: 1}} })
	require.NoError(t, err)
	mw := sluicehttp.Middleware(g, sluicehttp.WithArgs(sluicehttp.PathValue("id")))
	mux := http.NewServeMux()
	mux.Handle("GET /users/{id}", mw(http.HandlerFunc(userHandler)))
	srv, c := serve(t, mux)
	tests := []struct {
		path       string
		wantStatus int
	}{
		{"/users/1", 200},
		{"/users/1", 429},
		{"/users/2", 200},
		{"/users/1", 429},
		{"/users/3", 200},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.wantStatus, get(t, c, "GET", srv.URL+tt.path).Status, "GET %s", tt.path)
	}
}
