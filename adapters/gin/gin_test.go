package sluicegin_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice"
	sluicegin "github.com/sluice-go/sluice/adapters/gin"
	"github.com/sluice-go/sluice/adapters/gin/internal/adaptertest"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
	"github.com/sluice-go/sluice/stat"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	goleak.VerifyTestMain(m)
}

func newEngine(t *testing.T) (*sluice.Engine, *sluicetest.ManualClock) {
	t.Helper()
	clk := sluicetest.NewManualClock(int64(time.Hour))
	g := sluice.New(sluice.WithClock(clk))
	t.Cleanup(func() { require.NoError(t, g.Close()) })
	return g, clk
}

// newRouter returns a gin engine with recovery and the middleware, and the
// routes the tests use.
func newRouter(g *sluice.Engine, opts ...sluicegin.Option) *gin.Engine {
	r := gin.New()
	r.Use(gin.RecoveryWithWriter(io.Discard), sluicegin.Middleware(g, opts...))
	r.GET("/users/:id", func(c *gin.Context) { c.String(200, "user "+c.Param("id")) })
	r.POST("/users/:id", func(c *gin.Context) { c.String(201, "created "+c.Param("id")) })
	r.GET("/files/*path", func(c *gin.Context) { c.String(200, "file") })
	r.GET("/health", func(c *gin.Context) { c.String(200, "ok") })
	r.HEAD("/files/*path", func(c *gin.Context) { c.Status(200) })
	r.GET("/dirs/:name/", func(c *gin.Context) { c.String(200, "dir") })
	return r
}

// The helpers both HTTP adapters' tests share (adaptertest).
var (
	serve    = adaptertest.Serve
	do       = adaptertest.Get
	snapshot = adaptertest.Snapshot
)

type response = adaptertest.Response

func TestFlowRuleOnRoute(t *testing.T) {
	g, _ := newEngine(t)
	err := g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "GET /users/:id", Threshold: 2}}})
	require.NoError(t, err)
	srv, c := serve(t, newRouter(g))
	tests := []struct {
		method, path string
		want         response
	}{
		{"GET", "/users/1", response{Status: 200, Body: "user 1"}},
		{"GET", "/users/2", response{Status: 200, Body: "user 2"}},
		{"GET", "/users/3", response{Status: 429, Body: "Too Many Requests", RetryAfter: "1"}},
		{"GET", "/users/4", response{Status: 429, Body: "Too Many Requests", RetryAfter: "1"}},
		{"POST", "/users/5", response{Status: 201, Body: "created 5"}}, // another resource
		{"GET", "/health", response{Status: 200, Body: "ok"}},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, do(t, c, tt.method, srv.URL+tt.path), "%s %s", tt.method, tt.path)
	}
	pass, block, _, conc := snapshot(t, g, "GET /users/:id")
	assert.Equal(t, uint64(2), pass)
	assert.Equal(t, uint64(2), block)
	assert.Zero(t, conc)
}

func TestRouteTemplatesNameResources(t *testing.T) {
	g, _ := newEngine(t)
	srv, c := serve(t, newRouter(g))
	tests := []struct {
		method, path string
		want         string
	}{
		{"GET", "/users/1", "GET /users/:id"},
		{"GET", "/users/2", "GET /users/:id"},
		{"POST", "/users/3", "POST /users/:id"},
		{"GET", "/files/a/b.txt", "GET /files/*path"},
		{"GET", "/files/c", "GET /files/*path"},
		{"HEAD", "/files/d", "HEAD /files/*path"}, // a HEAD route of its own
		{"HEAD", "/users/4", sluicegin.NoRoute},   // gin serves HEAD with HEAD routes only: 404
		{"GET", "/no/such/page", sluicegin.NoRoute},
		{"PROPFIND", "/users/5", sluicegin.NoRoute},
	}
	want := map[string]uint64{}
	for _, tt := range tests {
		do(t, c, tt.method, srv.URL+tt.path)
		want[tt.want]++
	}
	for name, n := range want {
		pass, _, _, _ := snapshot(t, g, name)
		assert.Equal(t, n, pass, "passes of %q", name)
	}
	assert.Equal(t, len(want), resources(g), "one resource per route, not per path")
}

