package rls

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rls/config"
)

// ServerOptions configures Run.
type ServerOptions struct {
	// Addr is the gRPC listen address; empty means 127.0.0.1:8081.
	Addr string
	// Config is a config file or folder (config.Load). Required, unless
	// Rules is set.
	Config string
	// Rules, in place of Config, is a sluice rule file (rules.DecodeFile)
	// served by a RulesService; ReloadInterval applies to it too. A URL
	// redis://, rediss://, postgres://, postgresql:// or mysql:// names a
	// rule store instead (the dashboard's), whose version in force for App
	// is followed with package fleet (docs/rls.md).
	Rules string
	// App is the application whose rules are followed in a rule store and
	// whose budgets are shared with Redis; empty means DefaultApp.
	App string
	// Prefix starts the keys of sluice's Redis stores, with Rules: the
	// rule store in Redis, the shared budgets and the telemetry (the
	// dashboard's -prefix); empty means sluiceredis.DefaultPrefix.
	Prefix string
	// ReloadInterval is how often the config's files are checked for a
	// change; zero means one second, negative never.
	ReloadInterval time.Duration
	// Metrics, when set, serves Prometheus metrics at http://Metrics/metrics.
	Metrics string
	// Reflection registers gRPC server reflection (for grpcurl).
	Reflection bool
	// TLSCert and TLSKey, when set, serve TLS; TLSClientCA, when set too,
	// requires client certificates signed by it (mTLS).
	TLSCert, TLSKey, TLSClientCA string
	// Redis, when set, is a redis:// or rediss:// URL: the replicas share
	// their counts there (RedisOptions tunes how).
	Redis        string
	RedisOptions RedisOptions
	// Service tunes the decisions.
	Service Options
	// Log receives reloads and failures; nil means slog.Default().
	Log *slog.Logger
	// Ready, when set, is called once the server accepts calls, with the
	// address it listens on (Run's caller prints "listening on" there).
	Ready func(addr net.Addr)
	// EngineOptions configure the engine that decides with Rules (a
	// clock, in tests).
	EngineOptions []sluice.Option
	// ShutdownGrace bounds how long Run waits, once ctx ends, for calls in
	// progress; zero means 10 seconds.
	ShutdownGrace time.Duration
}

// Run serves the rate-limit service until ctx ends, then stops gracefully:
// health turns NOT_SERVING, calls in progress finish (within
// ShutdownGrace), and Run returns nil.
func Run(ctx context.Context, o ServerOptions) error {
	o.defaults()
	if o.Rules != "" {
		return runRules(ctx, o)
	}
	if o.Service.CallerKey != "" {
		return errors.New("rls: -caller-key is provided with -rules only")
	}
	if o.Config == "" {
		return errors.New("rls: no config (-config PATH or -rules PATH)")
	}
	cfg, err := config.Load(o.Config)
	if err != nil {
		return err
	}
	svc, closeCounters, err := newServerService(cfg, o)
	if err != nil {
		return err
	}
	defer closeCounters()
	svc.metrics.configLoads.Add(1)

	srv, hs, err := newGRPCServer(o, svc)
	if err != nil {
		return err
	}
	return serve(ctx, o, srv, hs, svc.metrics, func(ctx context.Context) { watchConfig(ctx, o, svc) })
}

// serve listens on o.Addr and serves srv until ctx ends, with the metrics
// and the watch on goroutines it owns.
func serve(ctx context.Context, o ServerOptions, srv *grpc.Server, hs *health.Server, m *metrics, watch func(context.Context)) error {
	lis, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	if o.Metrics != "" {
		if err := serveMetrics(ctx, &wg, o.Metrics, m); err != nil {
			lis.Close()
			return err
		}
	}
	if o.ReloadInterval >= 0 {
		wg.Add(1)
		go func() { defer wg.Done(); watch(ctx) }()
	}

	served := make(chan error, 1)
	wg.Add(1)
	go func() { defer wg.Done(); served <- srv.Serve(lis) }()
	if o.Ready != nil {
		o.Ready(lis.Addr())
	}
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	hs.Shutdown()
	gracefulStop(srv, o.ShutdownGrace)
	return nil
}

func (o *ServerOptions) defaults() {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1:8081"
	}
	if o.ShutdownGrace <= 0 {
		o.ShutdownGrace = 10 * time.Second
	}
}

