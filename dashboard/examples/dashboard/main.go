// Command dashboard is the dashboard's demo: a Redis on a free loopback
// port, three instances of the application "shop" under load, following
// its rules in Redis and publishing their figures (fleet.Join), and
// beating as members (sluice.WithCluster), and
// the dashboard, with a
// viewer's and an editor's credentials printed. It runs until Ctrl-C, or
// for -duration.
//
//	go run ./examples/dashboard            # from the dashboard folder
//
// It needs redis-server on PATH; without it, it says so and exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
	"github.com/sluice-go/sluice/dashboard"
	"github.com/sluice-go/sluice/fleet"
)

const app = "shop"

// rulesV1 are the first rules of shop. The system rule, on a load far
// above the demo's, makes the instances measure load, CPU and memory (an
// engine samples them only under a system rule on load1 or CPU usage),
// so that the instances' table shows them.
const rulesV1 = `flow:
  - resource: GET /products
    threshold: 150
  - resource: POST /orders
    threshold: 20
isolation:
  - resource: GET /search
    threshold: 8
circuitBreaker:
  - resource: GET /search
    strategy: error-ratio
    threshold: 0.5
    minRequestAmount: 10
    retryTimeout: 5s
param:
  - resource: POST /orders
    threshold: 5
system:
  - metric: load1
    threshold: 64
`

// demoUsers are the demo accounts: name and password.
var demoUsers = []struct{ name, password, role string }{
	{"viewer", "viewer-demo", "viewer"},
	{"editor", "editor-demo", "editor"},
	{"admin", "admin-demo", "admin"},
}

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "dashboard demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("dashboard", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8089", "address of the dashboard")
	duration := fs.Duration("duration", 0, "stop this long after the dashboard is up (0: at Ctrl-C)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		fmt.Fprintln(out, "This demo needs redis-server on PATH (apt-get install redis-server, brew install redis); nothing to do.")
		return nil
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	addr, stopRedis, err := startRedis(ctx, bin)
	if err != nil {
		return err
	}
	defer stopRedis()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	rs := sluiceredis.NewRuleStore(rdb, sluiceredis.RuleStoreConfig{})
	tel := sluiceredis.NewTelemetry(rdb, sluiceredis.TelemetryConfig{})
	if _, err := rs.Save(ctx, app, 0, cluster.RuleVersion{Doc: []byte(rulesV1), Author: "demo", Comment: "first rules"}); err != nil {
		return err
	}

	// Three instances under load, following shop's rules.
	var wg sync.WaitGroup
	defer wg.Wait()
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	shared := sluiceredis.New(rdb)
	for i := 1; i <= 3; i++ {
		eng := sluice.New(sluice.WithCluster(shared, sluice.ClusterConfig{App: app, InstanceID: app + "-" + strconv.Itoa(i)}))
		defer eng.Close()
		m, err := fleet.Join(eng, fleet.Config{App: app, Rules: rs, Telemetry: tel})
		if err != nil {
			return err
		}
		defer m.Close()
		load(loadCtx, &wg, eng)
	}

	var users []dashboard.User
	for _, u := range demoUsers {
		h, err := bcrypt.GenerateFromPassword([]byte(u.password), bcrypt.DefaultCost)
		if err != nil {
			return err
		}
		users = append(users, dashboard.User{Name: u.name, Hash: string(h), Role: u.role, Apps: []string{app}})
	}
	d, err := dashboard.New(dashboard.Config{Rules: rs, Telemetry: tel, Members: shared, Users: users})
	if err != nil {
		return err
	}
	defer d.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: d, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	fmt.Fprintf(out, "sluice dashboard: http://%s/ (Redis on %s)\n", ln.Addr(), addr)
	for _, u := range demoUsers {
		fmt.Fprintf(out, "  %-7s log in as %s / %s\n", u.role, u.name, u.password)
	}
	fmt.Fprintln(out, "Three instances of shop are under load. Ctrl-C stops.")
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}

	select {
	case err = <-errc:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = srv.Shutdown(sctx)
		cancel()
		<-errc
	}
	stopLoad()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// load sends requests to eng's resources until ctx ends: each worker waits
// for its turn, enters, works a few milliseconds and exits.
func load(ctx context.Context, wg *sync.WaitGroup, eng *sluice.Engine) {
	type stream struct {
		resource string
		every    time.Duration // between two requests of one worker
		workers  int
		work     time.Duration // mean work time
		failures float64       // share of calls that fail
		users    int           // distinct callers (the param rule's argument)
	}
	for _, s := range []stream{
		{"GET /products", 20 * time.Millisecond, 4, 4 * time.Millisecond, 0, 0},
		{"POST /orders", 100 * time.Millisecond, 3, 15 * time.Millisecond, 0, 4},
		{"GET /search", 15 * time.Millisecond, 12, 25 * time.Millisecond, 0.2, 0},
	} {
		for w := 0; w < s.workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t := time.NewTicker(s.every)
				defer t.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-t.C:
					}
					var opts []sluice.EntryOption
					if s.users > 0 {
						opts = append(opts, sluice.WithStringArg(0, "user-"+strconv.Itoa(rand.IntN(s.users))))
					}
					p, err := eng.Entry(s.resource, opts...)
					if err != nil {
						continue
					}
					time.Sleep(time.Duration(rand.Int64N(int64(2 * s.work))))
					if rand.Float64() < s.failures {
						p.SetError(errors.New("backend failed"))
					}
					p.Exit()
				}
			}()
		}
	}
}

// startRedis runs redis-server on a free loopback port, saving nothing to
// disk, until stop.
func startRedis(ctx context.Context, bin string) (addr string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir, err := os.MkdirTemp("", "sluice-dashboard-demo")
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	stop = func() {
		cmd.Process.Kill()
		cmd.Wait()
		os.RemoveAll(dir)
	}
	addr = "127.0.0.1:" + strconv.Itoa(port)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for rdb.Ping(ctx).Err() != nil {
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			return "", nil, fmt.Errorf("redis-server on %s did not answer within 10 s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return addr, stop, nil
}
