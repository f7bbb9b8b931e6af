package sluicefiber_test

import (
	"context"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/sluice-go/sluice"
	sluicefiber "github.com/sluice-go/sluice/adapters/fiber"
	"github.com/sluice-go/sluice/rules"
)

// BenchmarkMiddleware compares a fiber route served bare with the same
// route behind the middleware (one passing QPS rule): installed on the
// route, on the route with a param rule on the path parameter, and with
// Use (which looks the route up, here past one other route). It shows the
// engine's own Entry+Exit in the same run.
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
	ok := func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) }
	app := func(use fiber.Handler, route ...fiber.Handler) fasthttp.RequestHandler {
		a := fiber.New(fiber.Config{DisableStartupMessage: true})
		if use != nil {
			a.Use(use)
		}
		a.Get("/x", ok)
		a.Get("/users/:id", append(route, ok)...)
		return a.Handler()
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
		h    fasthttp.RequestHandler
	}{
		{"bare", app(nil)},
		{"sluice-route", app(nil, sluicefiber.Middleware(g))},
		{"sluice-route-args", app(nil, sluicefiber.Middleware(g, sluicefiber.WithArgs(sluicefiber.Param("id"))))},
		{"sluice-use", app(sluicefiber.Middleware(g))},
	}
	for _, tt := range tests {
		b.Run(tt.name, func(b *testing.B) {
			var fc fasthttp.RequestCtx
			fc.Request.Header.SetMethod("GET")
			fc.Request.SetRequestURI("/users/42")
			b.ReportAllocs()
			for b.Loop() {
				tt.h(&fc)
			}
		})
	}
}
