package adaptertest

// The conformance suite: one table of cases that every adapter (net/http,
// gin, gRPC, echo, chi, fiber, connect) runs through a real server of its
// framework on loopback with a real client. An adapter's test describes how
// to serve the suite's routes through it (Adapter) and calls Run.

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

// The routes every adapter under the suite serves. HTTP adapters serve them
// as GET routes with a path parameter in the framework's syntax; RPC
// adapters as unary procedures (the stream route as a server stream) whose
// request message carries the parameter.
const (
	// RouteX (GET /x) answers 200 "x".
	RouteX = "x"
	// RouteUser (GET /users/{id}) answers 200 "user <id>".
	RouteUser = "user"
	// RouteStatus (GET /status/{code}) fails with the status code (RPC: the
	// code of that HTTP status, see CodeOf), the framework's way: a status
	// written, or an error returned.
	RouteStatus = "status"
	// RoutePanic (GET /panic) panics; the server has the framework's
	// recovery outside the middleware.
	RoutePanic = "panic"
	// RouteStream (GET /stream) sends "first" (flushed), waits until
	// Config.Gate is closed, then sends "last".
	RouteStream = "stream"
)

// Call is one request of the suite.
type Call struct {
	Method string // HTTP method, "" for GET; RPC adapters ignore it
	Route  string // one of the Route constants, or a path no route serves
	Param  string // the path parameter (id, status code)
	User   string // the X-User header (RPC: x-user metadata), "" for none
	Query  string // the query value q (RPC: x-q metadata), "" for none
	Caller string // the X-Caller header (RPC: x-caller metadata), "" for none
}

// Outcome is what the suite compares of a response.
type Outcome struct {
	Status     int    // HTTP status; RPC: the status code's HTTP equivalent (HTTPStatus)
	Body       string // trimmed; RPC: the response message, "" for an error
	RetryAfter string // Retry-After; RPC: the retry delay in whole seconds rounded up
	// RateLimit is the RateLimit fields (RPC: metadata keys) RateLimitOf
	// joins, "" for none.
	RateLimit string
}

// Side is where the adapter's engine sits.
type Side int

const (
	// OnServer: the middleware or server interceptors.
	OnServer Side = iota
	// OnClient: the client interceptors (RPC adapters with Adapter.Client).
	OnClient
)

func (s Side) String() string { return [...]string{"server", "client"}[s] }

// Config is how the adapter under test is set up for one case.
type Config struct {
	Side Side
	// Policy is the refusal policy (nil: the default). RPC adapters map its
	// Status to codes with CodeOf and keep its OverloadRetryAfter.
	Policy *sluicehttp.RefusalPolicy
	// ErrorStatus, when set, replaces the adapter's default choice of the
	// outcomes recorded as errors: the statuses (RPC: codes, by HTTPStatus)
	// it reports true for.
	ErrorStatus func(status int) bool
	// Args passes, for param rules, the path parameter (RPC: the request
	// message), the X-User header and the query value q (RPC: x-user and
	// x-q metadata) as the entry's arguments 0, 1 and 2.
	Args bool
	// Gate is closed when the stream route may send its last message.
	Gate chan struct{}
	// Caller takes the caller from the X-Caller header (RPC: x-caller
	// metadata): the adapter's WithCaller.
	Caller bool
	// RateLimit sends the RateLimit fields with X-RateLimit-* (RPC: the
	// metadata keys): the adapter's WithRateLimitHeaders (gRPC:
	// WithRateLimitMetadata) with true.
	RateLimit bool
}

// Client sends the suite's calls to a server of the adapter under test.
type Client interface {
	// Do sends c and returns its outcome.
	Do(t *testing.T, c Call) Outcome
	// Open opens the stream route and returns once its first message has
	// arrived, with a func that reads the rest and returns it.
	Open(t *testing.T) (rest func() string)
}

// Adapter is one adapter under the suite.
type Adapter struct {
	// Start serves the suite's routes through the adapter on engine g, set
	// up as cf says, on a real server on 127.0.0.1 until the test ends, and
	// returns a client for it.
	Start func(t *testing.T, g *sluice.Engine, cf Config) Client
	// Resource is the adapter's resource name of a GET to route.
	Resource func(route string) string
	// RPC adapters have no HEAD, no unrouted requests and no body with a
	// refusal.
	RPC bool
	// HeadAsGet: the framework serves HEAD with GET routes (ServeMux, chi
	// with middleware.GetHead, echo with Match, fiber), and the adapter
	// counts them under the GET resource.
	HeadAsGet bool
	// NoRoute is the resource of requests no route serves ("" for RPC).
	NoRoute string
	// Client: the adapter has client interceptors; the client-side cases
	// run with the engine on them.
	Client bool
}

