// Package redistest runs real redis-server processes for tests, as
// net/http/httptest runs HTTP servers: a standalone server that can be
// killed and restarted on the same port, a Redis Cluster of primaries on
// loopback ports, and a primary with a replica watched by Redis Sentinels
// (StartSentinel), whose primary can be killed for a failover. Every process
// belongs to the test that started it and is stopped by its cleanup; on
// Linux the kernel also kills it if the test binary dies first.
//
// When redis-server (or, for a cluster, redis-cli) is not on PATH the test
// is skipped with a message saying how to install it, except under CI=true,
// where it fails: CI must run these tests.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startTimeout bounds how long a server may take to answer PING, and a
// cluster to agree on its slots.
const startTimeout = 20 * time.Second

// Server is one redis-server process owned by a test.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	args []string // after --port N
	conf string   // a Sentinel's configuration file, first on its command line

	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	log  string
}

// need returns the path of the named binary, or ends the test: skipped, or
// failed under CI=true.
func need(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := fmt.Sprintf("%s not on PATH: install Redis (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis) to run these tests", name)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: failing instead of skipping)")
	}
	t.Skip(msg)
	return ""
}

// Start starts a standalone redis-server on a free loopback port, without
// persistence, with extra arguments appended to its command line (for
// example "--maxmemory", "10mb"). The test's cleanup stops it.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin := need(t, "redis-server")
	s := &Server{t: t, bin: bin, dir: t.TempDir(), args: extra}
	t.Cleanup(s.Stop)
	var err error
	for try := 0; try < 5; try++ {
		if s.port, err = freePort(false); err != nil {
			continue
		}
		if err = s.start(); err == nil {
			return s
		}
	}
	t.Fatalf("redistest: start redis-server: %v", err)
	return nil
}

// Addr returns the server's address, "127.0.0.1:port".
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

// Client returns a client of the server configured for a decision path (no
// retries, short timeouts, the context's deadline honoured), closed by the
// test's cleanup.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:                  s.Addr(),
		MaxRetries:            -1,
		DialTimeout:           time.Second,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          2 * time.Second,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (s *Server) start() error {
	var args []string
	if s.conf != "" {
		args = []string{s.conf, "--sentinel"}
	}
	args = append(args,
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--daemonize", "no", "--logfile", "")
	args = append(args, s.args...)
	s.log = filepath.Join(s.dir, "redis.log")
	lf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		_ = lf.Close()
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = lf.Close()
		close(done)
	}()
	s.cmd, s.done = cmd, done
	if err := s.waitReady(); err != nil {
		s.Kill()
		return fmt.Errorf("%w; log:\n%s", err, s.tail())
	}
	return nil
}

// waitReady polls PING until the server answers, it exits, or startTimeout.
func (s *Server) waitReady() error {
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-s.done:
			return errors.New("redis-server exited during start")
		default:
		}
		if ping(s.Addr()) == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on port %d not ready after %v", s.port, startTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ping sends one PING in RESP and expects +PONG (or -NOAUTH from a server
// that requires a password).
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	// A server with a password answers NOAUTH: it is up.
	if !strings.HasPrefix(line, "+PONG") && !strings.HasPrefix(line, "-NOAUTH") {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

func (s *Server) tail() string {
	b, _ := os.ReadFile(s.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Kill ends the server with SIGKILL, as a crash would, and waits for it to
// exit. Its data is lost (there is no persistence). Killing a stopped
// server does nothing.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart starts a killed server again on the same port, empty.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	if err := s.start(); err != nil {
		s.t.Fatalf("redistest: restart redis-server on port %d: %v", s.port, err)
	}
}

// RestartWith starts a killed server again on the same port, empty, with
// extra as its extra arguments instead of those it had (for example
// "--requirepass", "other").
func (s *Server) RestartWith(extra ...string) {
	s.t.Helper()
	s.Kill()
	s.args = extra
	if err := s.start(); err != nil {
		s.t.Fatalf("redistest: restart redis-server on port %d: %v", s.port, err)
	}
}

// Stop ends the server if it runs; the test's cleanup calls it.
func (s *Server) Stop() { s.Kill() }

// freePort returns a loopback TCP port that was free a moment ago; with
// bus, one whose port+10000 (a Cluster node's bus port) was free too.
func freePort(bus bool) (int, error) {
	for try := 0; try < 100; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		if !bus {
			_ = l.Close()
			return p, nil
		}
		if p+10000 > 65535 {
			_ = l.Close()
			continue
		}
		l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000))
		_ = l.Close()
		if err != nil {
			continue
		}
		_ = l2.Close()
		return p, nil
	}
	return 0, errors.New("no free port pair")
}

// Cluster is a Redis Cluster of primaries (no replicas) on loopback ports.
type Cluster struct {
	// Nodes are the primaries, in the order the cluster was created.
	Nodes []*Server
}

// StartCluster starts masters cluster-enabled servers (at least 3), joins
// them with redis-cli --cluster create, and waits until every node reports
// cluster_state:ok with all 16384 slots assigned. The test's cleanup stops
// every node.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("redistest: a cluster needs at least 3 primaries, not %d", masters)
	}
	bin := need(t, "redis-server")
	cli := need(t, "redis-cli")
	c := &Cluster{}
	for i := 0; i < masters; i++ {
		s := &Server{t: t, bin: bin, dir: t.TempDir(), args: []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
		}}
		t.Cleanup(s.Stop)
		var err error
		for try := 0; try < 5; try++ {
			if s.port, err = freePort(true); err != nil {
				continue
			}
			if err = s.start(); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("redistest: start cluster node %d: %v", i, err)
		}
		c.Nodes = append(c.Nodes, s)
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.waitOK(ctx); err != nil {
		t.Fatalf("redistest: cluster not ready: %v", err)
	}
	return c
}

// Addrs returns the primaries' addresses.
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		a[i] = s.Addr()
	}
	return a
}

// Client returns a cluster client configured for a decision path (no
// retries or redirects, short timeouts, the context's deadline honoured),
// closed by the test's cleanup.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 c.Addrs(),
		MaxRetries:            -1,
		MaxRedirects:          -1,
		DialTimeout:           time.Second,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          2 * time.Second,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func (c *Cluster) waitOK(ctx context.Context) error {
	for _, s := range c.Nodes {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		var info string
		var err error
		for {
			info, err = rc.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, "cluster_slots_ok:16384") &&
				strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(c.Nodes))) {
				break
			}
			select {
			case <-ctx.Done():
				_ = rc.Close()
				return fmt.Errorf("node %s: %v (last info %q, err %v)", s.Addr(), ctx.Err(), info, err)
			case <-time.After(20 * time.Millisecond):
			}
		}
		_ = rc.Close()
	}
	return nil
}
