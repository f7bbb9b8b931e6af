// Command rulestore shows two instances of a service following their rules
// in Redis: it saves a version of the rules, both engines load it at once
// (pushed by pub/sub), it saves a second one, and it prints what each
// engine runs and what each reported to the store.
//
// Run it from the cluster/redis module: go run ./examples/rulestore.
//
// It starts its own redis-server (on a free loopback port, without
// persistence) when one is on PATH, and otherwise says how to install it
// and exits. It ends within a few seconds.
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
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
	"github.com/sluice-go/sluice/fleet"
)

func main() {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		fmt.Println("redis-server is not on PATH; install Redis to run this example " +
			"(Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis)")
		return
	}
	if err := run(os.Stdout, bin); err != nil {
		log.Fatal(err)
	}
}

// server is a redis-server process on a free loopback port.
type server struct {
	cmd  *exec.Cmd
	addr string
}

func startServer(bin string) (*server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &server{addr: "127.0.0.1:" + strconv.Itoa(port)}
	s.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--logfile", "")
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr})
	defer c.Close()
	for i := 0; i < 200; i++ {
		if c.Ping(context.Background()).Err() == nil {
			return s, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.stop()
	return nil, errors.New("redis-server did not answer within two seconds")
}

func (s *server) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

func run(w io.Writer, bin string) error {
	srv, err := startServer(bin)
	if err != nil {
		return err
	}
	defer srv.stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.addr})
	defer rdb.Close()
	store := sluiceredis.NewRuleStore(rdb, sluiceredis.RuleStoreConfig{Prefix: "example"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Two instances of "shop" follow its rules in the store.
	var engines []*sluice.Engine
	var members []*fleet.Member
	for _, id := range []string{"shop-1", "shop-2"} {
		eng := sluice.New()
		defer eng.Close()
		m, err := fleet.Join(eng, fleet.Config{App: "shop", Instance: id, Rules: store})
		if err != nil {
			return err
		}
		defer m.Close()
		engines = append(engines, eng)
		members = append(members, m)
	}
	waitSubscribed(ctx, rdb, 2)

	docs := []string{
		"flow:\n  - resource: GET /orders\n    threshold: 100\n",
		"flow:\n  - resource: GET /orders\n    threshold: 250\n  - resource: POST /orders\n    threshold: 20\n",
	}
	var base int64
	for _, doc := range docs {
		v, err := store.Save(ctx, "shop", base, cluster.RuleVersion{Doc: []byte(doc), Author: "ops", Comment: "example"})
		if err != nil {
			return err
		}
		base = v.Version
		start := time.Now()
		for _, m := range members {
			for {
				st := m.Status()
				if st.Version == v.Version {
					break
				}
				if ctx.Err() != nil {
					return fmt.Errorf("version %d did not reach %s: %w", v.Version, st.Instance, ctx.Err())
				}
				time.Sleep(time.Millisecond)
			}
		}
		fmt.Fprintf(w, "version %d saved by %s: on both engines within %v\n", v.Version, v.Author, time.Since(start).Round(time.Millisecond))
		for i, eng := range engines {
			for _, r := range eng.Rules().Flow {
				fmt.Fprintf(w, "  %s: %s at %v/s\n", members[i].Status().Instance, r.Resource, r.Threshold)
			}
		}
	}
	// Each engine reported what it runs.
	for {
		reps, err := store.Reports(ctx, "shop")
		if err != nil {
			return err
		}
		if len(reps) == 2 && reps[0].Version == base && reps[1].Version == base {
			for _, r := range reps {
				fmt.Fprintf(w, "report: %s runs version %d\n", r.Instance, r.Version)
			}
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(5 * time.Millisecond)
	}
	hist, err := store.History(ctx, "shop", 10)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "history: %d versions, newest %d\n", len(hist), hist[0].Version)
	return nil
}

// waitSubscribed waits until n engines watch the channel, so that the
// first save is pushed to them (a save before that reaches them at their
// next check, CheckInterval later).
func waitSubscribed(ctx context.Context, rdb *redis.Client, n int64) {
	for ctx.Err() == nil {
		chans, _ := rdb.PubSubNumSub(ctx, "example:rules:{shop}:changed").Result()
		if chans["example:rules:{shop}:changed"] >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
