// Command cluster shows a limit shared by three instances of a service
// through Redis: three engines in one process share 300 requests per
// second while each is asked for 200, and Redis goes away for two seconds
// in the middle, so the table shows the shared budget, the local shares of
// the fallback (100/s each) and the recovery.
//
// Run it from the cluster/redis module: go run ./examples/cluster.
//
// It starts its own redis-server (on a free loopback port, without
// persistence) when one is on PATH, and otherwise says how to install it
// and exits. It runs for eight seconds.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
	"github.com/sluice-go/sluice/rules"
)

// plan is the script of a run, in whole seconds from its start.
type plan struct {
	seconds      int // length of the run
	down, up     int // Redis is killed at down and restarted at up
	demand       int // requests per second asked of each instance
	limit        int // the shared budget per second
	instances    int
	serverBinary string
}

func main() {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		fmt.Println("redis-server is not on PATH; install Redis to run this example " +
			"(Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis)")
		return
	}
	p := plan{seconds: 8, down: 3, up: 5, demand: 200, limit: 300, instances: 3, serverBinary: bin}
	if err := run(os.Stdout, p); err != nil {
		log.Fatal(err)
	}
}

// quiet drops go-redis's log lines.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// server is a redis-server process on a fixed port.
type server struct {
	bin  string
	port int
	cmd  *exec.Cmd
}

func (s *server) start() error {
	s.cmd = exec.Command(s.bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--logfile", "")
	if err := s.cmd.Start(); err != nil {
		return err
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr()})
	defer c.Close()
	for i := 0; i < 200; i++ {
		if c.Ping(context.Background()).Err() == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.stop()
	return errors.New("redis-server did not answer within two seconds")
}

func (s *server) stop() {
	if s.cmd != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func run(w io.Writer, p plan) error {
	redis.SetLogger(quiet{}) // the dial failures while Redis is down are the point
	port, err := freePort()
	if err != nil {
		return err
	}
	srv := &server{bin: p.serverBinary, port: port}
	if err := srv.start(); err != nil {
		return err
	}
	defer srv.stop()

	// A client for the decision path: no retries, tight timeouts, the
	// engine's deadline honoured (see docs/cluster.md).
	rdb := redis.NewClient(&redis.Options{
		Addr: srv.addr(), MaxRetries: -1, DialerRetries: 1, DialTimeout: 100 * time.Millisecond,
		ReadTimeout: 50 * time.Millisecond, WriteTimeout: 50 * time.Millisecond,
		ContextTimeoutEnabled: true,
	})
	defer rdb.Close()
	store := sluiceredis.New(rdb, sluiceredis.WithPrefix("example"))

	rule := rules.Flow{Resource: "GET /api", Threshold: float64(p.limit), Cluster: &rules.Cluster{}}
	engines := make([]*sluice.Engine, p.instances)
	for i := range engines {
		engines[i] = sluice.New(sluice.WithCluster(store, sluice.ClusterConfig{
			App: "example", InstanceID: fmt.Sprintf("instance-%d", i+1),
			ProbeInterval: 250 * time.Millisecond, HeartbeatInterval: 250 * time.Millisecond,
		}))
		defer engines[i].Close()
		if _, err := engines[i].LoadFlowRules([]rules.Flow{rule}); err != nil {
			return err
		}
	}
	// Let the heartbeats count the instances before the run.
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if st, _ := engines[0].ClusterStatus(); st.Live == p.instances {
			break
		}
	}

	admitted := make([][]atomic.Int64, p.seconds)
	modes := make([]atomic.Int32, p.seconds) // seconds with a fallback decision
	for s := range admitted {
		admitted[s] = make([]atomic.Int64, p.instances)
	}
	start := time.Now().Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(start))
	var wg sync.WaitGroup
	for i, eng := range engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := 0
			for {
				el := time.Since(start)
				if el >= time.Duration(p.seconds)*time.Second {
					return
				}
				for due := int(el.Seconds() * float64(p.demand)); sent < due; sent++ {
					sec := int(time.Since(start) / time.Second)
					if sec >= p.seconds {
						return
					}
					if st, _ := eng.ClusterStatus(); st.Mode == sluice.ClusterFallback {
						modes[sec].Store(1)
					}
					if pass, err := eng.Entry("GET /api"); err == nil {
						pass.Exit()
						admitted[sec][i].Add(1)
					}
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	time.Sleep(time.Until(start.Add(time.Duration(p.down) * time.Second)))
	srv.stop()
	time.Sleep(time.Until(start.Add(time.Duration(p.up) * time.Second)))
	if err := srv.start(); err != nil {
		return err
	}
	wg.Wait()

	fmt.Fprintf(w, "%d instances, each asked %d/s, sharing %d/s; Redis down in seconds [%d, %d)\n\n",
		p.instances, p.demand, p.limit, p.down, p.up)
	head := []string{"second"}
	for i := range engines {
		head = append(head, fmt.Sprintf("inst %d", i+1))
	}
	fmt.Fprintln(w, strings.Join(append(head, "total", "mode"), "\t"))
	for s := range admitted {
		row := []string{strconv.Itoa(s)}
		total := int64(0)
		for i := range engines {
			n := admitted[s][i].Load()
			total += n
			row = append(row, strconv.FormatInt(n, 10))
		}
		mode := "remote"
		if modes[s].Load() == 1 {
			mode = "fallback"
		}
		fmt.Fprintln(w, strings.Join(append(row, strconv.FormatInt(total, 10), mode), "\t"))
	}
	fmt.Fprintln(w, "\nWhile Redis is down each instance admits its local share, limit/instances.\n"+
		"The restarted Redis is empty: in the second it comes back, the fallback's\n"+
		"admissions and a fresh window add up to more than the limit.")
	return nil
}
