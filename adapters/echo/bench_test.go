package sluiceecho_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/sluice-go/sluice"
	sluiceecho "github.com/sluice-go/sluice/adapters/echo"
	"github.com/sluice-go/sluice/rules"
)

// discard is a reusable ResponseWriter, so the benchmarks measure the
// middleware rather than a recorder's allocations.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkMiddleware compares an echo route served bare with the same
// route behind the middleware (one passing QPS rule), with and without a
// param rule on the path parameter, and shows the engine's own Entry+Exit
// in the same run.
func BenchmarkMiddleware(b *testing.B) {
	g := sluice.New()
	b.Cleanup(func() { _ = g.Close() })
	err := g.LoadRules(rules.Set{
		Flow:  []rules.Flow{{Resource: "GET /users/:id", Threshold: 1e9}},
		Param: []rules.Param{{Resource: "GET /users/:id", Index: 0, Threshold: 1e9}},
	})
	if err != nil {
		b.Fatal(err)
	}
	ok := func(c echo.Context) error { return c.NoContent(http.StatusOK) }
	server := func(mw ...echo.MiddlewareFunc) http.Handler {
		e := echo.New()
		e.Use(mw...)
		e.GET("/users/:id", ok)
		return e
	}
	b.Run("entry-exit-only", func(b *testing.B) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			p, err := g.EntryContext(ctx, "GET /users/:id", sluice.WithTraffic(sluice.Inbound))
			if err != nil {
				b.Fatal(err)
			}
			p.Exit()
		}
	})
	tests := []struct {
		name string
		h    http.Handler
	}{
		{"bare", server()},
		{"sluice", server(sluiceecho.Middleware(g))},
		{"sluice-args", server(sluiceecho.Middleware(g, sluiceecho.WithArgs(sluiceecho.Param("id"))))},
	}
	for _, tt := range tests {
		b.Run(tt.name, func(b *testing.B) {
			req := httptest.NewRequest("GET", "/users/42", nil)
			w := &discard{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				tt.h.ServeHTTP(w, req)
			}
		})
	}
}
