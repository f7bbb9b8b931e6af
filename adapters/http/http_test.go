package sluicehttp_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	"github.com/sluice-go/sluice/adapters/http/internal/adaptertest"
	"github.com/sluice-go/sluice/internal/refusal"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
	"github.com/sluice-go/sluice/stat"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newEngine returns an engine on a manual clock, closed when the test ends.
func newEngine(t *testing.T) (*sluice.Engine, *sluicetest.ManualClock) {
	t.Helper()
	clk := sluicetest.NewManualClock(int64(time.Hour))
	g := sluice.New(sluice.WithClock(clk))
	t.Cleanup(func() { require.NoError(t, g.Close()) })
	return g, clk
}

// serve starts a real server on 127.0.0.1 and returns it with a client that
// does not keep idle connections (so goleak sees none after the test).
// The helpers both HTTP adapters' tests share (adaptertest).
var (
	serve    = adaptertest.Serve
	get      = adaptertest.Get
	snapshot = adaptertest.Snapshot
)

type response = adaptertest.Response

func userHandler(w http.ResponseWriter, r *http.Request) {
	_, _ = io.WriteString(w, "user "+r.PathValue("id"))
}

// routes builds the test mux, with the middleware around each route (route)
// or around the whole mux (mux).
func routes(g *sluice.Engine, wrapMux bool, opts ...sluicehttp.Option) http.Handler {
	mw := sluicehttp.Middleware(g, opts...)
	wrap := mw
	if wrapMux {
		wrap = func(h http.Handler) http.Handler { return h }
	}
	mux := http.NewServeMux()
	mux.Handle("GET /users/{id}", wrap(http.HandlerFunc(userHandler)))
	mux.Handle("POST /users/{id}", wrap(http.HandlerFunc(userHandler)))
	mux.Handle("/files/", wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "file")
	})))
	mux.Handle("GET /health", wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})))
	mux.Handle("/dirs/{name}/", wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "dir "+r.PathValue("name"))
	})))
	if wrapMux {
		return mw(mux)
	}
	return mux
}

func TestFlowRuleOnRoute(t *testing.T) {
	for _, wrapMux := range []bool{false, true} {
		t.Run(map[bool]string{false: "wrap route", true: "wrap mux"}[wrapMux], func(t *testing.T) {
			g, _ := newEngine(t)
			err := g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "GET /users/{id}", Threshold: 2}}})
			require.NoError(t, err)
			srv, c := serve(t, routes(g, wrapMux))

			tests := []struct {
				path string
				want response
			}{
				{"/users/1", response{Status: 200, Body: "user 1"}},
				{"/users/2", response{Status: 200, Body: "user 2"}},
				{"/users/3", response{Status: 429, Body: "Too Many Requests", RetryAfter: "1"}},
				{"/users/4", response{Status: 429, Body: "Too Many Requests", RetryAfter: "1"}},
				{"/health", response{Status: 200, Body: "ok"}},
			}
			for _, tt := range tests {
				assert.Equal(t, tt.want, get(t, c, "GET", srv.URL+tt.path), "GET %s", tt.path)
			}
			pass, block, _, conc := snapshot(t, g, "GET /users/{id}")
			assert.Equal(t, uint64(2), pass)
			assert.Equal(t, uint64(2), block)
			assert.Zero(t, conc)
		})
	}
}

func TestRetryAfterRoundsUp(t *testing.T) {
	tests := []struct {
		give time.Duration
		want int64
	}{
		{0, 0},
		{-time.Second, 0},
		{time.Nanosecond, 1},
		{time.Second, 1},
		{time.Second + time.Millisecond, 2},
		{90 * time.Second, 90},
		{time.Duration(1<<63 - 1), 9223372037}, // no overflow
	}
	for _, tt := range tests {
		err := error(&sluice.BlockError{Type: sluice.BlockFlow, RetryAfter: tt.give})
		assert.Equal(t, tt.want, refusal.RetryAfterSeconds(err), "RetryAfterSeconds(%v)", tt.give)
	}
	assert.Zero(t, refusal.RetryAfterSeconds(errors.New("other")))
}

