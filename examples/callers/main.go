// Command callers shows rules that read who is calling: an allow list for
// a payment API (only checkout and billing, and never a request that names
// no caller), and 100 requests per second for each calling service with
// 1,000 for one named partner. The rules come from a rule file; the
// net/http middleware takes each request's caller from the X-Caller header
// (in production, a header a gateway in front sets, or the verified client
// certificate: see docs/middleware.md).
//
// It starts a local server on an ephemeral port, sends a fixed sequence of
// requests within one second of a manual clock, prints how each caller
// fared, and exits 0. Run it with:
//
//	go run ./examples/callers
package main

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/sluice-go/sluice"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

// ruleFile is what a rules.yaml beside the service would hold.
const ruleFile = `
authority:
  - id: pay-callers
    resource: POST /pay
    allow: [checkout, billing]
    strict: true
flow:
  - resource: GET /quotes
    threshold: 100
    caller: other
  - resource: GET /quotes
    threshold: 1000
    caller: partner-bank
`

func main() {
	if err := run(os.Stdout); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	// A manual clock that stands still: every request falls in one second.
	eng := sluice.New(sluice.WithClock(sluicetest.NewManualClock(0)))
	defer eng.Close()
	set, err := rules.Decode([]byte(ruleFile), rules.YAML)
	if err != nil {
		return err
	}
	if err := eng.LoadRules(set); err != nil {
		return err
	}
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }
	mux.HandleFunc("POST /pay", ok)
	mux.HandleFunc("GET /quotes", ok)
	mw := sluicehttp.Middleware(eng, sluicehttp.WithCaller(sluicehttp.CallerSource{Header: "X-Caller"}))
	srv := httptest.NewServer(mw(mux))
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer client.CloseIdleConnections()

	fmt.Fprintln(w, "request      caller        sent  answers")
	for _, c := range []struct {
		method, path, caller string
		n                    int
	}{
		{"POST", "/pay", "checkout", 3},
		{"POST", "/pay", "mallory", 3},
		{"POST", "/pay", "", 3},
		{"GET", "/quotes", "svc-orders", 120},
		{"GET", "/quotes", "svc-search", 120},
		{"GET", "/quotes", "partner-bank", 1100},
	} {
		statuses := map[int]int{}
		for range c.n {
			req, err := http.NewRequest(c.method, srv.URL+c.path, nil)
			if err != nil {
				return err
			}
			if c.caller != "" {
				req.Header.Set("X-Caller", c.caller)
			}
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses[resp.StatusCode]++
		}
		caller := c.caller
		if caller == "" {
			caller = "(none)"
		}
		fmt.Fprintf(w, "%-12s %-12s %5d  %s\n", c.method+" "+c.path, caller, c.n, answers(statuses))
	}
	return nil
}

// answers writes statuses as "200 x3, 403 x0", in the order 200, 403, 429.
func answers(statuses map[int]int) string {
	s := ""
	for _, code := range []int{200, 403, 429} {
		if n := statuses[code]; n > 0 {
			if s != "" {
				s += ", "
			}
			s += fmt.Sprintf("%d x%d", code, n)
		}
	}
	return s
}
