package sluicechi_test

import (
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice"
	sluicechi "github.com/sluice-go/sluice/adapters/chi"
	"github.com/sluice-go/sluice/adapters/chi/internal/adaptertest"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// suiteOptions are the middleware's options for cf.
func suiteOptions(cf adaptertest.Config) []sluicechi.Option {
	var opts []sluicechi.Option
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
		opts = append(opts, sluicehttp.WithArgs(sluicechi.URLParam("id"), sluicechi.Header("X-User"), sluicechi.Query("q")))
	}
	return opts
}

// recoverer turns a panic into a 500 without printing it, as
// middleware.Recoverer does with a stack trace.
func recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if recover() != nil {
				w.WriteHeader(http.StatusInternalServerError)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// suiteRoutes adds the suite's routes to r.
func suiteRoutes(t *testing.T, r chi.Router, gate chan struct{}) {
	r.Get("/x", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("x")) })
	r.Get("/users/{id}", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("user " + chi.URLParam(r, "id"))) })
	r.Get("/status/{code}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(adaptertest.StatusParam(t, chi.URLParam(r, "code")))
	})
	r.Get("/panic", func(http.ResponseWriter, *http.Request) { panic("boom") })
	r.Get("/stream", adaptertest.StreamHandler(gate))
}

var suiteResources = map[string]string{
	adaptertest.RouteX:      "GET /x",
	adaptertest.RouteUser:   "GET /users/{id}",
	adaptertest.RouteStatus: "GET /status/{code}",
	adaptertest.RoutePanic:  "GET /panic",
	adaptertest.RouteStream: "GET /stream",
}

// TestConformance runs the adapters' conformance suite (adaptertest.Run)
// on the middleware installed with Router.Use, behind a recoverer and
// chi's GetHead.
func TestConformance(t *testing.T) {
	adaptertest.Run(t, adaptertest.Adapter{
		Start: func(t *testing.T, g *sluice.Engine, cf adaptertest.Config) adaptertest.Client {
			r := chi.NewRouter()
			r.Use(recoverer, middleware.GetHead, sluicechi.Middleware(g, suiteOptions(cf)...))
			suiteRoutes(t, r, cf.Gate)
			return adaptertest.ServeHTTP(t, r)
		},
		Resource:  func(route string) string { return suiteResources[route] },
		HeadAsGet: true,
		NoRoute:   sluicechi.NoRoute,
	})
}

// TestConformanceMounted runs the suite with the routes in a subrouter
// mounted at /, the middleware installed on the subrouter.
func TestConformanceMounted(t *testing.T) {
	adaptertest.Run(t, adaptertest.Adapter{
		Start: func(t *testing.T, g *sluice.Engine, cf adaptertest.Config) adaptertest.Client {
			r := chi.NewRouter()
			r.Use(recoverer, sluicechi.Middleware(g, suiteOptions(cf)...))
			r.Route("/", func(sub chi.Router) {
				sub.Use(middleware.GetHead)
				suiteRoutes(t, sub, cf.Gate)
			})
			return adaptertest.ServeHTTP(t, r)
		},
		Resource:  func(route string) string { return suiteResources[route] },
		HeadAsGet: true,
		NoRoute:   sluicechi.NoRoute,
	})
}