func TestRouteTemplatesNameResources(t *testing.T) {
	tests := []struct {
		method, path string
		want         string
	}{
		{"GET", "/users/1", "GET /users/{id}"},
		{"GET", "/users/2", "GET /users/{id}"},
		{"HEAD", "/users/3", "GET /users/{id}"}, // the pattern that serves it
		{"POST", "/users/4", "POST /users/{id}"},
		{"GET", "/files/a/b.txt", "GET /files/"},
		{"HEAD", "/files/a/b.txt", "GET /files/"}, // as a "GET" pattern would
		{"DELETE", "/files/c", "DELETE /files/"},
		{"PROPFIND", "/files/d", "OTHER /files/"},
		{"GET", "/no/such/page", refusal.NoRoute},
		{"DELETE", "/users/5", refusal.NoRoute}, // 405
	}
	for _, wrapMux := range []bool{false, true} {
		t.Run(map[bool]string{false: "wrap route", true: "wrap mux"}[wrapMux], func(t *testing.T) {
			g, _ := newEngine(t)
			srv, c := serve(t, routes(g, wrapMux))
			want := map[string]uint64{}
			for _, tt := range tests {
				get(t, c, tt.method, srv.URL+tt.path)
				if wrapMux || tt.want != refusal.NoRoute { // a route-wrapped mux never sees 404s
					want[tt.want]++
				}
			}
			for name, n := range want {
				pass, _, _, _ := snapshot(t, g, name)
				assert.Equal(t, n, pass, "passes of %q", name)
			}
			assert.Equal(t, len(want), resources(g), "one resource per route, not per path")
			_, ok := g.Snapshot("GET /users/1")
			assert.False(t, ok, "raw paths of routed requests must not name resources")
		})
	}
}

// TestHeadCountsAgainstGetRoute: ServeMux serves HEAD with a "GET" pattern,
// so a rule on that route must count HEAD requests too.
func TestHeadCountsAgainstGetRoute(t *testing.T) {
	for _, wrapMux := range []bool{false, true} {
		t.Run(map[bool]string{false: "wrap route", true: "wrap mux"}[wrapMux], func(t *testing.T) {
			g, _ := newEngine(t)
			err := g.LoadRules(rules.Set{Flow: []rules.Flow{
				{Resource: "GET /users/{id}", Threshold: 2},
				{Resource: "GET /files/", Threshold: 1},
			}})

			require.NoError(t, err)
			srv, c := serve(t, routes(g, wrapMux))
			tests := []struct {
				method, path string
				want         int
			}{
				{"GET", "/users/1", 200},
				{"HEAD", "/users/2", 200},
				{"HEAD", "/users/3", 429},
				{"GET", "/users/4", 429},
				{"HEAD", "/files/a", 200},
				{"HEAD", "/files/b", 429},
				{"GET", "/files/c", 429},
			}
			for _, tt := range tests {
				assert.Equal(t, tt.want, get(t, c, tt.method, srv.URL+tt.path).Status, "%s %s", tt.method, tt.path)
			}
			pass, block, _, _ := snapshot(t, g, "GET /users/{id}")
			assert.Equal(t, [2]uint64{2, 2}, [2]uint64{pass, block}, "GET /users/{id}: pass, block")
			pass, block, _, _ = snapshot(t, g, "GET /files/")
			assert.Equal(t, [2]uint64{1, 2}, [2]uint64{pass, block}, "GET /files/: pass, block")
			assert.Equal(t, 2, resources(g), "no HEAD resources")
		})
	}
}

