package sluicegin_test

import (
	"io"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/sluice-go/sluice"
	sluicegin "github.com/sluice-go/sluice/adapters/gin"
	"github.com/sluice-go/sluice/adapters/gin/internal/adaptertest"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
)

// TestConformance runs the adapters' conformance suite (adaptertest.Run)
// on the middleware of a gin engine. gin serves HEAD only with HEAD routes,
// so a HEAD to a GET route is a 404 under NoRoute.
func TestConformance(t *testing.T) {
	adaptertest.Run(t, adaptertest.Adapter{
		Start: func(t *testing.T, g *sluice.Engine, cf adaptertest.Config) adaptertest.Client {
			var opts []sluicegin.Option
			if cf.Policy != nil {
				opts = append(opts, sluicegin.WithRefusalPolicy(*cf.Policy))
			}
			if cf.Caller {
				opts = append(opts, sluicegin.WithCaller(sluicehttp.CallerSource{Header: "X-Caller"}))
			}
			if cf.RateLimit {
				opts = append(opts, sluicegin.WithRateLimitHeaders(true))
			}
			if f := cf.ErrorStatus; f != nil {
				opts = append(opts, sluicegin.WithErrorFunc(func(c *gin.Context) error {
					if st := c.Writer.Status(); f(st) {
						return &sluicehttp.StatusError{Code: st}
					}
					return nil
				}))
			}
			if cf.Args {
				opts = append(opts, sluicegin.WithArgs(sluicegin.Param("id"), sluicegin.Header("X-User"), sluicegin.Query("q")))
			}
			r := gin.New()
			r.Use(gin.RecoveryWithWriter(io.Discard), sluicegin.Middleware(g, opts...))
			r.GET("/x", func(c *gin.Context) { c.String(200, "x") })
			r.GET("/users/:id", func(c *gin.Context) { c.String(200, "user "+c.Param("id")) })
			r.GET("/status/:code", func(c *gin.Context) { c.Status(adaptertest.StatusParam(t, c.Param("code"))) })
			r.GET("/panic", func(*gin.Context) { panic("boom") })
			r.GET("/stream", func(c *gin.Context) { adaptertest.StreamHandler(cf.Gate)(c.Writer, c.Request) })
			return adaptertest.ServeHTTP(t, r)
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
		NoRoute: sluicegin.NoRoute,
	})
}
