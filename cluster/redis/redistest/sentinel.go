package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel timings: a primary that does not answer for SentinelDownAfter is
// down, and a failover that has not completed within
// SentinelFailoverTimeout is abandoned (and retried after twice that).
const (
	SentinelDownAfter       = 500 * time.Millisecond
	SentinelFailoverTimeout = time.Second
)

// Sentinel is a primary, one replica of it and the Redis Sentinels that
// monitor them, on loopback ports.
type Sentinel struct {
	// Name is the name the Sentinels monitor the primary under
	// (redis.UniversalOptions.MasterName).
	Name string
	// Sentinels are the Sentinel processes.
	Sentinels []*Server

	t        testing.TB
	primary  *Server
	replica  *Server
	failedAt *Server // the primary KillPrimary killed, until WaitFailover
}

// StartSentinel starts a primary, a replica of it (--replicaof) and
// sentinels Sentinel processes (redis-server <conf> --sentinel, 1 or more;
// the quorum is a majority of them) monitoring the primary as "sluice",
// with SentinelDownAfter and SentinelFailoverTimeout. It returns once the
// replica is in sync and every Sentinel knows the primary, the replica and
// the other Sentinels, so that a failover can start at once. The test's
// cleanup stops every process.
func StartSentinel(t testing.TB, sentinels int) *Sentinel {
	t.Helper()
	if sentinels < 1 {
		t.Fatalf("redistest: a Sentinel deployment needs at least 1 Sentinel, not %d", sentinels)
	}
	bin := need(t, "redis-server")
	st := &Sentinel{Name: "sluice", t: t}
	st.primary = launch(t, bin, "primary", "", nil)
	// Diskless sync without its default 5 s delay: the replica is in sync
	// within milliseconds.
	st.replica = launch(t, bin, "replica", "", []string{
		"--replicaof", "127.0.0.1", strconv.Itoa(st.primary.port),
		"--repl-diskless-sync-delay", "0",
	})
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := waitInSync(ctx, st.primary, st.replica); err != nil {
		t.Fatalf("redistest: replica not in sync: %v", err)
	}
	// Sentinels start after the sync, so their first INFO of the primary
	// lists the replica (the next comes 10 s later).
	quorum := sentinels/2 + 1
	for i := 0; i < sentinels; i++ {
		dir := t.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d\n"+
			"sentinel down-after-milliseconds %[1]s %[4]d\n"+
			"sentinel failover-timeout %[1]s %[5]d\n",
			st.Name, st.primary.port, quorum,
			SentinelDownAfter.Milliseconds(), SentinelFailoverTimeout.Milliseconds())
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatalf("redistest: %v", err)
		}
		st.Sentinels = append(st.Sentinels, launch(t, bin, "sentinel "+strconv.Itoa(i), conf, nil))
	}
	if err := st.waitKnown(ctx); err != nil {
		t.Fatalf("redistest: Sentinels not ready: %v", err)
	}
	return st
}

// launch starts one redis-server on a free port, retrying on another port
// when the start fails (a port taken meanwhile). A Sentinel (conf set) runs
// in its configuration file's directory, as it rewrites that file.
func launch(t testing.TB, bin, what, conf string, args []string) *Server {
	t.Helper()
	s := &Server{t: t, bin: bin, args: args, conf: conf}
	if conf != "" {
		s.dir = filepath.Dir(conf)
	} else {
		s.dir = t.TempDir()
	}
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
	t.Fatalf("redistest: start %s: %v", what, err)
	return nil
}

// Addrs returns the Sentinels' addresses (redis.UniversalOptions.Addrs
// with MasterName).
func (st *Sentinel) Addrs() []string {
	a := make([]string, len(st.Sentinels))
	for i, s := range st.Sentinels {
		a[i] = s.Addr()
	}
	return a
}

// Primary returns the server that is the primary: the one started as such,
// the promoted replica after WaitFailover.
func (st *Sentinel) Primary() *Server { return st.primary }

// Replica returns the server that is the replica: the one started as such,
// the killed primary after WaitFailover (which no one restarts).
func (st *Sentinel) Replica() *Server { return st.replica }

// Client returns a failover client (it asks the Sentinels for the primary
// and follows their +switch-master) configured for a decision path (no
// retries, one dial attempt, short timeouts, the context's deadline
// honoured), closed by the test's cleanup.
func (st *Sentinel) Client(t testing.TB) *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            st.Name,
		SentinelAddrs:         st.Addrs(),
		MaxRetries:            -1,
		DialerRetries:         1,
		DialTimeout:           time.Second,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          2 * time.Second,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// KillPrimary kills the primary with SIGKILL, as a crash would: what it
