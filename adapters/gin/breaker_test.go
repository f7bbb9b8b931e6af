package sluicegin_test

import (
	"errors"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sync/atomic"

	sluicegin "github.com/sluice-go/sluice/adapters/gin"
	"github.com/sluice-go/sluice/rules"
)

// TestCircuitBreakerOpensAndRecovers drives a breaker through the
// middleware with errors recorded by the handler (c.Error, status 200): they
// open it, it refuses with 503 and the time left, and after its retry
// timeout a successful probe closes it.
func TestCircuitBreakerOpensAndRecovers(t *testing.T) {
	g, clk := newEngine(t)
	err := g.UpdateRules(func(s *rules.Set) {
		s.CircuitBreaker = []rules.CircuitBreaker{{
			Resource: "GET /orders/:id", Strategy: rules.ErrorRatio, Threshold: 0.5,
			MinRequestAmount: 2, RetryTimeout: 10 * time.Second,
		}}
	})

	require.NoError(t, err)
	var failing atomic.Bool
	served := new(atomic.Int64)
	r := newRouter(g)
	r.GET("/orders/:id", func(c *gin.Context) {
		served.Add(1)
		if failing.Load() {
			_ = c.Error(errors.New("inventory unavailable"))
			c.String(200, "partial")
			return
		}
		c.String(200, "order "+c.Param("id"))
	})
	srv, c := serve(t, r)

	tests := []struct {
		name       string
		path       string
		advance    time.Duration
		failing    bool
		want       response
		wantServed int64
	}{
		{"failure", "/orders/1", 0, true, response{Status: 200, Body: "partial"}, 1},
		{"second failure opens", "/orders/2", 0, true, response{Status: 200, Body: "partial"}, 2},
		{"open: another id is the same resource", "/orders/3", 0, false, response{Status: 503, Body: "Service Unavailable", RetryAfter: "10"}, 2},
		{"open: time left rounds up", "/orders/4", 9500 * time.Millisecond, false, response{Status: 503, Body: "Service Unavailable", RetryAfter: "1"}, 2},
		{"half-open: probe succeeds", "/orders/5", 500 * time.Millisecond, false, response{Status: 200, Body: "order 5"}, 3},
		{"closed again", "/orders/6", 0, false, response{Status: 200, Body: "order 6"}, 4},
	}
	for _, tt := range tests {
		clk.Advance(tt.advance)
		failing.Store(tt.failing)
		assert.Equal(t, tt.want, do(t, c, "GET", srv.URL+tt.path), tt.name)
		assert.Equal(t, tt.wantServed, served.Load(), tt.name)
	}
}

// TestParamRuleOnPathParam limits each id separately.
func TestParamRuleOnPathParam(t *testing.T) {
	g, _ := newEngine(t)
	err := g.UpdateRules(func(s *rules.Set) { s.Param = []rules.Param{{Resource: "GET /users/:id", Threshold: 1}} })
	require.NoError(t, err)
	srv, c := serve(t, newRouter(g, sluicegin.WithArgs(sluicegin.Param("id"))))
	tests := []struct {
		path       string
		wantStatus int
	}{
		{"/users/1", 200},
		{"/users/1", 429},
		{"/users/2", 200},
		{"/users/2", 429},
		{"/users/3", 200},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.wantStatus, do(t, c, "GET", srv.URL+tt.path).Status, "GET %s", tt.path)
	}
}