// TestUnmatchedScanIsOneResource scans 10,000 distinct paths that no route
// serves, with common and made-up methods, over one keep-alive connection:
// the engine must end up with one resource for all of them.
func TestUnmatchedScanIsOneResource(t *testing.T) {
	const n = 10_000
	g, _ := newEngine(t)
	r := newRouter(g)
	r.HandleMethodNotAllowed = true
	srv := httptest.NewServer(r)
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
	statuses := map[int]int{}
	for i := range n {
		odd := fmt.Sprintf("X%d", i) // a made-up method, new every time
		var method, path string
		switch i % 4 {
		case 0: // 404
			method, path = common[i/4%len(common)], fmt.Sprintf("/scan/%d", i)
		case 1: // 404 with an odd method
			method, path = odd, fmt.Sprintf("/scan/%d", i)
		case 2: // 405: GET and POST /users/:id only
			method, path = odd, fmt.Sprintf("/users/%d", i)
		case 3: // gin's own redirect to /dirs/<i>/, before any middleware
			method, path = "GET", fmt.Sprintf("/dirs/%d", i)
		}
		req, err := http.NewRequest(method, srv.URL+path, nil)
		require.NoError(t, err)
		resp, err := c.Do(req)
		require.NoError(t, err, "%s %s", method, path)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses[resp.StatusCode]++
	}
	assert.Equal(t, map[int]int{404: n / 2, 405: n / 4, 301: n / 4}, statuses)
	require.Equal(t, 1, resources(g), "resources after the scan")
	pass, block, _, conc := snapshot(t, g, sluicegin.NoRoute)
	assert.Equal(t, uint64(3*n/4), pass)
	assert.Zero(t, block)
	assert.Zero(t, conc)
}

func TestResourceNameOption(t *testing.T) {
	g, _ := newEngine(t)
	name := func(c *gin.Context) string {
		if c.FullPath() == "/health" {
			return ""
		}
		return "api"
	}
	srv, c := serve(t, newRouter(g, sluicegin.WithResourceName(name)))
	assert.Equal(t, 200, do(t, c, "GET", srv.URL+"/users/1").Status)
	assert.Equal(t, 201, do(t, c, "POST", srv.URL+"/users/1").Status)
	assert.Equal(t, 200, do(t, c, "GET", srv.URL+"/health").Status)
	pass, _, _, _ := snapshot(t, g, "api")
	assert.Equal(t, uint64(2), pass)
	assert.Equal(t, 1, resources(g))
}

func TestHandlerFailuresAreRecorded(t *testing.T) {
	errDB := errors.New("db down")
	tests := []struct {
		name    string
		handler gin.HandlerFunc
		opts    []sluicegin.Option
		status  int
		wantErr bool
	}{
		{"200", func(c *gin.Context) { c.Status(200) }, nil, 200, false},
		{"404", func(c *gin.Context) { c.Status(404) }, nil, 404, false},
		{"503", func(c *gin.Context) { c.Status(503) }, nil, 503, true},
		{"recorded error with 200", func(c *gin.Context) { _ = c.Error(errDB); c.Status(200) }, nil, 200, true},
		{"binding error is the client's", func(c *gin.Context) {
			var v struct {
				N int `form:"n" binding:"required"`
			}
			_ = c.Bind(&v) // records a bind error and answers 400
		}, nil, 400, false},
		{"custom error func", func(c *gin.Context) { c.Status(429) },
			[]sluicegin.Option{sluicegin.WithErrorFunc(func(c *gin.Context) error {
				if c.Writer.Status() == 429 {
					return errors.New("upstream busy")
				}
				return nil
			})}, 429, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, _ := newEngine(t)
			r := gin.New()
			r.Use(sluicegin.Middleware(g, tt.opts...))
			r.GET("/x", tt.handler)
			srv, c := serve(t, r)
			assert.Equal(t, tt.status, do(t, c, "GET", srv.URL+"/x").Status)
			pass, _, errs, conc := snapshot(t, g, "GET /x")
			assert.Equal(t, uint64(1), pass)
			assert.Equal(t, map[bool]uint64{false: 0, true: 1}[tt.wantErr], errs)
			assert.Zero(t, conc)
		})
	}
}