// TestUnmatchedScanIsOneResource scans 10,000 distinct paths that no route
// serves, with common and made-up methods, over one keep-alive connection:
// the engine must end up with one resource for all of them, plus one for
// the odd methods a method-less pattern serves.
func TestUnmatchedScanIsOneResource(t *testing.T) {
	const n = 10_000
	g, _ := newEngine(t)
	srv := httptest.NewServer(routes(g, true))
	tr := &http.Transport{}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
	})
	c := &http.Client{
		Transport:     tr,
		Timeout:       10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	common := []string{"GET", "HEAD", "POST", "DELETE"}
	want := map[string]uint64{}
	statuses := map[int]int{}
	for i := range n {
		odd := fmt.Sprintf("X%d", i) // a made-up method, new every time
		var method, path, res string
		switch i % 5 {
		case 0: // 404
			method, path, res = common[i/5%len(common)], fmt.Sprintf("/scan/%d", i), refusal.NoRoute
		case 1: // 404 with an odd method
			method, path, res = odd, fmt.Sprintf("/scan/%d", i), refusal.NoRoute
		case 2: // 405: "GET /users/{id}" and "POST /users/{id}" only
			method, path, res = odd, fmt.Sprintf("/users/%d", i), refusal.NoRoute
		case 3: // served by "/files/", which has no method
			method, path, res = odd, fmt.Sprintf("/files/%d", i), "OTHER /files/"
		case 4: // the mux's own redirect to "/dirs/<i>/"
			method, path, res = "CONNECT", fmt.Sprintf("/dirs/%d", i), refusal.NoRoute
		}
		req, err := http.NewRequest(method, srv.URL+path, nil)
		require.NoError(t, err)
		resp, err := c.Do(req)
		require.NoError(t, err, "%s %s", method, path)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses[resp.StatusCode]++
		want[res]++
	}
	assert.Equal(t, map[int]int{404: 2 * n / 5, 405: n / 5, 200: n / 5, 307: n / 5}, statuses)
	require.Equal(t, len(want), resources(g), "resources after the scan")
	for name, count := range want {
		pass, block, _, conc := snapshot(t, g, name)
		assert.Equal(t, count, pass, "passes of %q", name)
		assert.Zero(t, block)
		assert.Zero(t, conc)
	}
}

func TestResourceNameOption(t *testing.T) {
	g, _ := newEngine(t)
	name := func(r *http.Request) string {
		if r.URL.Path == "/health" {
			return "" // unguarded
		}
		return "api"
	}
	srv, c := serve(t, routes(g, true, sluicehttp.WithResourceName(name)))
	assert.Equal(t, 200, get(t, c, "GET", srv.URL+"/users/1").Status)
	assert.Equal(t, 200, get(t, c, "POST", srv.URL+"/users/1").Status)
	assert.Equal(t, 200, get(t, c, "GET", srv.URL+"/health").Status)
	pass, _, _, _ := snapshot(t, g, "api")
	assert.Equal(t, uint64(2), pass)
	assert.Equal(t, 1, resources(g))
}

func TestHandlerFailuresAreRecorded(t *testing.T) {
	tests := []struct {
		name     string
		status   int
		opts     []sluicehttp.Option
		wantErrs uint64
	}{
		{"200", 200, nil, 0},
		{"404 is the client's", 404, nil, 0},
		{"500", 500, nil, 1},
		{"503", 503, nil, 1},
		{"404 with WithErrorStatus", 404, []sluicehttp.Option{sluicehttp.WithErrorStatus(func(s int) bool { return s >= 400 })}, 1},
		{"503 with WithErrorStatus", 503, []sluicehttp.Option{sluicehttp.WithErrorStatus(func(s int) bool { return s == 404 })}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, _ := newEngine(t)
			h := sluicehttp.Middleware(g, tt.opts...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusEarlyHints) // informational: not the final status
				w.WriteHeader(tt.status)
			}))
			mux := http.NewServeMux()
			mux.Handle("GET /x", h)
			srv, c := serve(t, mux)
			assert.Equal(t, tt.status, get(t, c, "GET", srv.URL+"/x").Status)
			pass, _, errs, conc := snapshot(t, g, "GET /x")
			assert.Equal(t, uint64(1), pass)
			assert.Equal(t, tt.wantErrs, errs)
			assert.Zero(t, conc)
		})
	}
}