// HTTPStatus is the HTTP status the suite compares for an RPC status code
// (the name of the code, as connect and gRPC's HTTP mapping spell them).
func HTTPStatus(code string) int {
	switch code {
	case "ok":
		return 200
	case "invalid_argument":
		return 400
	case "permission_denied":
		return 403
	case "not_found":
		return 404
	case "resource_exhausted":
		return 429
	case "unavailable":
		return 503
	case "internal", "unknown":
		return 500
	}
	return 0
}

// CodeOf is the RPC status code (as HTTPStatus names them) the status
// route fails with for an HTTP status, and a refusal policy's Status means.
func CodeOf(status int) string {
	switch status {
	case 200:
		return "ok"
	case 400:
		return "invalid_argument"
	case 403:
		return "permission_denied"
	case 404:
		return "not_found"
	case 429:
		return "resource_exhausted"
	case 503:
		return "unavailable"
	}
	return "internal"
}

// RetrySeconds is a retry delay as the suite compares it: whole seconds
// rounded up, "" for none.
func RetrySeconds(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return strconv.FormatInt(int64(math.Ceil(d.Seconds())), 10)
}

// suiteEngine returns an engine on a manual clock that stays in one
// second, closed when the test ends.
func suiteEngine(t *testing.T) *sluice.Engine {
	t.Helper()
	g := sluice.New(sluice.WithClock(sluicetest.NewManualClock(int64(time.Hour))))
	t.Cleanup(func() { require.NoError(t, g.Close()) })
	return g
}

func (a Adapter) sides() []Side {
	if a.Client {
		return []Side{OnServer, OnClient}
	}
	return []Side{OnServer}
}

// Run runs every case of the suite on a.
func Run(t *testing.T, a Adapter) {
	for _, side := range a.sides() {
		t.Run(side.String(), func(t *testing.T) {
			t.Run("route template", func(t *testing.T) { caseTemplate(t, a, side) })
			if side == OnServer && !a.RPC {
				t.Run("HEAD", func(t *testing.T) { caseHead(t, a) })
				t.Run("no route", func(t *testing.T) { caseNoRoute(t, a) })
			}
			t.Run("refusals", func(t *testing.T) { caseRefusals(t, a, side) })
			t.Run("errors", func(t *testing.T) { caseErrors(t, a, side) })
			if side == OnServer {
				t.Run("panic", func(t *testing.T) { casePanic(t, a) })
			}
			t.Run("stream", func(t *testing.T) { caseStream(t, a, side) })
			t.Run("args", func(t *testing.T) { caseArgs(t, a, side) })
			if side == OnServer {
				t.Run("callers", func(t *testing.T) { caseCallers(t, a) })
				t.Run("ratelimit", func(t *testing.T) { caseRateLimit(t, a) })
			}
		})
	}
}

func ok(body string) Outcome { return Outcome{Status: 200, Body: body} }

// caseTemplate: requests to one route with different parameters are one
// resource, named from the route template.
func caseTemplate(t *testing.T, a Adapter, side Side) {
	g := suiteEngine(t)
	c := a.Start(t, g, Config{Side: side})
	require.Equal(t, ok("user 1"), c.Do(t, Call{Route: RouteUser, Param: "1"}))
	require.Equal(t, ok("user 2"), c.Do(t, Call{Route: RouteUser, Param: "2"}))
	pass, block, errs, conc := Snapshot(t, g, a.Resource(RouteUser))
	require.Equal(t, [4]uint64{2, 0, 0, 0}, [4]uint64{pass, block, errs, uint64(conc)}, "pass, block, errors, in flight")
}

// caseHead: a HEAD the GET route serves counts under the GET resource, or,
// where the framework serves HEAD only with HEAD routes, under no route.
func caseHead(t *testing.T, a Adapter) {
	g := suiteEngine(t)
	c := a.Start(t, g, Config{})
	got := c.Do(t, Call{Method: "HEAD", Route: RouteUser, Param: "3"})
	want := a.Resource(RouteUser)
	if a.HeadAsGet {
		require.Equal(t, 200, got.Status)
	} else {
		want = a.NoRoute
	}
	pass, _, _, _ := Snapshot(t, g, want)
	require.Equal(t, uint64(1), pass, "HEAD counted under %q", want)
}

