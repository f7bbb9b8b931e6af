package rls

import (
	"context"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/cluster/sqlstore"
	"github.com/sluice-go/sluice/cluster/sqlstore/sqltest"
	"github.com/sluice-go/sluice/sluicetest"
)

// ruleStores are the rule stores -rules takes, each on a real server
// started for the test: its URL and the store to save versions in.
func ruleStores(t *testing.T) map[string]func(t *testing.T) (string, cluster.RuleStore) {
	return map[string]func(t *testing.T) (string, cluster.RuleStore){
		"redis": func(t *testing.T) (string, cluster.RuleStore) {
			srv := redistest.Start(t)
			return "redis://" + srv.Addr() + "/0", sluiceredis.NewRuleStore(srv.Client(t), sluiceredis.RuleStoreConfig{})
		},
		"postgres": func(t *testing.T) (string, cluster.RuleStore) { return sqlStore(t, sqltest.Postgres) },
		"mariadb":  func(t *testing.T) (string, cluster.RuleStore) { return sqlStore(t, sqltest.MariaDB) },
	}
}

func sqlStore(t *testing.T, kind string) (string, cluster.RuleStore) {
	srv := sqltest.Start(t, kind)
	u := srv.URL(srv.NewDatabase(t), "", "")
	s, err := sqlstore.Open(context.Background(), u, sqlstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return u, s
}

// save saves doc as app's version base+1.
func save(t *testing.T, s cluster.RuleStore, app string, base int64, doc string) {
	t.Helper()
	if _, err := s.Save(context.Background(), app, base, cluster.RuleVersion{Doc: []byte(doc), Author: "ops"}); err != nil {
		t.Fatal(err)
	}
}

// waitReport waits until an instance of app reports running version and
// having refused refused (0: none).
func waitReport(t *testing.T, s cluster.RuleStore, app string, version, refused int64) cluster.RuleReport {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		rs, err := s.Reports(context.Background(), app)
		if err == nil && len(rs) == 1 && rs[0].Version == version && rs[0].Refused == refused {
			return rs[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no report of version %d (refused %d) within 20 s: %+v %v", version, refused, rs, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ask sends n requests of one descriptor and counts the answers.
func ask(t *testing.T, c pb.RateLimitServiceClient, n int, entries ...string) (ok, over int) {
	t.Helper()
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(entries); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: entries[i], Value: entries[i+1]})
	}
	for range n {
		resp, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
			over++
		} else {
			ok++
		}
	}
	return ok, over
}

// TestRulesFromStore: sluice-rls follows its application's rules in each
// rule store the dashboard writes to (Redis, PostgreSQL, MariaDB, real
// servers): the version in force at start, a new one saved while it
// runs (exact counts after the change, on a manual clock), and a version
// it cannot enforce (a concurrency rule) refused and reported with its
// error while the rules in force stay.
func TestRulesFromStore(t *testing.T) {
	for name, open := range ruleStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each on servers of its own: their starts overlap
			u, store := open(t)
			save(t, store, "edge-rls", 0, "flow:\n  - resource: edge/path=/a\n    threshold: 3\n")
			clk := sluicetest.NewManualClock(int64(time.Hour))
			srv := startServer(t, ServerOptions{Rules: u, App: "edge-rls", EngineOptions: []sluice.Option{sluice.WithClock(clk)}})
			c := pb.NewRateLimitServiceClient(dial(t, srv.addr))
			if ok, over := ask(t, c, 5, "path", "/a"); ok != 3 || over != 2 {
				t.Fatalf("version 1 (3 a second): %d OK, %d over", ok, over)
			}
			waitReport(t, store, "edge-rls", 1, 0)

			save(t, store, "edge-rls", 1, "flow:\n  - resource: edge/path=/a\n    threshold: 5\n")
			waitReport(t, store, "edge-rls", 2, 0)
			clk.Advance(2 * time.Second)
			if ok, over := ask(t, c, 7, "path", "/a"); ok != 5 || over != 2 {
				t.Fatalf("version 2 (5 a second): %d OK, %d over", ok, over)
			}

			save(t, store, "edge-rls", 2, "flow:\n  - resource: edge/path=/a\n    threshold: 1\n  - resource: edge/path=/b\n    metric: concurrency\n    threshold: 1\n")
			r := waitReport(t, store, "edge-rls", 2, 3)
			if !strings.Contains(r.Err, "flow rule 1") || !strings.Contains(r.Err, "concurrency") {
				t.Fatalf("refusal reported as %q", r.Err)
			}
			clk.Advance(2 * time.Second)
			if ok, over := ask(t, c, 7, "path", "/a"); ok != 5 || over != 2 {
				t.Fatalf("after the refused version 3 (version 2 stays): %d OK, %d over", ok, over)
			}
		})
	}
}

// TestRulesStoreOutage: with its Redis rule store killed, the service
// keeps the rules in force, counting as before, and the next reads fail
// without changing them.
func TestRulesStoreOutage(t *testing.T) {
	red := redistest.Start(t)
	store := sluiceredis.NewRuleStore(red.Client(t), sluiceredis.RuleStoreConfig{})
	save(t, store, "edge-rls", 0, "flow:\n  - resource: edge/path=/a\n    threshold: 3\n")
	clk := sluicetest.NewManualClock(int64(time.Hour))
	srv := startServer(t, ServerOptions{Rules: "redis://" + red.Addr() + "/0", App: "edge-rls", EngineOptions: []sluice.Option{sluice.WithClock(clk)}})
	c := pb.NewRateLimitServiceClient(dial(t, srv.addr))
	waitReport(t, store, "edge-rls", 1, 0)
	red.Kill()
	for i := range 3 {
		clk.Advance(2 * time.Second) // a new window, and the follower's read of the store, which fails
		if ok, over := ask(t, c, 5, "path", "/a"); ok != 3 || over != 2 {
			t.Fatalf("window %d with the store down: %d OK, %d over", i, ok, over)
		}
	}
}
