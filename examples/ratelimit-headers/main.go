// Command ratelimit-headers serves a public API whose responses tell each
// client its remaining budget in the IETF RateLimit header fields
// (RateLimit-Policy and RateLimit) and the common X-RateLimit-* ones, on
// passes and on 429s alike, through sluicehttp.WithRateLimitHeaders.
//
// It starts a local server on an ephemeral port with an engine on a manual
// clock (so every run prints the same), sends requests at set instants to a
// route limited to 5 per second and to one behind a token bucket of 3
// refilled at 2 per second, prints what a client reads of each response,
// and exits 0. Run it with:
//
//	go run ./examples/ratelimit-headers
package main

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/sluice-go/sluice"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

// step is one request of the script: the time the clock moves first, the
// method and path.
type step struct {
	advance      time.Duration
	method, path string
}

var script = []step{
	{0, "GET", "/items"}, {0, "GET", "/items"}, {0, "GET", "/items"}, {0, "GET", "/items"},
	{0, "GET", "/items"}, {0, "GET", "/items"}, // the sixth in the second: 429
	{600 * time.Millisecond, "GET", "/items"}, // the window still holds the five
	{400 * time.Millisecond, "GET", "/items"}, // a second on: all five have left
	{0, "POST", "/items"}, {0, "POST", "/items"}, {0, "POST", "/items"},
	{0, "POST", "/items"},                      // the bucket is empty: 429
	{500 * time.Millisecond, "POST", "/items"}, // one token back
}

func run(out io.Writer) error {
	clk := sluicetest.NewManualClock(int64(time.Hour))
	eng := sluice.New(sluice.WithClock(clk))
	defer eng.Close()
	if err := eng.LoadRules(rules.Set{Flow: []rules.Flow{
		{ID: "reads", Resource: "GET /items", Threshold: 5},
		{ID: "writes", Resource: "POST /items", Threshold: 2, Bucket: &rules.Bucket{Burst: 3}},
	}}); err != nil {
		return err
	}
	mw := sluicehttp.Middleware(eng, sluicehttp.WithRateLimitHeaders(true))
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux := http.NewServeMux()
	mux.Handle("GET /items", mw(ok))
	mux.Handle("POST /items", mw(ok))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	at := time.Duration(0)
	for _, s := range script {
		clk.Advance(s.advance)
		at += s.advance
		req, err := http.NewRequest(s.method, srv.URL+s.path, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		h := resp.Header
		line := fmt.Sprintf("%6v %-4s %s %d  RateLimit: %s  X-RateLimit-Remaining: %s  X-RateLimit-Reset: %s",
			at, s.method, s.path, resp.StatusCode, h.Get("RateLimit"), h.Get("X-RateLimit-Remaining"), h.Get("X-RateLimit-Reset"))
		if ra := h.Get("Retry-After"); ra != "" {
			line += "  Retry-After: " + ra
		}
		if _, err := fmt.Fprintln(out, line); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(out, "policies: GET %s, POST %s\n", policy(client, srv.URL, "GET"), policy(client, srv.URL, "POST"))
	return err
}

// policy returns the RateLimit-Policy field of a request to /items.
func policy(c *http.Client, base, method string) string {
	req, err := http.NewRequest(method, base+"/items", nil)
	if err != nil {
		return err.Error()
	}
	resp, err := c.Do(req)
	if err != nil {
		return err.Error()
	}
	_ = resp.Body.Close()
	return resp.Header.Get("RateLimit-Policy")
}