// wrote and had not yet sent to the replica is lost. The Sentinels notice
// after SentinelDownAfter and promote the replica; WaitFailover waits for
// that.
func (st *Sentinel) KillPrimary() {
	st.t.Helper()
	if st.failedAt != nil {
		st.t.Fatal("redistest: KillPrimary twice without WaitFailover")
	}
	st.failedAt = st.primary
	st.primary.Kill()
}

// WaitFailover waits, at most timeout, until every Sentinel names the
// replica as the primary and the replica reports role:master, and returns
// the new primary. It fails the test when the Sentinels have not completed
// a failover in time.
func (st *Sentinel) WaitFailover(timeout time.Duration) *Server {
	st.t.Helper()
	if st.failedAt == nil {
		st.t.Fatal("redistest: WaitFailover without KillPrimary")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	next := st.replica
	want := next.Addr()
	rc := redis.NewClient(&redis.Options{Addr: want, MaxRetries: -1})
	defer rc.Close()
	var last string
	for {
		ok := true
		for _, s := range st.Sentinels {
			addr, err := sentinelMaster(ctx, s.Addr(), st.Name)
			if err != nil || addr != want {
				ok, last = false, fmt.Sprintf("Sentinel %s names %q (%v)", s.Addr(), addr, err)
				break
			}
		}
		if ok {
			info, err := rc.Info(ctx, "replication").Result()
			if err == nil && strings.Contains(info, "role:master") {
				break
			}
			ok, last = false, fmt.Sprintf("%s: %q, %v", want, firstLines(info, 2), err)
		}
		select {
		case <-ctx.Done():
			logs := ""
			for _, s := range st.Sentinels {
				logs += "\nSentinel " + s.Addr() + ":\n" + s.tail()
			}
			st.t.Fatalf("redistest: no failover to %s within %v: %s%s", want, timeout, last, logs)
		case <-time.After(10 * time.Millisecond):
		}
	}
	st.primary, st.replica, st.failedAt = next, st.failedAt, nil
	return next
}

func sentinelMaster(ctx context.Context, addr, name string) (string, error) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer sc.Close()
	a, err := sc.GetMasterAddrByName(ctx, name).Result()
	if err != nil {
		return "", err
	}
	if len(a) != 2 {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME answered %q", a)
	}
	return a[0] + ":" + a[1], nil
}

// waitInSync polls INFO replication until the replica's link is up and the
// primary lists it online.
func waitInSync(ctx context.Context, primary, replica *Server) error {
	pc := redis.NewClient(&redis.Options{Addr: primary.Addr(), MaxRetries: -1})
	defer pc.Close()
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr(), MaxRetries: -1})
	defer rc.Close()
	want := "port=" + strconv.Itoa(replica.port) + ",state=online"
	for {
		ri, err1 := rc.Info(ctx, "replication").Result()
		pi, err2 := pc.Info(ctx, "replication").Result()
		if err1 == nil && err2 == nil && strings.Contains(ri, "master_link_status:up") && strings.Contains(pi, want) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%v: replica %q (%v), primary %q (%v)", ctx.Err(), firstLines(ri, 6), err1, firstLines(pi, 4), err2)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitKnown polls every Sentinel until it sees the primary up, the replica
// up with its link to the primary, and the other Sentinels.
func (st *Sentinel) waitKnown(ctx context.Context) error {
	for _, s := range st.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		var last string
		for {
			m, err := sc.Master(ctx, st.Name).Result()
			ok := err == nil && m["flags"] == "master" && m["num-slaves"] == "1" &&
				m["num-other-sentinels"] == strconv.Itoa(len(st.Sentinels)-1)
			last = fmt.Sprintf("master %v, %v", m, err)
			if ok {
				rs, err := sc.Replicas(ctx, st.Name).Result()
				ok = err == nil && len(rs) == 1 && rs[0]["flags"] == "slave" &&
					rs[0]["master-link-status"] == "ok" && rs[0]["port"] == strconv.Itoa(st.replica.port)
				last = fmt.Sprintf("replicas %v, %v", rs, err)
			}
			if ok {
				break
			}
			select {
			case <-ctx.Done():
				_ = sc.Close()
				return fmt.Errorf("Sentinel %s: %v: %s; log:\n%s", s.Addr(), ctx.Err(), last, s.tail())
			case <-time.After(20 * time.Millisecond):
			}
		}
		_ = sc.Close()
	}
	return nil
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+2)
	if len(lines) > n+1 {
		lines = lines[:n+1]
	}
	return strings.Join(lines, " ")
}
