// Command consumer is a program of a user's module, outside the
// repository, that requires every published sluice module at the version
// under test (from the local module proxy) and uses each once.
package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"connectrpc.com/connect"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/gofiber/fiber/v2"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"

	"github.com/sluice-go/sluice"
	sluicechi "github.com/sluice-go/sluice/adapters/chi"
	sluiceconnect "github.com/sluice-go/sluice/adapters/connect"
	sluiceecho "github.com/sluice-go/sluice/adapters/echo"
	sluicefiber "github.com/sluice-go/sluice/adapters/fiber"
	sluicegin "github.com/sluice-go/sluice/adapters/gin"
	sluicegrpc "github.com/sluice-go/sluice/adapters/grpc"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	sluiceotel "github.com/sluice-go/sluice/adapters/otel"
	sluiceprom "github.com/sluice-go/sluice/adapters/prometheus"
	"github.com/sluice-go/sluice/cluster"
	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
	"github.com/sluice-go/sluice/dashboard"
	"github.com/sluice-go/sluice/rls"
	rlsconfig "github.com/sluice-go/sluice/rls/config"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("consumer: ok")
}

func run() error {
	engine := sluice.New()
	defer engine.Close()

	// The package-level entry, on the default engine.
	p, err := sluice.Entry("consumer")
	if err != nil {
		return err
	}
	p.Exit()

	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	serve := func(name string, h http.Handler) error {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
		if rec.Code != http.StatusNoContent {
			return fmt.Errorf("%s: status %d", name, rec.Code)
		}
		return nil
	}
	if err := serve("sluicehttp", sluicehttp.Middleware(engine)(ok)); err != nil {
		return err
	}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(sluicegin.Middleware(engine))
	r.GET("/x", func(c *gin.Context) { c.Status(http.StatusNoContent) })
	if err := serve("sluicegin", r); err != nil {
		return err
	}

	cr := chi.NewRouter()
	cr.Use(sluicechi.Middleware(engine))
	cr.Get("/x", ok)
	if err := serve("sluicechi", cr); err != nil {
		return err
	}

	e := echo.New()
	e.Use(sluiceecho.Middleware(engine))
	e.GET("/x", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	if err := serve("sluiceecho", e); err != nil {
		return err
	}

	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(sluicefiber.Middleware(engine))
	app.Get("/x", func(c *fiber.Ctx) error { return c.SendStatus(http.StatusNoContent) })
	fresp, err := app.Test(httptest.NewRequest(http.MethodGet, "/x", nil), -1)
	if err != nil || fresp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("sluicefiber: %v, %v", fresp, err)
	}
	fresp.Body.Close()

	var _ connect.Interceptor = sluiceconnect.NewInterceptor(engine)

	var unary grpc.UnaryServerInterceptor = sluicegrpc.UnaryServerInterceptor(engine)
	resp, err := unary(context.Background(), "req", &grpc.UnaryServerInfo{FullMethod: "/pkg.Svc/Do"},
		func(ctx context.Context, req any) (any, error) { return "resp", nil })
	if err != nil || resp != "resp" {
		return fmt.Errorf("sluicegrpc: %v, %v", resp, err)
	}

	// The Redis store is a cluster.Store; making one does not connect.
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	var _ cluster.Store = sluiceredis.New(client)

	reg := prometheus.NewRegistry()
	reg.MustRegister(sluiceprom.NewCollector(engine))
	fams, err := reg.Gather()
	if err != nil {
		return err
	}
	if len(fams) == 0 || !strings.HasPrefix(fams[0].GetName(), "sluice_") {
		return fmt.Errorf("sluiceprom: gathered %d families", len(fams))
	}

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	otelReg, err := sluiceotel.Register(engine, mp)
	if err != nil {
		return err
	}
	defer otelReg.Unregister()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		return err
	}
	if len(rm.ScopeMetrics) == 0 || len(rm.ScopeMetrics[0].Metrics) == 0 {
		return fmt.Errorf("sluiceotel: collected nothing")
	}

	// A dashboard needs a rule store or folder: New says so.
	var _ http.Handler = (*dashboard.Dashboard)(nil)
	if _, err := dashboard.New(dashboard.Config{}); err == nil {
		return fmt.Errorf("dashboard.New accepted an empty Config")
	}

	if err := rateLimitService(); err != nil {
		return err
	}

	s, _ := engine.Snapshot("GET /x")
	fmt.Printf("consumer: GET /x passed %d times\n", s.TotalPass)
	return nil
}

// rateLimitService decides an envoyproxy/ratelimit config with sluice-rls's
// service, in process: one request a minute, the second refused.
func rateLimitService() error {
	cfg, err := rlsconfig.Parse("consumer.yaml", []byte("domain: d\ndescriptors: [{key: k, rate_limit: {unit: minute, requests_per_unit: 1}}]\n"))
	if err != nil {
		return err
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	svc := rls.NewService(cfg, rls.Options{Now: func() time.Time { return at }})
	req := &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	for i, want := range []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT} {
		got, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil || got.OverallCode != want {
			return fmt.Errorf("rls #%d: %v, %v", i, got, err)
		}
	}
	return nil
}
