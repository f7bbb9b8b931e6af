package sluicehttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluice-go/sluice"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	"github.com/sluice-go/sluice/rules"
)

// discard is a reusable ResponseWriter, so the benchmarks measure the
// middleware rather than a recorder's allocations.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkMiddleware compares a routed request served bare with the same
// request behind the middleware (one passing QPS rule on the route), wrapped
// around the route and around the mux.
func BenchmarkMiddleware(b *testing.B) {
	g := sluice.New()
	b.Cleanup(func() { _ = g.Close() })
	err := g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "GET /users/{id}", Threshold: 1e9}}})
	if err != nil {
		b.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mw := sluicehttp.Middleware(g)
	bare := http.NewServeMux()
	bare.Handle("GET /users/{id}", ok)
	route := http.NewServeMux()
	route.Handle("GET /users/{id}", mw(ok))
	// The same route with the caller read from a header, with the RateLimit
	// fields, and with both: what each option adds to a request.
	routeWith := func(opts ...sluicehttp.Option) http.Handler {
		m := http.NewServeMux()
		m.Handle("GET /users/{id}", sluicehttp.Middleware(g, opts...)(ok))
		return m
	}
	caller := sluicehttp.WithCaller(sluicehttp.CallerSource{Header: "X-Caller"})
	headers := sluicehttp.WithRateLimitHeaders(false)
	tests := []struct {
		name string
		h    http.Handler
	}{
		{"bare", bare},
		{"sluice-route", route},
		{"sluice-mux", mw(bare)},
		{"sluice-route-caller", routeWith(caller)},
		{"sluice-route-headers", routeWith(headers)},
		{"sluice-route-caller-headers", routeWith(caller, headers)},
	}
	b.Run("entry-exit-only", func(b *testing.B) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			p, err := g.EntryContext(ctx, "GET /users/{id}", sluice.WithTraffic(sluice.Inbound))
			if err != nil {
				b.Fatal(err)
			}
			p.Exit()
		}
	})
	for _, tt := range tests {
		b.Run(tt.name, func(b *testing.B) {
			req := httptest.NewRequest("GET", "/users/42", nil)
			req.Header.Set("X-Caller", "billing")
			w := &discard{h: http.Header{}}
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				tt.h.ServeHTTP(w, req)
			}
			reportCPU(b, cpu)
		})
	}
}
