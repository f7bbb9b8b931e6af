package sluicegin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/sluice-go/sluice"
	sluicegin "github.com/sluice-go/sluice/adapters/gin"
	"github.com/sluice-go/sluice/rules"
)

// discard is a reusable ResponseWriter, so the benchmarks measure the
// middleware rather than a recorder's allocations.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkMiddleware compares a gin route served bare with the same route
// behind the middleware (one passing QPS rule), and shows the engine's own
// Entry+Exit in the same run.
func BenchmarkMiddleware(b *testing.B) {
	g := sluice.New()
	b.Cleanup(func() { _ = g.Close() })
	err := g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "GET /users/:id", Threshold: 1e9}}})
	if err != nil {
		b.Fatal(err)
	}
	ok := func(c *gin.Context) { c.Status(http.StatusOK) }
	bare := gin.New()
	bare.GET("/users/:id", ok)
	guarded := gin.New()
	guarded.Use(sluicegin.Middleware(g))
	guarded.GET("/users/:id", ok)

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
		{"bare", bare},
		{"sluice", guarded},
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