func TestPanicExitsEntry(t *testing.T) {
	recovery := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if v := recover(); v != nil {
					http.Error(w, "recovered", http.StatusInternalServerError)
				}
			}()
			next.ServeHTTP(w, r)
		})
	}
	boom := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { panic("boom") })
	tests := []struct {
		name       string
		recovery   bool
		wantStatus int
	}{
		{"recovery middleware", true, 500},
		{"net/http server recovers", false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, _ := newEngine(t)
			h := sluicehttp.Middleware(g)(boom)
			if tt.recovery {
				h = recovery(h)
			}
			mux := http.NewServeMux()
			mux.Handle("GET /boom", h)
			srv, c := serve(t, mux)
			resp, err := c.Get(srv.URL + "/boom")
			if tt.wantStatus == 0 {
				require.Error(t, err, "the server drops the connection of a panicking handler")
			} else {
				require.NoError(t, err)
				resp.Body.Close()
				assert.Equal(t, tt.wantStatus, resp.StatusCode)
			}
			pass, _, errs, conc := snapshot(t, g, "GET /boom")
			assert.Equal(t, uint64(1), pass)
			assert.Equal(t, uint64(1), errs, "a panic is recorded as an error")
			assert.Zero(t, conc, "a panic must release concurrency")
		})
	}
}

func TestConcurrencyHeldWhileInFlight(t *testing.T) {
	g, _ := newEngine(t)
	err := g.LoadRules(rules.Set{Flow: []rules.Flow{{Metric: rules.Concurrency, Resource: "GET /slow", Threshold: 1}}})
	require.NoError(t, err)
	entered, release := make(chan struct{}), make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		_, _ = io.WriteString(w, "done")
	})
	srv, c := serve(t, sluicehttp.Middleware(g)(mux))

	type result struct {
		status int
		err    error
	}
	first := make(chan result, 1)
	go func() { // no require here: FailNow belongs to the test goroutine
		resp, err := c.Get(srv.URL + "/slow")
		if err == nil {
			resp.Body.Close()
			first <- result{status: resp.StatusCode}
			return
		}
		first <- result{err: err}
	}()
	<-entered
	_, _, _, conc := snapshot(t, g, "GET /slow")
	assert.Equal(t, int64(1), conc)
	// A full concurrency limit is overload: 503, and the default wait, as
	// the isolation rule cannot tell when a slot frees.
	assert.Equal(t, response{Status: 503, Body: "Service Unavailable", RetryAfter: "1"}, get(t, c, "GET", srv.URL+"/slow"))
	close(release)
	assert.Equal(t, result{status: 200}, <-first)
	_, _, _, conc = snapshot(t, g, "GET /slow")
	assert.Zero(t, conc)
}

func TestBlockHandlerOption(t *testing.T) {
	g, _ := newEngine(t)
	err := g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "GET /x", Threshold: 1}}})
	require.NoError(t, err)
	var seen *sluice.BlockError
	block := func(w http.ResponseWriter, r *http.Request, err error) {
		require.ErrorAs(t, err, &seen)
		http.Error(w, "shed", http.StatusServiceUnavailable)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /x", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "x") })
	srv, c := serve(t, sluicehttp.Middleware(g, sluicehttp.WithBlockHandler(block))(mux))
	assert.Equal(t, response{Status: 200, Body: "x"}, get(t, c, "GET", srv.URL+"/x"))
	assert.Equal(t, response{Status: 503, Body: "shed"}, get(t, c, "GET", srv.URL+"/x"))
	require.NotNil(t, seen)
	assert.Equal(t, sluice.BlockFlow, seen.Type)
	assert.Equal(t, "GET /x", seen.Resource)
}

