package sluicefiber_test

import (
	"bufio"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice"
	sluicefiber "github.com/sluice-go/sluice/adapters/fiber"
	"github.com/sluice-go/sluice/adapters/fiber/internal/adaptertest"
)

// fasthttp's worker pool leaves its cleaner asleep for up to 10 s after the
// server stops (it then ends), and its Date header's updater runs for the
// life of the process.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"))
}

// recoverer turns a panic into a 500, as fiber's recover middleware does.
func recoverer(c *fiber.Ctx) (err error) {
	defer func() {
		if recover() != nil {
			err = fiber.ErrInternalServerError
		}
	}()
	return c.Next()
}

// serve runs app on 127.0.0.1 until the test ends, and returns the suite's
// client for it.
func serve(t *testing.T, app *fiber.App) adaptertest.HTTPClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- app.Listener(lis) }()
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		require.NoError(t, app.ShutdownWithTimeout(10*time.Second))
		require.NoError(t, <-served)
	})
	return adaptertest.HTTPClient{URL: "http://" + lis.Addr().String(), C: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

// TestConformance runs the adapters' conformance suite (adaptertest.Run)
// on the middleware installed with Use, and on each route when the case
// needs path parameters, handlers failing with fiber.Error and the stream
// written through SetBodyStreamWriter.
func TestConformance(t *testing.T) {
	adaptertest.Run(t, adaptertest.Adapter{
		Start: func(t *testing.T, g *sluice.Engine, cf adaptertest.Config) adaptertest.Client {
			var opts []sluicefiber.Option
			if cf.Policy != nil {
				opts = append(opts, sluicefiber.WithRefusalPolicy(*cf.Policy))
			}
			if cf.ErrorStatus != nil {
				opts = append(opts, sluicefiber.WithErrorStatus(cf.ErrorStatus))
			}
			if cf.Caller {
				opts = append(opts, sluicefiber.WithCaller(sluicefiber.CallerSource{Header: "X-Caller"}))
			}
			if cf.RateLimit {
				opts = append(opts, sluicefiber.WithRateLimitHeaders(true))
			}
			if cf.Args {
				opts = append(opts, sluicefiber.WithArgs(sluicefiber.Param("id"), sluicefiber.Header("X-User"), sluicefiber.Query("q")))
			}
			mw := sluicefiber.Middleware(g, opts...)
			app := fiber.New(fiber.Config{DisableStartupMessage: true})
			app.Use(recoverer)
			// Path parameters are known to a middleware of the route: with
			// arguments, the middleware is one of each route's handlers,
			// otherwise installed with Use.
			var route []fiber.Handler
			if cf.Args {
				route = append(route, mw)
			} else {
				app.Use(mw)
			}
			get := func(path string, h fiber.Handler) { app.Get(path, append(route, h)...) }
			get("/x", func(c *fiber.Ctx) error { return c.SendString("x") })
			get("/users/:id", func(c *fiber.Ctx) error { return c.SendString("user " + c.Params("id")) })
			get("/status/:code", func(c *fiber.Ctx) error {
				return fiber.NewError(adaptertest.StatusParam(t, c.Params("code")))
			})
			get("/panic", func(*fiber.Ctx) error { panic("boom") })
			get("/stream", func(c *fiber.Ctx) error {
				sluicefiber.SetBodyStreamWriter(c, func(w *bufio.Writer) {
					_, _ = w.WriteString("first")
					_ = w.Flush()
					<-cf.Gate
					_, _ = w.WriteString("last")
				})
				return nil
			})
			return serve(t, app)
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
		NoRoute:   sluicefiber.NoRoute,
	})
}
