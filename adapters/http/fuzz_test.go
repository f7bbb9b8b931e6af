package sluicehttp_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	"github.com/sluice-go/sluice/rules"
)

// FuzzArgs feeds arbitrary client addresses, header values and paths to the
// argument extractors, alone and through the middleware with param rules on
// each argument: nothing panics, each extractor gives what its doc says,
// and a request a rule does not refuse reaches the handler with the
// arguments the rules counted.
func FuzzArgs(f *testing.F) {
	f.Add("192.0.2.1:1234", "alice", "42")
	f.Add("[2001:db8::1]:80", "", "")
	f.Add("", " ", "%2F")
	f.Add("no-port", "a\x00b", "é/ü")
	f.Add(":80", "\xff", "..")
	f.Fuzz(func(t *testing.T, addr, user, id string) {
		r := &http.Request{Method: "GET", URL: &url.URL{Path: "/users/" + id}, RemoteAddr: addr, Header: http.Header{}}
		r.Header.Set("X-User", user)

		want := any(nil)
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		if host != "" {
			want = host
		}
		require.Equal(t, want, sluicehttp.ClientIP()(r))
		want = nil
		if v := r.Header.Get("X-User"); v != "" {
			want = v
		}
		require.Equal(t, want, sluicehttp.Header("x-user")(r))
		require.Nil(t, sluicehttp.PathValue("id")(r), "an unrouted request has no path values")

		g := sluice.New()
		defer g.Close()
		err = g.LoadRules(rules.Set{Param: []rules.Param{
			{Resource: "GET /users/{id}", Index: 0, Threshold: 1e9},
			{Resource: "GET /users/{id}", Index: 1, Threshold: 1e9},
			{Resource: "GET /users/{id}", Index: 2, Threshold: 1e9},
		}})

		require.NoError(t, err)
		served := false
		mux := http.NewServeMux()
		mux.Handle("GET /users/{id}", sluicehttp.Middleware(g,
			sluicehttp.WithArgs(sluicehttp.ClientIP(), sluicehttp.Header("X-User"), sluicehttp.PathValue("id")),
		)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served = true })))
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if served {
			s, ok := g.Snapshot("GET /users/{id}")
			require.True(t, ok)
			require.Equal(t, uint64(1), s.TotalPass)
		}
	})
}
