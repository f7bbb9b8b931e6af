// Command cluster shows limits shared by three instances of a service
// through Redis. It starts a redis-server (on a free loopback port,
// without persistence) and runs three instances, each its own process
// (this program re-executed), which share two cluster rules: 300 requests
// per second to the API in total, and 50 per second in total for one busy
// user, alice, who sends a quarter of the requests. Each instance is asked
// for 200 requests per second, twice its share. It prints, every second,
// what each instance admitted, the total and alice's; then it stops Redis
// for three seconds: each instance falls back to its local share (a third
// of each limit) and returns to Redis's decisions when it is back. It
// exits by itself after about fifteen seconds.
//
// Run it from the cluster/redis module: go run ./examples/cluster.
//
// When redis-server is not on PATH it says how to install Redis and exits.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
	"github.com/sluice-go/sluice/rules"
)

// envInstance and envPlan tell a re-executed copy of the program that it
// is an instance, and what to run.
const (
	envInstance = "SLUICE_EXAMPLE_INSTANCE"
	envPlan     = "SLUICE_EXAMPLE_PLAN"
)

// plan is the script of a run; times are whole seconds from the first
// second of load.
type plan struct {
	Redis     string // address, set by the parent
	Start     int64  // Unix ns of the first second, set by the parent
	Seconds   int    // length of the run
	Down, Up  int    // Redis is stopped at Down and started again at Up
	Demand    int    // requests per second asked of each instance
	Limit     int    // the API's shared budget per second
	UserLimit int    // alice's shared budget per second
	Instances int
	Timeout   time.Duration // the cluster store's Timeout (and the client's)
}

// report is what an instance writes on stdout for each second of the run.
type report struct {
	Instance int  `json:"instance"`
	Second   int  `json:"second"`
	Admitted int  `json:"admitted"`
	Alice    int  `json:"alice"`    // alice's requests admitted
	Fallback bool `json:"fallback"` // a decision of this second was the fallback's
}

func main() {
	if os.Getenv(envInstance) != "" {
		if err := instance(); err != nil {
			log.Fatal(err)
		}
		return
	}
	p := plan{Demand: 200, Limit: 300, UserLimit: 50, Instances: 3}
	flag.IntVar(&p.Seconds, "seconds", 12, "seconds of load")
	flag.IntVar(&p.Down, "down", 6, "second at which Redis is stopped")
	flag.IntVar(&p.Up, "up", 9, "second at which Redis is started again")
	flag.DurationVar(&p.Timeout, "timeout", 100*time.Millisecond, "how long an entry waits for Redis before its rule's fallback decides")
	flag.Parse()
	if p.Seconds < 1 || p.Seconds > 60 || p.Down < 0 || p.Up < p.Down || p.Up > p.Seconds {
		log.Fatal("need 0 <= down <= up <= seconds <= 60")
	}
	if p.Timeout <= 0 || p.Timeout > 10*time.Second {
		log.Fatal("need 0 < timeout <= 10s")
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		fmt.Println("redis-server is not on PATH; install Redis to run this example " +
			"(Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis)")
		return
	}
	if err := run(os.Stdout, bin, p); err != nil {
		log.Fatal(err)
	}
}

// quiet drops go-redis's log lines (the dial failures while Redis is down
// are the point).
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
	s.cmd.SysProcAttr = childAttr()
	if err := s.cmd.Start(); err != nil {
		return err
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	defer c.Close()
	for i := 0; i < 500; i++ {
		if c.Ping(context.Background()).Err() == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.stop()
	return errors.New("redis-server did not answer within five seconds")
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

// run starts Redis and the instances, prints the table as the seconds
// pass, stops and restarts Redis on schedule, and returns when every
// instance has ended.
func run(w io.Writer, redisBin string, p plan) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	srv := &server{bin: redisBin, port: port}
	if err := srv.start(); err != nil {
		return err
	}
	defer srv.stop()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// Two seconds for the instances to start and count each other.
	start := time.Now().Truncate(time.Second).Add(2 * time.Second)
	p.Redis, p.Start = srv.addr(), start.UnixNano()
	spec, err := json.Marshal(p)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(time.Duration(p.Seconds+10)*time.Second))
	defer cancel()

	reports := make(chan report)
	var readers sync.WaitGroup
	cmds := make([]*exec.Cmd, p.Instances)
	defer func() { // whatever happens, no instance outlives the run
		cancel()
		for _, c := range cmds {
			if c != nil {
				_ = c.Wait()
			}
		}
	}()
	for i := range cmds {
		c := exec.CommandContext(ctx, self)
		c.Env = append(os.Environ(), envInstance+"="+strconv.Itoa(i+1), envPlan+"="+string(spec))
		c.Stderr = os.Stderr
		c.SysProcAttr = childAttr()
		c.WaitDelay = time.Second
		out, err := c.StdoutPipe()
		if err != nil {
			return err
		}
		if err := c.Start(); err != nil {
			return err
		}
		cmds[i] = c
		readers.Add(1)
		go func() {
			defer readers.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var r report
				if json.Unmarshal(sc.Bytes(), &r) == nil {
					reports <- r
				}
			}
		}()
	}
	go func() { readers.Wait(); close(reports) }()

	// Redis goes away at Down and comes back at Up.
	outage := make(chan error, 1)
	go func() {
		t := time.NewTimer(time.Until(start.Add(time.Duration(p.Down) * time.Second)))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			outage <- nil
			return
		}
		srv.stop()
		t.Reset(time.Until(start.Add(time.Duration(p.Up) * time.Second)))
		select {
		case <-t.C:
			outage <- srv.start()
		case <-ctx.Done():
			outage <- nil
		}
	}()

	fmt.Fprintf(w, "%d instances, each asked %d/s, sharing %d/s (alice: %d/s); Redis down in seconds [%d, %d)\n\n",
		p.Instances, p.Demand, p.Limit, p.UserLimit, p.Down, p.Up)
	head := fmt.Sprintf("%6s", "second")
	for i := 1; i <= p.Instances; i++ {
		head += fmt.Sprintf(" %7s", "inst "+strconv.Itoa(i))
	}
	fmt.Fprintf(w, "%s %7s %7s  %s\n", head, "total", "alice", "mode")
	rows := make([][]report, p.Seconds)
	next := 0 // the next row to print
	for r := range reports {
		if r.Second < 0 || r.Second >= p.Seconds || r.Instance < 1 || r.Instance > p.Instances {
			continue
		}
		rows[r.Second] = append(rows[r.Second], r)
		for next < p.Seconds && len(rows[next]) == p.Instances {
			printRow(w, next, rows[next])
			next++
		}
	}
	if err := <-outage; err != nil {
		return err
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			return fmt.Errorf("instance %d: %w", i+1, err)
		}
		cmds[i] = nil
	}
	if next != p.Seconds {
		return fmt.Errorf("%d of %d seconds reported by every instance", next, p.Seconds)
	}
	fmt.Fprintf(w, "\nThe total stays a little under %d: alice's requests pass the API's limit\n"+
		"before hers, and a permit once admitted is spent even when her limit then\n"+
		"refuses the request. While Redis is down each instance admits its local\n"+
		"share, a third of each limit. The restarted Redis is empty: in the second it\n"+
		"comes back, the fallback's admissions and a fresh window can add up to more\n"+
		"than the limit.\n", p.Limit)
	return nil
}

