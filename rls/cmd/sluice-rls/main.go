// Command sluice-rls is a rate-limit service for Envoy: it answers
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit from a config
// in envoyproxy/ratelimit's format, as a drop-in replacement for it, or from
// sluice rules (-rules) with sluice's own strategies: a rule file, or a rule
// store's URL (the dashboard's: redis://, postgres://, mysql://), followed
// as operators change it.
//
//	go run github.com/sluice-go/sluice/rls/cmd/sluice-rls -config ratelimit.yaml
//
// It prints "listening on HOST:PORT" once it serves, reloads the config when
// its files change (a config that fails to load is logged and the one in
// force stays), and stops gracefully on SIGTERM or SIGINT. docs/rls.md in the
// repository is the guide.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluice-go/sluice/rls"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sluice-rls:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("sluice-rls", flag.ContinueOnError)
	var o rls.ServerOptions
	fs.StringVar(&o.Addr, "addr", "127.0.0.1:8081", "gRPC listen `HOST:PORT`")
	fs.StringVar(&o.Config, "config", "", "config `PATH`: a file or a folder of .yaml files in envoyproxy/ratelimit's format (this or -rules)")
	fs.StringVar(&o.Rules, "rules", "", "sluice rules in place of -config: a rule `file` (YAML or JSON), or a rule store's URL (redis://, postgres://, mysql://: the dashboard's) followed as it changes (docs/rls.md)")
	fs.StringVar(&o.App, "app", rls.DefaultApp, "with -rules: the application whose rules a rule store holds, and whose budgets -redis shares")
	fs.StringVar(&o.Prefix, "prefix", "sluice", "with -rules: prefix of sluice's Redis keys (rule store, shared budgets, telemetry), the dashboard's -prefix")
	fs.StringVar(&o.Service.CallerKey, "caller-key", "", "with -rules: the descriptor entry `KEY` whose value is the caller, for authority and per-caller rules")
	fs.DurationVar(&o.ReloadInterval, "reload-interval", time.Second, "how often the config files are checked for changes (negative: never)")
	fs.StringVar(&o.Metrics, "metrics", "", "serve Prometheus metrics at http://`HOST:PORT`/metrics")
	fs.BoolVar(&o.Reflection, "reflection", false, "register gRPC server reflection (for grpcurl)")
	fs.StringVar(&o.TLSCert, "tls-cert", "", "serve TLS with this certificate `file` (PEM)")
	fs.StringVar(&o.TLSKey, "tls-key", "", "the TLS certificate's key `file` (PEM)")
	fs.StringVar(&o.TLSClientCA, "tls-client-ca", "", "require client certificates signed by this CA `file` (mTLS)")
	fs.StringVar(&o.Redis, "redis", "", "share counts among replicas in this Redis (`URL`: redis://host:port/db or rediss://)")
	fs.DurationVar(&o.RedisOptions.Timeout, "redis-timeout", 250*time.Millisecond, "the longest a request waits for Redis before the local fallback decides it")
	fs.IntVar(&o.RedisOptions.ExpectedInstances, "expected-instances", 10, "replicas the fallback divides limits by until it has counted them")
	fs.StringVar(&o.RedisOptions.Prefix, "redis-prefix", "sluice-rls:", "prefix of the Redis keys")
	fs.BoolVar(&o.RedisOptions.Exact, "redis-exact", false, "count every hit in Redis, as envoyproxy/ratelimit does (same answers), instead of deciding from leases of each window's budget")
	fs.DurationVar(&o.RedisOptions.LeasePeriod, "lease-period", time.Second, "with -redis: the time a lease is sized to last; an unused one is given back after it")
	fs.BoolVar(&o.Service.ResponseHeaders, "response-headers", false, "add RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset to answers")
	fs.BoolVar(&o.Service.StopIncrementWhenOverLimit, "stop-increment-when-over-limit", false, "a request over one descriptor's limit does not count on the others")
	fs.BoolVar(&o.Service.ShadowMode, "shadow-mode", false, "answer OK to every request, counting as usual")
	fs.IntVar(&o.Service.MaxKeys, "max-keys", 1<<20, "the most counters kept in memory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	o.Ready = func(a net.Addr) { fmt.Fprintf(stdout, "listening on %s\n", a) }
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return rls.Run(ctx, o)
}
