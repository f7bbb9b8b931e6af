package sluicefiber_test

import (
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/sluice-go/sluice"
	sluicefiber "github.com/sluice-go/sluice/adapters/fiber"
	"github.com/sluice-go/sluice/rules"
)

// FuzzArgs feeds arbitrary path parameters, raw queries and header values
// through a fiber app with the middleware on the route and param rules on
// each argument: nothing panics, and the arguments are what fiber gives the
// handler (Params, Query, Get), nil for empty.
func FuzzArgs(f *testing.F) {
	f.Add("42", "q=a", "alice")
	f.Add("%2F", "q=%zz&q=b", "")
	f.Add("é", "a=1;q=2&q=3", " ")
	f.Add("", "q", "\xff")
	f.Add("..", "q=+x+&q=y", "a\x00b")
	f.Fuzz(func(t *testing.T, id, rawQuery, user string) {
		g := sluice.New()
		defer g.Close()
		res := "GET /users/:id"
		var ps []rules.Param
		for i := range 3 {
			ps = append(ps, rules.Param{Resource: res, Index: i, Threshold: 1e9})
		}
		require.NoError(t, g.LoadRules(rules.Set{Param: ps}))
		var got, want [3]any
		extract := func(i int, f sluicefiber.ArgFunc) sluicefiber.ArgFunc {
			return func(c *fiber.Ctx) any { got[i] = f(c); return got[i] }
		}
		orNil := func(s string) any {
			if s == "" {
				return nil
			}
			return s
		}
		served := false
		app := fiber.New(fiber.Config{DisableStartupMessage: true})
		mw := sluicefiber.Middleware(g, sluicefiber.WithArgs(extract(0, sluicefiber.Param("id")),
			extract(1, sluicefiber.Header("x-user")), extract(2, sluicefiber.Query("q"))))
		app.Get("/users/:id", mw, func(c *fiber.Ctx) error {
			served = true
			want = [3]any{orNil(c.Params("id")), orNil(c.Get("X-User")), orNil(c.Query("q"))}
			return nil
		})
		var fc fasthttp.RequestCtx
		fc.Request.Header.SetMethod("GET")
		fc.Request.SetRequestURI("/users/" + id + "?" + rawQuery)
		fc.Request.Header.Set("X-User", user)
		app.Handler()(&fc)
		if served {
			require.Equal(t, want, got)
			s, ok := g.Snapshot(res)
			require.True(t, ok)
			require.Equal(t, uint64(1), s.TotalPass)
		}
	})
}
