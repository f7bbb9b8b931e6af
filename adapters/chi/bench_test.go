package sluicechi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/sluice-go/sluice"
	sluicechi "github.com/sluice-go/sluice/adapters/chi"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	"github.com/sluice-go/sluice/rules"
)

// discard is a reusable ResponseWriter, so the benchmarks measure the
// middleware rather than a recorder's allocations.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkMiddleware compares a chi route served bare with the same route
// behind the middleware (one passing QPS rule), with and without a param
// rule on the path parameter, and shows the engine's own Entry+Exit in the
// same run.
func BenchmarkMiddleware(b *testing.B) {
	g := sluice.New()
	b.Cleanup(func() { _ = g.Close() })
	err := g.LoadRules(rules.Set{
		Flow:  []rules.Flow{{Resource: "GET /users/{id}", Threshold: 1e9}},
		Param: []rules.Param{{Resource: "GET /users/{id}", Index: 0, Threshold: 1e9}},
	})
	if err != nil {
		b.Fatal(err)
	}
	ok := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }
	router := func(mw ...func(http.Handler) http.Handler) http.Handler {
		r := chi.NewRouter()
		r.Use(mw...)
		r.Get("/users/{id}", ok)
		return r
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
	tests := []struct {
		name string
		h    http.Handler
	}{
		{"bare", router()},
		{"sluice", router(sluicechi.Middleware(g))},
		{"sluice-args", router(sluicechi.Middleware(g, sluicehttp.WithArgs(sluicechi.URLParam("id"))))},
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
