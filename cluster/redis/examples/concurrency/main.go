// Command concurrency shows a concurrency limit shared by a fleet through
// Redis: "at most 5 exports running across every instance". It starts a
// redis-server (on a free loopback port, without persistence) and three
// instances (three engines in this process, each with its own Redis
// client), each running six workers that make exports of 1.5 s, five times
// the 300 ms lease of a slot, so every export outlives several leases and
// keeps its slot by renewal. Every quarter second it prints the slots in
// use in Redis and each instance's exports in flight: 5 in total, never
// more. Then instance c dies holding its slots (its workers stop without
// exiting their entries, its engine stops renewing): its slots come back
// within the lease, and a and b take them.
//
// Run it from the cluster/redis module: go run ./examples/concurrency.
//
// When redis-server is not on PATH it says how to install Redis and exits.
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

const (
	limit     = 5
	workers   = 6
	call      = 1500 * time.Millisecond
	heartbeat = 100 * time.Millisecond // a slot's lease is three of them
	app       = "demo"
	slotKey   = app + "/conc/export" // the budget's name: application, "conc", resource
)

func main() {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		fmt.Println("redis-server is not on PATH; install Redis to run this example " +
			"(Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis)")
		return
	}
	redis.SetLogger(quiet{})
	if err := run(os.Stdout, bin, 3*time.Second, 3*time.Second); err != nil {
		log.Fatal(err)
	}
}

// quiet drops go-redis's log lines.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// instance is one engine and its workers.
type instance struct {
	name     string
	rdb      *redis.Client
	g        *sluice.Engine
	inflight atomic.Int64
	stop     chan struct{} // closed: the workers stop
	dead     atomic.Bool   // the workers abandon their exports without Exit
	wg       sync.WaitGroup
}

func start(name, addr string) (*instance, error) {
	in := &instance{name: name, stop: make(chan struct{})}
	in.rdb = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	in.g = sluice.New(sluice.WithCluster(sluiceredis.New(in.rdb), sluice.ClusterConfig{
		App: app, InstanceID: name, HeartbeatInterval: heartbeat, ExpectedInstances: 3, Timeout: time.Second,
	}))
	err := in.g.LoadRules(rules.Set{Flow: []rules.Flow{{
		Resource: "export", Metric: rules.Concurrency, Threshold: limit, Cluster: &rules.Cluster{},
	}}})
	if err != nil {
		in.g.Close()
		in.rdb.Close()
		return nil, err
	}
	for i := 0; i < workers; i++ {
		in.wg.Add(1)
		go in.work()
	}
	return in, nil
}

// work makes exports until stop: an admitted one runs for call, a
// refused one is tried again 50 ms later.
func (in *instance) work() {
	defer in.wg.Done()
	for {
		p, err := in.g.Entry("export")
		wait := 50 * time.Millisecond
		if err == nil {
			in.inflight.Add(1)
			wait = call
		}
		select {
		case <-in.stop:
			if err == nil && !in.dead.Load() {
				in.inflight.Add(-1)
				p.Exit()
			}
			return
		case <-time.After(wait):
		}
		if err == nil {
			in.inflight.Add(-1)
			p.Exit()
		}
	}
}

// close stops the workers (a dead instance's leave their exports in
// flight) and the engine.
func (in *instance) close() {
	close(in.stop)
	in.wg.Wait()
	in.g.Close()
	in.rdb.Close()
}

// run starts Redis and the instances, prints the slots in use every
// quarter second for before, kills instance c, prints for after, and
// stops everything.
func run(w io.Writer, redisBin string, before, after time.Duration) error {
	srv, err := startRedis(redisBin)
	if err != nil {
		return err
	}
	defer srv.stop()
	var ins []*instance
	defer func() {
		for _, in := range ins {
			in.close()
		}
	}()
	for _, name := range []string{"a", "b", "c"} {
		in, err := start(name, srv.addr())
		if err != nil {
			return err
		}
		ins = append(ins, in)
	}
	obs := redis.NewClient(&redis.Options{Addr: srv.addr(), MaxRetries: -1})
	defer obs.Close()
	store := sluiceredis.New(obs)
	began := time.Now()
	print := func(until time.Duration, note string) error {
		for time.Since(began) < until {
			time.Sleep(250 * time.Millisecond)
			n, err := store.SlotsInUse(context.Background(), slotKey)
			if err != nil {
				return err
			}
			var per []string
			for _, in := range ins {
				per = append(per, fmt.Sprintf("%s %d", in.name, in.inflight.Load()))
			}
			mark := ""
			if n > limit {
				mark = "  OVER THE LIMIT"
			}
			fmt.Fprintf(w, "%5.2fs  slots in use %d/%d  (%s)%s%s\n", time.Since(began).Seconds(), n, limit, strings.Join(per, ", "), note, mark)
		}
		return nil
	}
	if err := print(before, ""); err != nil {
		return err
	}
	c := ins[2]
	ins = ins[:2]
	held := c.inflight.Load()
	c.dead.Store(true)
	c.close() // renewals stop; its exports never exit
	fmt.Fprintf(w, "instance c died holding %d slots; their leases end within %v\n", held, 3*heartbeat)
	return print(before+after, "")
}

// server is a redis-server process.
type server struct {
	port int
	cmd  *exec.Cmd
}

func startRedis(bin string) (*server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &server{port: l.Addr().(*net.TCPAddr).Port}
	l.Close()
	s.cmd = exec.Command(bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--logfile", "")
	s.cmd.SysProcAttr = childAttr()
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	defer c.Close()
	for i := 0; i < 500; i++ {
		if c.Ping(context.Background()).Err() == nil {
			return s, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.stop()
	return nil, errors.New("redis-server did not answer within five seconds")
}

func (s *server) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }
