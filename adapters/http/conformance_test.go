package sluicehttp_test

import (
	"net/http"
	"testing"

	"github.com/sluice-go/sluice"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	"github.com/sluice-go/sluice/adapters/http/internal/adaptertest"
)

// TestConformance runs the adapters' conformance suite
// (adaptertest.Run) on the middleware wrapping a ServeMux.
func TestConformance(t *testing.T) {
	adaptertest.Run(t, adaptertest.Adapter{
		Start: func(t *testing.T, g *sluice.Engine, cf adaptertest.Config) adaptertest.Client {
			var opts []sluicehttp.Option
			if cf.Policy != nil {
				opts = append(opts, sluicehttp.WithRefusalPolicy(*cf.Policy))
			}
			if cf.ErrorStatus != nil {
				opts = append(opts, sluicehttp.WithErrorStatus(cf.ErrorStatus))
			}
			if cf.Caller {
				opts = append(opts, sluicehttp.WithCaller(sluicehttp.CallerSource{Header: "X-Caller"}))
			}
			if cf.RateLimit {
				opts = append(opts, sluicehttp.WithRateLimitHeaders(true))
			}
			if cf.Args {
				query := func(r *http.Request) any {
					if v := r.URL.Query().Get("q"); v != "" {
						return v
					}
					return nil
				}
				opts = append(opts, sluicehttp.WithArgs(sluicehttp.PathValue("id"), sluicehttp.Header("X-User"), query))
			}
			mw := sluicehttp.Middleware(g, opts...)
			// Path values are known once the mux has routed the request:
			// with arguments, the middleware wraps each route, otherwise
			// the mux.
			route, whole := mw, func(h http.Handler) http.Handler { return h }
			if !cf.Args {
				route, whole = whole, mw
			}
			mux := http.NewServeMux()
			mux.Handle("GET /x", route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("x")) })))
			mux.Handle("GET /users/{id}", route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("user " + r.PathValue("id"))) })))
			mux.Handle("GET /status/{code}", route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(adaptertest.StatusParam(t, r.PathValue("code")))
			})))
			mux.Handle("GET /panic", route(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") })))
			mux.Handle("GET /stream", route(adaptertest.StreamHandler(cf.Gate)))
			return adaptertest.ServeHTTP(t, whole(mux))
		},
		Resource: func(route string) string {
			return map[string]string{
				adaptertest.RouteX:      "GET /x",
				adaptertest.RouteUser:   "GET /users/{id}",
				adaptertest.RouteStatus: "GET /status/{code}",
				adaptertest.RoutePanic:  "GET /panic",
				adaptertest.RouteStream: "GET /stream",
			}[route]
		},
		HeadAsGet: true,
		NoRoute:   sluicehttp.NoRoute,
	})
}
