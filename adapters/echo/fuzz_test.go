package sluiceecho_test

import (
	"net"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	sluiceecho "github.com/sluice-go/sluice/adapters/echo"
	"github.com/sluice-go/sluice/rules"
)

// FuzzArgs feeds arbitrary path parameters, raw queries, header values and
// client addresses through an echo server with the middleware and param
// rules on each argument: nothing panics, and the arguments are what echo
// gives the handler (Param, QueryParam, Header.Get, the address's host),
// nil for empty.
func FuzzArgs(f *testing.F) {
	f.Add("42", "q=a", "alice", "192.0.2.1:1234")
	f.Add("%2F", "q=%zz&q=b", "", "[2001:db8::1]:80")
	f.Add("é", "a=1;q=2&q=3", " ", "no-port")
	f.Add("", "q", "\xff", "")
	f.Add("..", "q=+x+&q=y", "a\x00b", ":80")
	f.Fuzz(func(t *testing.T, id, rawQuery, user, addr string) {
		req := httptest.NewRequest("GET", "/", nil)
		req.URL = &url.URL{Path: "/users/" + id, RawQuery: rawQuery}
		req.RemoteAddr = addr
		req.Header.Set("X-User", user)

		g := sluice.New()
		defer g.Close()
		res := "GET /users/:id"
		var ps []rules.Param
		for i := range 4 {
			ps = append(ps, rules.Param{Resource: res, Index: i, Threshold: 1e9})
		}
		require.NoError(t, g.LoadRules(rules.Set{Param: ps}))
		var got, want [4]any
		extract := func(i int, f sluiceecho.ArgFunc) sluiceecho.ArgFunc {
			return func(c echo.Context) any { got[i] = f(c); return got[i] }
		}
		orNil := func(s string) any {
			if s == "" {
				return nil
			}
			return s
		}
		served := false
		e := echo.New()
		e.Use(sluiceecho.Middleware(g, sluiceecho.WithArgs(extract(0, sluiceecho.Param("id")),
			extract(1, sluiceecho.Header("x-user")), extract(2, sluiceecho.Query("q")), extract(3, sluiceecho.ClientIP()))))
		e.GET("/users/:id", func(c echo.Context) error {
			served = true
			host := c.Request().RemoteAddr
			if h, _, err := net.SplitHostPort(host); err == nil {
				host = h
			}
			want = [4]any{orNil(c.Param("id")), orNil(c.Request().Header.Get("X-User")), orNil(c.QueryParam("q")), orNil(host)}
			return nil
		})
		e.ServeHTTP(httptest.NewRecorder(), req)
		if served {
			require.Equal(t, want, got)
			s, ok := g.Snapshot(res)
			require.True(t, ok)
			require.Equal(t, uint64(1), s.TotalPass)
		}
	})
}