func TestPanicWithRecoveryExitsEntry(t *testing.T) {
	g, _ := newEngine(t)
	r := newRouter(g)
	r.GET("/boom", func(c *gin.Context) { panic("boom") })
	srv, c := serve(t, r)
	assert.Equal(t, 500, do(t, c, "GET", srv.URL+"/boom").Status)
	assert.Equal(t, 500, do(t, c, "GET", srv.URL+"/boom").Status)
	pass, _, errs, conc := snapshot(t, g, "GET /boom")
	assert.Equal(t, uint64(2), pass)
	assert.Equal(t, uint64(2), errs, "a panic is recorded as an error")
	assert.Zero(t, conc, "a panic must release concurrency")
}

func TestConcurrencyHeldWhileInFlight(t *testing.T) {
	g, _ := newEngine(t)
	err := g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "GET /slow", Metric: rules.Concurrency, Threshold: 1}}})
	require.NoError(t, err)
	entered, release := make(chan struct{}), make(chan struct{})
	r := newRouter(g)
	r.GET("/slow", func(c *gin.Context) {
		entered <- struct{}{}
		<-release
		c.String(200, "done")
	})
	srv, c := serve(t, r)
	first := make(chan int, 1)
	go func() { // no require here: FailNow belongs to the test goroutine
		resp, err := c.Get(srv.URL + "/slow")
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-entered
	_, _, _, conc := snapshot(t, g, "GET /slow")
	assert.Equal(t, int64(1), conc)
	// A full concurrency limit is overload: 503, and the default wait.
	assert.Equal(t, response{Status: 503, Body: "Service Unavailable", RetryAfter: "1"}, do(t, c, "GET", srv.URL+"/slow"))
	close(release)
	assert.Equal(t, 200, <-first)
	_, _, _, conc = snapshot(t, g, "GET /slow")
	assert.Zero(t, conc)
}

func TestBlockHandlerOption(t *testing.T) {
	g, _ := newEngine(t)
	err := g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "GET /health", Threshold: 1}}})
	require.NoError(t, err)
	var seen *sluice.BlockError
	block := func(c *gin.Context, err error) {
		require.ErrorAs(t, err, &seen)
		c.JSON(503, gin.H{"error": "shed"}) // no Abort: the middleware aborts
	}
	srv, c := serve(t, newRouter(g, sluicegin.WithBlockHandler(block)))
	assert.Equal(t, response{Status: 200, Body: "ok"}, do(t, c, "GET", srv.URL+"/health"))
	assert.Equal(t, response{Status: 503, Body: `{"error":"shed"}`}, do(t, c, "GET", srv.URL+"/health"))
	require.NotNil(t, seen)
	assert.Equal(t, "GET /health", seen.Resource)
}

func TestArgExtractors(t *testing.T) {
	var got []any
	r := gin.New()
	r.GET("/users/:id", func(c *gin.Context) {
		got = []any{
			sluicegin.ClientIP()(c),
			sluicegin.Header("x-tenant")(c),
			sluicegin.Header("X-Absent")(c),
			sluicegin.Param("id")(c),
			sluicegin.Param("nope")(c),
			sluicegin.Query("q")(c),
		}
	})
	srv, c := serve(t, r)
	req, err := http.NewRequest("GET", srv.URL+"/users/42?q=hot", nil)
	require.NoError(t, err)
	req.Header.Set("X-Tenant", "acme")
	resp, err := c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, []any{"127.0.0.1", "acme", nil, "42", nil, "hot"}, got)
}

func TestStatusErrorIsShared(t *testing.T) {
	// The gin adapter reports statuses with the net/http adapter's type.
	g, _ := newEngine(t)
	r := gin.New()
	var seen error
	r.Use(sluicegin.Middleware(g, sluicegin.WithErrorFunc(func(c *gin.Context) error {
		seen = sluicegin.DefaultErrorFunc(c)
		return seen
	})))
	r.GET("/x", func(c *gin.Context) { c.Status(502) })
	srv, c := serve(t, r)
	do(t, c, "GET", srv.URL+"/x")
	var se *sluicehttp.StatusError
	require.ErrorAs(t, seen, &se)
	assert.Equal(t, 502, se.Code)
}

// resources counts the resources the engine tracks.
func resources(g *sluice.Engine) int {
	n := 0
	g.Each(func(string, stat.Snapshot) { n++ })
	return n
}