// gracefulStop lets the calls in progress finish, for at most grace, then
// closes their connections.
func gracefulStop(srv *grpc.Server, grace time.Duration) {
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		srv.Stop()
		<-done
	}
}

func newGRPCServer(o ServerOptions, svc pb.RateLimitServiceServer) (*grpc.Server, *health.Server, error) {
	var sopts []grpc.ServerOption
	if o.TLSCert != "" || o.TLSKey != "" {
		tc, err := serverTLS(o)
		if err != nil {
			return nil, nil, err
		}
		sopts = append(sopts, grpc.Creds(credentials.NewTLS(tc)))
	}
	srv := grpc.NewServer(sopts...)
	pb.RegisterRateLimitServiceServer(srv, svc)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	hs.SetServingStatus(pb.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	if o.Reflection {
		reflection.Register(srv)
	}
	return srv, hs, nil
}

// serveMetrics serves m at http://addr/metrics until ctx ends, on
// goroutines wg waits for.
func serveMetrics(ctx context.Context, wg *sync.WaitGroup, addr string, m *metrics) error {
	mlis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m)
	hsrv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	wg.Add(2)
	go func() { defer wg.Done(); _ = hsrv.Serve(mlis) }()
	go func() { defer wg.Done(); <-ctx.Done(); _ = hsrv.Close() }()
	return nil
}

func newServerService(cfg *config.Config, o ServerOptions) (*Service, func(), error) {
	if o.Redis == "" {
		return NewService(cfg, o.Service), func() {}, nil
	}
	ro, err := redis.ParseURL(o.Redis)
	if err != nil {
		return nil, nil, fmt.Errorf("rls: -redis: %w", err)
	}
	timeout := o.RedisOptions.Timeout
	if timeout <= 0 {
		timeout = 250 * time.Millisecond
	}
	// As sluice's cluster/redis documents: never retry a count (a retried
	// INCRBY whose reply was lost counts twice), honour the deadline.
	ro.MaxRetries = -1
	ro.DialTimeout = 100 * time.Millisecond
	ro.ReadTimeout, ro.WriteTimeout = 4*timeout, 4*timeout
	ro.ContextTimeoutEnabled = true
	client := redis.NewClient(ro)
	m := newMetrics()
	if !o.RedisOptions.Exact {
		lc := newLeaseCounters(client, o.RedisOptions, m, o.Service.MaxKeys, o.Service.Now)
		s := newService(cfg, o.Service, lc)
		s.metrics = m
		return s, func() { lc.close(); client.Close() }, nil
	}
	rc := newRedisCounters(client, o.RedisOptions, m, o.Service.MaxKeys)
	s := newService(cfg, o.Service, rc)
	s.metrics = m
	return s, func() { rc.close(); client.Close() }, nil
}

func serverTLS(o ServerOptions) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("rls: TLS: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if o.TLSClientCA != "" {
		pem, err := os.ReadFile(o.TLSClientCA)
		if err != nil {
			return nil, fmt.Errorf("rls: TLS client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("rls: TLS client CA %s: no certificate", o.TLSClientCA)
		}
		tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// watchConfig reloads the config when its files change (checked every
// ReloadInterval by content digest, so an editor's rename-over and a
// touched-but-unchanged file are both handled); a config that fails to load
// is logged and counted, and the config in force stays.
func watchConfig(ctx context.Context, o ServerOptions, svc *Service) {
	every := o.ReloadInterval
	if every == 0 {
		every = time.Second
	}
	last := configDigest(o.Config)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d := configDigest(o.Config)
		if d == last {
			continue
		}
		last = d
		cfg, err := config.Load(o.Config)
		if err != nil {
			svc.metrics.configErrors.Add(1)
			o.Log.Error("config refused, the config in force stays", "err", err)
			continue
		}
		svc.SetConfig(cfg)
		svc.metrics.configLoads.Add(1)
		o.Log.Info("config loaded", "path", o.Config, "domains", len(cfg.Domains()), "descriptors", cfg.Descriptors())
	}
}

// configDigest digests the config's files (names and contents, bounded as
// LoadConfig bounds them); "" when they cannot be read.
func configDigest(path string) string {
	files, err := config.Files(path)
	if err != nil {
		return "error: " + err.Error()
	}
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%s\x00", filepath.Base(f))
		if r, err := os.Open(f); err == nil {
			_, _ = io.Copy(h, io.LimitReader(r, config.MaxBytes+1))
			r.Close()
		}
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
