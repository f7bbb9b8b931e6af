package sluicechi_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	sluicechi "github.com/sluice-go/sluice/adapters/chi"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	"github.com/sluice-go/sluice/rules"
)

// FuzzArgs feeds arbitrary path parameters, raw queries and header values
// through a router with the middleware and param rules on each argument:
// nothing panics, and the arguments are what chi and net/http give the
// handler (chi.URLParam, url.Values.Get, Header.Get), nil for empty.
func FuzzArgs(f *testing.F) {
	f.Add("42", "q=a", "alice")
	f.Add("%2F", "q=%zz&q=b", "")
	f.Add("é", "a=1;q=2&q=3", " ")
	f.Add("", "q", "\xff")
	f.Add("..", "q=+x+&q=y", "a\x00b")
	f.Fuzz(func(t *testing.T, id, rawQuery, user string) {
		req := httptest.NewRequest("GET", "/", nil)
		req.URL = &url.URL{Path: "/users/" + id, RawQuery: rawQuery}
		req.Header.Set("X-User", user)

		g := sluice.New()
		defer g.Close()
		res := "GET /users/{id}"
		var ps []rules.Param
		for i := range 3 {
			ps = append(ps, rules.Param{Resource: res, Index: i, Threshold: 1e9})
		}
		require.NoError(t, g.LoadRules(rules.Set{Param: ps}))
		var got [3]any
		extract := func(i int, f sluicehttp.ArgFunc) sluicehttp.ArgFunc {
			return func(r *http.Request) any { got[i] = f(r); return got[i] }
		}
		served := false
		var want [3]any
		orNil := func(s string) any {
			if s == "" {
				return nil
			}
			return s
		}
		r := chi.NewRouter()
		r.Use(sluicechi.Middleware(g, sluicehttp.WithArgs(
			extract(0, sluicechi.URLParam("id")), extract(1, sluicechi.Header("x-user")), extract(2, sluicechi.Query("q")))))
		r.Get("/users/{id}", func(w http.ResponseWriter, r *http.Request) {
			served = true
			want = [3]any{orNil(chi.URLParam(r, "id")), orNil(r.Header.Get("X-User")), orNil(r.URL.Query().Get("q"))}
		})
		r.ServeHTTP(httptest.NewRecorder(), req)
		if served {
			require.Equal(t, want, got)
			s, ok := g.Snapshot(res)
			require.True(t, ok)
			require.Equal(t, uint64(1), s.TotalPass)
		}
	})
}