func TestClosedEngineFailsOpen(t *testing.T) {
	g, _ := newEngine(t)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /x", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "x") })
	srv, c := serve(t, sluicehttp.Middleware(g)(mux))
	require.NoError(t, g.Close())
	assert.Equal(t, response{Status: 200, Body: "x"}, get(t, c, "GET", srv.URL+"/x"))
}

func TestNilEngineUsesDefault(t *testing.T) {
	t.Cleanup(func() { require.NoError(t, sluice.SetDefault(nil).Close()) })
	err := sluice.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "GET /x", Threshold: 1}}})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /x", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "x") })
	srv, c := serve(t, sluicehttp.Middleware(nil)(mux))
	assert.Equal(t, 200, get(t, c, "GET", srv.URL+"/x").Status)
	assert.Equal(t, 429, get(t, c, "GET", srv.URL+"/x").Status)
}

func TestWriterKeepsFlushAndHijack(t *testing.T) {
	g, _ := newEngine(t)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		_, ok := w.(http.Flusher)
		require.True(t, ok, "the wrapped writer must stay an http.Flusher")
		_, _ = io.WriteString(w, "a")
		require.NoError(t, http.NewResponseController(w).Flush())
		_, _ = io.WriteString(w, "b")
	})
	mux.HandleFunc("GET /raw", func(w http.ResponseWriter, r *http.Request) {
		conn, rw, err := w.(http.Hijacker).Hijack()
		require.NoError(t, err)
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 3\r\nConnection: close\r\n\r\nraw")
		require.NoError(t, rw.Flush())
	})
	mux.HandleFunc("GET /copy", func(w http.ResponseWriter, r *http.Request) {
		_, err := w.(io.ReaderFrom).ReadFrom(strings.NewReader("copied"))
		require.NoError(t, err)
	})
	// A hijacked connection's client can read the whole response before the
	// handler (and so the middleware's Exit) returns: the outer handler
	// tells when the middleware is done, so the snapshot below never races
	// the Exit.
	rawDone := make(chan struct{})
	protected := sluicehttp.Middleware(g)(mux)
	srv, c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protected.ServeHTTP(w, r)
		if r.URL.Path == "/raw" {
			close(rawDone)
		}
	}))
	assert.Equal(t, response{Status: 200, Body: "ab"}, get(t, c, "GET", srv.URL+"/stream"))
	assert.Equal(t, response{Status: 503, Body: "raw"}, get(t, c, "GET", srv.URL+"/raw"))
	<-rawDone
	assert.Equal(t, response{Status: 200, Body: "copied"}, get(t, c, "GET", srv.URL+"/copy"))
	for _, res := range []string{"GET /stream", "GET /raw", "GET /copy"} {
		pass, _, errs, conc := snapshot(t, g, res)
		assert.Equal(t, uint64(1), pass, res)
		assert.Zero(t, errs, "%s: a hijacked connection's status is not the handler's to report", res)
		assert.Zero(t, conc, res)
	}
}

func TestArgExtractors(t *testing.T) {
	mux := http.NewServeMux()
	var got []any
	mux.HandleFunc("GET /users/{id}", func(w http.ResponseWriter, r *http.Request) {
		got = []any{
			sluicehttp.ClientIP()(r),
			sluicehttp.Header("x-tenant")(r),
			sluicehttp.Header("X-Absent")(r),
			sluicehttp.PathValue("id")(r),
			sluicehttp.PathValue("nope")(r),
		}
	})
	srv, c := serve(t, mux)
	req, err := http.NewRequest("GET", srv.URL+"/users/42", nil)
	require.NoError(t, err)
	req.Header.Set("X-Tenant", "acme")
	resp, err := c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, []any{"127.0.0.1", "acme", nil, "42", nil}, got)
}

// resources counts the resources the engine tracks.
func resources(g *sluice.Engine) int {
	n := 0
	g.Each(func(string, stat.Snapshot) { n++ })
	return n
}