// caseNoRoute: requests no route serves are one resource, whatever their
// path.
func caseNoRoute(t *testing.T, a Adapter) {
	g := suiteEngine(t)
	c := a.Start(t, g, Config{})
	for _, p := range []string{"nope", "nope/42", "users"} {
		require.Equal(t, 404, c.Do(t, Call{Route: p}).Status, p)
	}
	pass, _, _, _ := Snapshot(t, g, a.NoRoute)
	require.Equal(t, uint64(3), pass)
}

// caseRefusals: every refusal of RefusalCases, through a real server: the
// case's status and Retry-After (RPC: code and retry delay), the status
// text as the body of HTTP refusals, one pass and one block counted.
func caseRefusals(t *testing.T, a Adapter, side Side) {
	for _, tc := range RefusalCases() {
		t.Run(tc.Name, func(t *testing.T) {
			g := suiteEngine(t)
			ref := &Refuser{}
			require.NoError(t, g.RegisterSlot(ref, 0))
			c := a.Start(t, g, Config{Side: side, Policy: tc.Policy})
			require.Equal(t, ok("x"), c.Do(t, Call{Route: RouteX}))
			ref.BE.Store(&tc.BE)
			want := Outcome{Status: tc.WantStatus, RetryAfter: tc.RetryAfter}
			if !a.RPC {
				want.Body = http.StatusText(tc.WantStatus)
			}
			require.Equal(t, want, c.Do(t, Call{Route: RouteX}))
			pass, block, _, conc := Snapshot(t, g, a.Resource(RouteX))
			require.Equal(t, [3]uint64{1, 1, 0}, [3]uint64{pass, block, uint64(conc)}, "pass, block, in flight")
		})
	}
}

// caseErrors: failures of the server (5xx) are recorded as errors for
// circuit breakers, the caller's (4xx) are not, unless configured.
func caseErrors(t *testing.T, a Adapter, side Side) {
	for _, tc := range []struct {
		name    string
		counted func(int) bool
		want    map[int]bool
	}{
		{"default", nil, map[int]bool{500: true, 503: true, 404: false, 400: false}},
		{"4xx configured", func(s int) bool { return s >= 400 }, map[int]bool{500: true, 404: true, 400: true}},
		{"none configured", func(int) bool { return false }, map[int]bool{500: false, 404: false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for status, counted := range tc.want {
				g := suiteEngine(t)
				c := a.Start(t, g, Config{Side: side, ErrorStatus: tc.counted})
				got := c.Do(t, Call{Route: RouteStatus, Param: strconv.Itoa(status)})
				require.Equal(t, status, got.Status)
				want := uint64(0)
				if counted {
					want = 1
				}
				pass, _, errs, conc := Snapshot(t, g, a.Resource(RouteStatus))
				require.Equal(t, [3]uint64{1, want, 0}, [3]uint64{pass, errs, uint64(conc)}, "status %d: pass, errors, in flight", status)
			}
		})
	}
}

// casePanic: a handler that panics exits its entry with an error.
func casePanic(t *testing.T, a Adapter) {
	g := suiteEngine(t)
	c := a.Start(t, g, Config{})
	c.Do(t, Call{Route: RoutePanic})
	pass, _, errs, conc := Snapshot(t, g, a.Resource(RoutePanic))
	require.Equal(t, [3]uint64{1, 1, 0}, [3]uint64{pass, errs, uint64(conc)}, "pass, errors, in flight")
}

// caseStream: a stream holds its entry until it ends, so a concurrency
// limit of one refuses a second stream meanwhile.
func caseStream(t *testing.T, a Adapter, side Side) {
	g := suiteEngine(t)
	res := a.Resource(RouteStream)
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: res, Metric: rules.Concurrency, Threshold: 1}}}))
	gate := make(chan struct{})
	c := a.Start(t, g, Config{Side: side, Gate: gate})
	rest := c.Open(t)
	_, _, _, conc := Snapshot(t, g, res)
	require.Equal(t, int64(1), conc, "in flight while the stream is open")
	require.Equal(t, 503, c.Do(t, Call{Route: RouteStream}).Status, "a second stream while the first is open")
	close(gate)
	require.Equal(t, "last", rest())
	// The entry exits when the handler returns; a client may see the end of
	// the response just before that.
	require.Eventually(t, func() bool {
		_, _, _, conc := Snapshot(t, g, res)
		return conc == 0
	}, 10*time.Second, time.Millisecond, "in flight once the stream ended")
	pass, block, _, _ := Snapshot(t, g, res)
	require.Equal(t, [2]uint64{1, 1}, [2]uint64{pass, block})
}

