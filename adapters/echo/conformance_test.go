package sluiceecho_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice"
	sluiceecho "github.com/sluice-go/sluice/adapters/echo"
	"github.com/sluice-go/sluice/adapters/echo/internal/adaptertest"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recoverer turns a panic into a 500, as middleware.Recover does, without
// logging it.
func recoverer(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if recover() != nil {
				err = echo.NewHTTPError(http.StatusInternalServerError)
			}
		}()
		return next(c)
	}
}

// TestConformance runs the adapters' conformance suite (adaptertest.Run)
// on the middleware installed with Echo.Use, the routes serving GET and
// HEAD, handlers failing with echo.HTTPError.
func TestConformance(t *testing.T) {
	adaptertest.Run(t, adaptertest.Adapter{
		Start: func(t *testing.T, g *sluice.Engine, cf adaptertest.Config) adaptertest.Client {
			var opts []sluiceecho.Option
			if cf.Policy != nil {
				opts = append(opts, sluiceecho.WithRefusalPolicy(*cf.Policy))
			}
			if cf.ErrorStatus != nil {
				opts = append(opts, sluiceecho.WithErrorStatus(cf.ErrorStatus))
			}
			if cf.Caller {
				opts = append(opts, sluiceecho.WithCaller(sluicehttp.CallerSource{Header: "X-Caller"}))
			}
			if cf.RateLimit {
				opts = append(opts, sluiceecho.WithRateLimitHeaders(true))
			}
			if cf.Args {
				opts = append(opts, sluiceecho.WithArgs(sluiceecho.Param("id"), sluiceecho.Header("X-User"), sluiceecho.Query("q")))
			}
			e := echo.New()
			e.HideBanner, e.HidePort = true, true
			e.Use(recoverer, sluiceecho.Middleware(g, opts...))
			get := func(path string, h echo.HandlerFunc) { e.Match([]string{http.MethodGet, http.MethodHead}, path, h) }
			get("/x", func(c echo.Context) error { return c.String(200, "x") })
			get("/users/:id", func(c echo.Context) error { return c.String(200, "user "+c.Param("id")) })
			get("/status/:code", func(c echo.Context) error {
				return echo.NewHTTPError(adaptertest.StatusParam(t, c.Param("code")))
			})
			get("/panic", func(echo.Context) error { panic("boom") })
			get("/stream", func(c echo.Context) error {
				adaptertest.StreamHandler(cf.Gate)(c.Response(), c.Request())
				return nil
			})
			return adaptertest.ServeHTTP(t, e)
		},
		Resource: func(route string) string {
			return map[string]string{
				adaptertest.RouteX:      "GET /x",
				adaptertest.RouteUser:   "GET /users/:id",
				adaptertest.RouteStatus: "GET /status/:code",
				adaptertest.RoutePanic:  "GET /panic",
				adaptertest.RouteStream: "GET /stream",
			}[route]
		},
		HeadAsGet: true,
		NoRoute:   sluiceecho.NoRoute,
	})
}
