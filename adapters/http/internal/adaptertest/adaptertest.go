// Package adaptertest holds what the tests of the two HTTP adapters
// (net/http and gin) share: a real server and client, the response they
// compare, a slot that refuses with any block error, and the table of
// refusals with the response each must get. The gin adapter's module holds
// a generated copy (go run ./internal/cmd/modules copies), so both adapters
// are held to one table.
package adaptertest

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	"github.com/sluice-go/sluice/slots"
)

// Serve runs h behind a real net/http server on 127.0.0.1 until the test
// ends, and returns it with a client that keeps no connection alive.
func Serve(t *testing.T, h http.Handler) (*httptest.Server, *http.Client) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // panics are expected in some tests
	srv.Start()
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
	})
	return srv, &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// Response is what the tests compare of a response.
type Response struct {
	Status     int
	Body       string // trimmed of spaces
	RetryAfter string // the Retry-After header, "" for none
}

// Get sends a request without a body and returns its response.
func Get(t *testing.T, c *http.Client, method, url string) Response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return Response{Status: resp.StatusCode, Body: strings.TrimSpace(string(b)), RetryAfter: resp.Header.Get("Retry-After")}
}

// Snapshot returns the totals of a resource g tracks.
func Snapshot(t *testing.T, g *sluice.Engine, resource string) (pass, block, errs uint64, conc int64) {
	t.Helper()
	s, ok := g.Snapshot(resource)
	require.True(t, ok, "Snapshot(%q) not tracked", resource)
	return s.TotalPass, s.TotalBlock, s.TotalError, s.Concurrency
}

// Refuser is a custom rule-check slot that refuses every entry with a copy
// of the block error it holds, or admits it when it holds none: it makes
// any block type the engine can return, with any rule and wait.
type Refuser struct {
	BE atomic.Pointer[sluice.BlockError]
}

// Check implements slots.Checker.
func (r *Refuser) Check(*slots.Entry) *sluice.BlockError {
	if be := r.BE.Load(); be != nil {
		c := *be
		return &c
	}
	return nil
}

// RefusalCase is one refusal and the response it must get.
type RefusalCase struct {
	Name       string
	BE         sluice.BlockError
	Policy     *sluicehttp.RefusalPolicy // nil: the default
	WantStatus int
	RetryAfter string // "" for no header
}

// RefusalCases covers every block type, with and without a wait, under the
// default policy and a configured one.
func RefusalCases() []RefusalCase {
	qps, conc := sluice.RuleRef{Metric: "qps"}, sluice.RuleRef{Metric: "concurrency"}
	return []RefusalCase{
		{"flow QPS, wait under a second", sluice.BlockError{Type: sluice.BlockFlow, Rule: qps, RetryAfter: 300 * time.Millisecond}, nil, 429, "1"},
		{"flow QPS, wait rounds up", sluice.BlockError{Type: sluice.BlockFlow, Rule: qps, RetryAfter: 1500 * time.Millisecond}, nil, 429, "2"},
		{"flow QPS, no wait (batch over threshold)", sluice.BlockError{Type: sluice.BlockFlow, Rule: qps}, nil, 429, ""},
		{"flow QPS fast check (no rule)", sluice.BlockError{Type: sluice.BlockFlow, RetryAfter: 2 * time.Second}, nil, 429, "2"},
		{"flow concurrency", sluice.BlockError{Type: sluice.BlockFlow, Rule: conc}, nil, 503, "1"},
		{"param", sluice.BlockError{Type: sluice.BlockParam, Rule: sluice.RuleRef{Metric: "qps"}, RetryAfter: 250 * time.Millisecond}, nil, 429, "1"},
		{"param, no wait", sluice.BlockError{Type: sluice.BlockParam, Rule: sluice.RuleRef{Metric: "concurrency"}}, nil, 429, ""},
		{"isolation", sluice.BlockError{Type: sluice.BlockFlow, Rule: sluice.RuleRef{Metric: "concurrency"}}, nil, 503, "1"},
		{"system", sluice.BlockError{Type: sluice.BlockSystem, Rule: sluice.RuleRef{Metric: "cpu-usage"}}, nil, 503, "1"},
		{"breaker open", sluice.BlockError{Type: sluice.BlockDegrade, RetryAfter: 4200 * time.Millisecond}, nil, 503, "5"},
		{"breaker half-open", sluice.BlockError{Type: sluice.BlockDegrade}, nil, 503, "1"},
		{"cluster", sluice.BlockError{Type: sluice.BlockCluster}, nil, 429, ""},
		{"authority", sluice.BlockError{Type: sluice.BlockAuthority, Rule: sluice.RuleRef{Metric: "allow"}}, nil, 403, ""},
		{"custom", sluice.BlockError{Type: sluice.BlockCustom}, nil, 429, ""},
		{"custom with a wait", sluice.BlockError{Type: sluice.BlockCustom, RetryAfter: 3 * time.Second}, nil, 429, "3"},
		{"policy: overload wait", sluice.BlockError{Type: sluice.BlockFlow, Rule: sluice.RuleRef{Metric: "concurrency"}},
			&sluicehttp.RefusalPolicy{OverloadRetryAfter: 2500 * time.Millisecond}, 503, "3"},
		{"policy: no overload wait", sluice.BlockError{Type: sluice.BlockSystem},
			&sluicehttp.RefusalPolicy{OverloadRetryAfter: -1}, 503, ""},
		{"policy: the rule's own wait wins", sluice.BlockError{Type: sluice.BlockDegrade, RetryAfter: 4 * time.Second},
			&sluicehttp.RefusalPolicy{OverloadRetryAfter: time.Minute}, 503, "4"},
		{"policy: status", sluice.BlockError{Type: sluice.BlockFlow, Rule: sluice.RuleRef{Metric: "concurrency"}},
			&sluicehttp.RefusalPolicy{Status: func(be *sluice.BlockError) int { return 429 }}, 429, "1"},
		{"policy: status out of range is the default", sluice.BlockError{Type: sluice.BlockFlow, Rule: qps},
			&sluicehttp.RefusalPolicy{Status: func(be *sluice.BlockError) int { return 0 }}, 429, ""},
	}
}

// CheckRefusal checks one case against a server at url (a GET route
// named "GET /x" answering "x") whose engine g has ref registered: a
// request passes while ref holds nothing; with the case's block error the
// next gets the case's status, its status text as the body and its
// Retry-After; the resource counts one pass, one block and nothing in
// flight.
func CheckRefusal(t *testing.T, g *sluice.Engine, ref *Refuser, c *http.Client, url string, tc RefusalCase) {
	t.Helper()
	require.Equal(t, Response{Status: 200, Body: "x"}, Get(t, c, "GET", url))
	ref.BE.Store(&tc.BE)
	want := Response{Status: tc.WantStatus, Body: http.StatusText(tc.WantStatus), RetryAfter: tc.RetryAfter}
	require.Equal(t, want, Get(t, c, "GET", url))
	pass, block, _, conc := Snapshot(t, g, "GET /x")
	require.Equal(t, [3]uint64{1, 1, 0}, [3]uint64{pass, block, uint64(conc)}, "pass, block, in flight")
}
