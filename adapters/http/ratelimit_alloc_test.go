package sluicehttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluice-go/sluice"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	"github.com/sluice-go/sluice/rules"
)

// TestAllocRateLimitHeaders: the RateLimit fields cost a request two
// allocations, one string holding both values and one slice backing both
// header entries (seven before they were built in one buffer); and they
// sit under their canonical keys, where Header.Get finds them (they were
// stored as "RateLimit-Policy", which Get("RateLimit-Policy") missed).
func TestAllocRateLimitHeaders(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocations")
	}
	g := sluice.New()
	t.Cleanup(func() { _ = g.Close() })
	if err := g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "GET /r", ID: "api", Threshold: 1e9}}}); err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	allocs := func(opts ...sluicehttp.Option) float64 {
		m := http.NewServeMux()
		m.Handle("GET /r", sluicehttp.Middleware(g, opts...)(ok))
		req := httptest.NewRequest("GET", "/r", nil)
		w := &discard{h: http.Header{}}
		m.ServeHTTP(w, req) // the header map's entries exist from here on
		return testing.AllocsPerRun(200, func() { m.ServeHTTP(w, req) })
	}
	without, with := allocs(), allocs(sluicehttp.WithRateLimitHeaders(false))
	if with-without > 2 {
		t.Errorf("the RateLimit fields cost %v allocations a request (%v without them, %v with), want at most 2", with-without, without, with)
	}
	{
		w := &discard{h: http.Header{}}
		m := http.NewServeMux()
		m.Handle("GET /r", sluicehttp.Middleware(g, sluicehttp.WithRateLimitHeaders(false))(ok))
		m.ServeHTTP(w, httptest.NewRequest("GET", "/r", nil))
		if got := w.h.Get("RateLimit-Policy"); got != `"api";q=1000000000;w=1` {
			t.Errorf("RateLimit-Policy %q", got)
		}
		if got := w.h.Get("RateLimit"); got == "" || got[:6] != `"api";` {
			t.Errorf("RateLimit %q", got)
		}
	}
}