// caseArgs: the path parameter, the header and the query value are the
// entry's arguments 0, 1 and 2, each limited by a param rule to one request
// per value; an absent value is not counted.
func caseArgs(t *testing.T, a Adapter, side Side) {
	g := suiteEngine(t)
	res := a.Resource(RouteUser)
	var ps []rules.Param
	for i := range 3 {
		ps = append(ps, rules.Param{Resource: res, Index: i, Threshold: 1})
	}
	require.NoError(t, g.LoadRules(rules.Set{Param: ps}))
	c := a.Start(t, g, Config{Side: side, Args: true})
	for i, tc := range []struct {
		call Call
		want int
	}{
		{Call{Param: "1", User: "a", Query: "x"}, 200},
		{Call{Param: "1", User: "b", Query: "y"}, 429}, // the id again
		{Call{Param: "2", User: "a", Query: "z"}, 429}, // the user again
		{Call{Param: "3", User: "c", Query: "x"}, 429}, // the query again
		{Call{Param: "4", User: "d", Query: "w"}, 200},
		{Call{Param: "5"}, 200}, // no user, no query: not counted
		{Call{Param: "6"}, 200},
	} {
		tc.call.Route = RouteUser
		got := c.Do(t, tc.call)
		require.Equal(t, tc.want, got.Status, fmt.Sprintf("call %d: %+v", i, tc.call))
	}
	pass, block, _, _ := Snapshot(t, g, res)
	require.Equal(t, [2]uint64{4, 3}, [2]uint64{pass, block})
}

// HTTPClient is the suite's client of an HTTP adapter's server: the routes
// at /x, /users/{id}, /status/{code}, /panic and /stream, any other route
// at "/" + route.
type HTTPClient struct {
	URL string // the server's, without a trailing slash
	C   *http.Client
}

// ServeHTTP runs h behind a real net/http server on 127.0.0.1 until the
// test ends (Serve), and returns the suite's client for it.
func ServeHTTP(t *testing.T, h http.Handler) HTTPClient {
	srv, c := Serve(t, h)
	return HTTPClient{URL: srv.URL, C: c}
}

func (h HTTPClient) url(c Call) string {
	u := h.URL + "/" + c.Route
	switch c.Route {
	case RouteUser:
		u = h.URL + "/users/" + c.Param
	case RouteStatus:
		u += "/" + c.Param
	}
	if c.Query != "" {
		u += "?q=" + c.Query
	}
	return u
}

// Do implements Client. A request the server drops (a panic without
// recovery) has the status 0.
func (h HTTPClient) Do(t *testing.T, c Call) Outcome {
	t.Helper()
	m := c.Method
	if m == "" {
		m = "GET"
	}
	req, err := http.NewRequest(m, h.url(c), nil)
	require.NoError(t, err)
	if c.User != "" {
		req.Header.Set("X-User", c.User)
	}
	if c.Caller != "" {
		req.Header["X-Caller"] = []string{c.Caller} // as it is, bytes any
	}
	resp, err := h.C.Do(req)
	if err != nil {
		return Outcome{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return Outcome{Status: resp.StatusCode, Body: strings.TrimSpace(string(b)), RetryAfter: resp.Header.Get("Retry-After"),
		RateLimit: RateLimitOf(resp.Header.Get)}
}

// Open implements Client.
func (h HTTPClient) Open(t *testing.T) func() string {
	t.Helper()
	resp, err := h.C.Get(h.URL + "/stream")
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	first := make([]byte, len("first"))
	_, err = io.ReadFull(resp.Body, first)
	require.NoError(t, err)
	require.Equal(t, "first", string(first))
	return func() string {
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return strings.TrimSpace(string(b))
	}
}

// StreamHandler is the stream route as a net/http handler.
func StreamHandler(gate <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "first")
		_ = http.NewResponseController(w).Flush()
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "last")
	}
}

// StatusParam is the status the status route answers for its parameter.
func StatusParam(t *testing.T, p string) int {
	n, err := strconv.Atoi(p)
	require.NoError(t, err)
	return n
}