func printRow(w io.Writer, sec int, rs []report) {
	per := make([]int, len(rs))
	total, alice, mode := 0, 0, "remote"
	for _, r := range rs {
		per[r.Instance-1] = r.Admitted
		total += r.Admitted
		alice += r.Alice
		if r.Fallback {
			mode = "fallback"
		}
	}
	line := fmt.Sprintf("%6d", sec)
	for _, n := range per {
		line += fmt.Sprintf(" %7d", n)
	}
	fmt.Fprintf(w, "%s %7d %7d  %s\n", line, total, alice, mode)
}

// instance runs one instance of the service: an engine with the two
// cluster rules, asked Demand requests per second, a quarter of them
// alice's, reporting each second on stdout.
func instance() error {
	redis.SetLogger(quiet{})
	idx, _ := strconv.Atoi(os.Getenv(envInstance))
	var p plan
	if err := json.Unmarshal([]byte(os.Getenv(envPlan)), &p); err != nil {
		return err
	}
	start := time.Unix(0, p.Start)
	// Never outlive the run, whatever happens to the parent.
	life := time.AfterFunc(time.Until(start)+time.Duration(p.Seconds+10)*time.Second, func() { os.Exit(3) })
	defer life.Stop()

	// A client for the decision path: no retries, tight timeouts, the
	// engine's deadline honoured (see docs/design/cluster.md).
	rdb := redis.NewClient(&redis.Options{
		Addr: p.Redis, MaxRetries: -1, DialerRetries: 1, DialTimeout: p.Timeout,
		ReadTimeout: p.Timeout, WriteTimeout: p.Timeout,
		ContextTimeoutEnabled: true,
	})
	defer rdb.Close()
	g := sluice.New(sluice.WithCluster(sluiceredis.New(rdb, sluiceredis.WithPrefix("example")), sluice.ClusterConfig{
		App: "example", InstanceID: fmt.Sprint("instance-", idx), Timeout: p.Timeout,
		ProbeInterval: 250 * time.Millisecond, HeartbeatInterval: 250 * time.Millisecond,
	}))
	defer g.Close()
	err := g.LoadRules(rules.Set{Flow: []rules.Flow{
		{Resource: "GET /api", Threshold: float64(p.Limit), Cluster: &rules.Cluster{}},

		{Resource: "user:alice", Threshold: float64(p.UserLimit), Cluster: &rules.Cluster{}},
	}})

	if err != nil {
		return err
	}
	time.Sleep(time.Until(start)) // the heartbeats count the instances meanwhile

	enc := json.NewEncoder(os.Stdout)
	cur := report{Instance: idx}
	sent := 0
	for {
		el := time.Since(start)
		sec := int(el / time.Second)
		if sec != cur.Second {
			if err := enc.Encode(cur); err != nil {
				return err
			}
			cur = report{Instance: idx, Second: sec}
		}
		if sec >= p.Seconds {
			return nil
		}
		for due := int(el.Seconds() * float64(p.Demand)); sent < due; sent++ {
			ok, byFallback := serve(g, sent%4 == 0)
			if ok {
				cur.Admitted++
				if sent%4 == 0 {
					cur.Alice++
				}
			}
			if st, _ := g.ClusterStatus(); byFallback || st.Fallback {
				cur.Fallback = true
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// serve admits one request, alice's or someone else's, through the API's
// limit and, for alice, hers; it reports whether it passed and whether a
// refusal came from a fallback.
func serve(g *sluice.Engine, alice bool) (ok, byFallback bool) {
	api, err := g.Entry("GET /api")
	if err != nil {
		return false, isFallback(err)
	}
	defer api.Exit()
	if alice {
		u, err := g.Entry("user:alice")
		if err != nil {
			return false, isFallback(err)
		}
		u.Exit()
	}
	return true, false
}

func isFallback(err error) bool {
	var be *sluice.BlockError
	return errors.As(err, &be) && strings.HasPrefix(be.Reason, "cluster fallback")
}
