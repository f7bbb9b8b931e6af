package sqlstore

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/sqlstore/sqltest"
)

// openFails opens url with a dial timeout of 1 s and checks that it fails
// within 10 s (the timeout and the busy host's slack) with an error that
// holds each of want and not the password.
func openFails(t *testing.T, url string, want ...string) {
	t.Helper()
	start := time.Now()
	s, err := Open(context.Background(), url, Config{DialTimeout: time.Second})
	if err == nil {
		s.Close()
		t.Fatalf("Open(%s) succeeded", Redact(url))
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Open(%s) took %v to fail", Redact(url), d)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("Open(%s) = %v; want it to say %q", Redact(url), err, w)
		}
	}
	if strings.Contains(err.Error(), "wrong-pw") || strings.Contains(err.Error(), sqltest.Password) {
		t.Fatalf("Open's error shows the password: %v", err)
	}
}

// TestHostileURLs: a wrong password, a closed port, a server that never
// answers, a malformed URL and an unknown scheme: each a clear error,
// without the password, within the dial timeout.
func TestHostileURLs(t *testing.T) {
	// A listener that accepts and never answers, as a host behind a
	// firewall that drops.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	defer func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	silent := ln.Addr().String()
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedAddr := closed.Addr().String()
	closed.Close()

	forEach(t, func(t *testing.T, srv *sqltest.Server) {
		db := srv.NewDatabase(t)
		good := srv.URL(db, "", "")
		bad := strings.Replace(good, sqltest.Password, "wrong-pw", 1)
		auth := "password authentication failed"
		if srv.Kind == sqltest.MariaDB {
			auth = "Access denied"
		}
		openFails(t, bad, "sqlstore: connecting to", "xxxxx", auth)
		scheme := good[:strings.Index(good, "://")]
		openFails(t, scheme+"://sluice:wrong-pw@"+closedAddr+"/x", "refused")
		openFails(t, scheme+"://sluice:wrong-pw@"+silent+"/x", "sqlstore: connecting to")
	})
	openFails(t, "redis://127.0.0.1:6379", "want postgres://")
	openFails(t, "mysql://u:wrong-pw@127.0.0.1:1", "names no database")
	openFails(t, "postgres://u:wrong-pw@[::1", "malformed")
}

// TestReadOnlyUser: a user that may only read the store's tables opens a
// migrated database and reads it; its save fails at once with an error
// saying the database refused the write, and leaves nothing; on an empty
// database its Open fails saying it may not create the tables.
func TestReadOnlyUser(t *testing.T) {
	forEach(t, func(t *testing.T, srv *sqltest.Server) {
		admin, url := openStore(t, srv, Config{})
		mustSave(t, admin, "shop", 0, flowDoc(1))
		db := dbName(srv, url)
		empty := srv.NewDatabase(t)
		user := "ro_" + db
		if srv.Kind == sqltest.Postgres {
			srv.Exec(t, db, "CREATE ROLE "+user+" LOGIN PASSWORD 'ro-pw'",
				"GRANT USAGE ON SCHEMA "+db+" TO "+user, "GRANT SELECT ON ALL TABLES IN SCHEMA "+db+" TO "+user,
				"GRANT USAGE ON SCHEMA "+empty+" TO "+user)
			t.Cleanup(func() {
				srv.Exec(t, "", "DROP OWNED BY "+user, "DROP ROLE "+user)
			})
		} else {
			srv.Exec(t, db, "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'ro-pw'", "GRANT SELECT ON "+db+".* TO '"+user+"'@'%'",
				"GRANT SELECT ON "+empty+".* TO '"+user+"'@'%'")
			t.Cleanup(func() { srv.Exec(t, "", "DROP USER '"+user+"'@'%'") })
		}
		ro, err := Open(ctxT(t), srv.URL(db, user, "ro-pw"), Config{})
		if err != nil {
			t.Fatalf("read-only Open of a migrated database: %v", err)
		}
		defer ro.Close()
		if cur, err := ro.Current(ctxT(t), "shop"); err != nil || cur.Version != 1 {
			t.Fatalf("read-only Current = %+v, %v", cur, err)
		}
		start := time.Now()
		_, err = ro.Save(ctxT(t), "shop", 1, cluster.RuleVersion{Doc: flowDoc(2), Author: "ro"})
		if err == nil || !strings.Contains(err.Error(), "refused the write") || time.Since(start) > 10*time.Second {
			t.Fatalf("read-only Save = %v after %v; want the database's refusal, at once", err, time.Since(start))
		}
		if cur, _ := admin.Current(ctxT(t), "shop"); cur.Version != 1 {
			t.Fatalf("version in force after a refused save: %d", cur.Version)
		}
		_, err = Open(ctxT(t), srv.URL(empty, user, "ro-pw"), Config{})
		if err == nil || !strings.Contains(err.Error(), "create") {
			t.Fatalf("read-only Open of an empty database = %v; want it to say it could not create the tables", err)
		}
	})
}

// TestMigrations: Open migrates once (a second Open finds the schema
// current), refuses a schema newer than it knows, and refuses a
// destructive migration without AllowDestructive, changing nothing.
func TestMigrations(t *testing.T) {
	forEach(t, func(t *testing.T, srv *sqltest.Server) {
		s, url := openStore(t, srv, Config{})
		mustSave(t, s, "shop", 0, flowDoc(1))

		// A destructive migration 2 is refused, then applied when allowed.
		body, err := migrationFiles.(interface {
			ReadFile(string) ([]byte, error)
		}).ReadFile("migrations/" + s.Dialect() + "/0001_init.sql")
		if err != nil {
			t.Fatal(err)
		}
		old, oldWant := migrationFiles, schemaVersionWanted
		t.Cleanup(func() { migrationFiles, schemaVersionWanted = old, oldWant })
		migrationFiles = fstest.MapFS{
			"migrations/" + s.Dialect() + "/0001_init.sql":     {Data: body},
			"migrations/" + s.Dialect() + "/0002_drop_old.sql": {Data: []byte("-- destructive\nDELETE FROM sluice_audit")},
		}
		schemaVersionWanted = 2
		if _, err := Open(ctxT(t), url, Config{}); err == nil || !strings.Contains(err.Error(), "AllowDestructive") {
			t.Fatalf("Open with a destructive migration = %v, want a refusal naming AllowDestructive", err)
		}
		if log, _ := s.AuditLog(ctxT(t), "", 10); len(log) != 1 {
			t.Fatalf("refused migration changed the audit log: %d entries", len(log))
		}
		s2, err := Open(ctxT(t), url, Config{AllowDestructive: true})
		if err != nil {
			t.Fatalf("Open with AllowDestructive: %v", err)
		}
		s2.Close()
		if log, _ := s.AuditLog(ctxT(t), "", 10); len(log) != 0 {
			t.Fatalf("allowed migration did not run: %d audit entries", len(log))
		}
		migrationFiles, schemaVersionWanted = old, oldWant

		// A schema newer than this package knows.
		if _, err := Open(ctxT(t), url, Config{}); err == nil || !strings.Contains(err.Error(), "newer") {
			t.Fatalf("Open of a newer schema = %v, want a refusal", err)
		}
		// The version in force is untouched throughout.
		if cur, err := s.Current(ctxT(t), "shop"); err != nil || cur.Version != 1 {
			t.Fatalf("Current = %+v, %v", cur, err)
		}
	})
}

// TestBuckets: each resource's metadata says who created its rules and who
// last changed them, in which version, and which applications name it.
func TestBuckets(t *testing.T) {
	forEach(t, func(t *testing.T, srv *sqltest.Server) {
		s, _ := openStore(t, srv, Config{})
		save := func(app, author string, base int64, doc string) cluster.RuleVersion {
			v, err := s.Save(ctxT(t), app, base, cluster.RuleVersion{Doc: []byte(doc), Author: author})
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		v1 := save("shop", "ann", 0, "flow:\n  - resource: api\n    threshold: 1\n  - resource: web\n    threshold: 1\n")
		v2 := save("shop", "bob", 1, "flow:\n  - resource: api\n    threshold: 2\n  - resource: web\n    threshold: 1\ncircuitBreaker:\n  - resource: web\n    strategy: error-ratio\n    threshold: 0.5\n    retryTimeout: 1s\n    minRequestAmount: 5\n    statInterval: 1s\n")
		save("shop", "cat", 2, "flow:\n  - resource: api\n    threshold: 2\n")
		save("blog", "dan", 0, "flow:\n  - resource: api\n    threshold: 9\n")
		bs, err := s.Buckets(ctxT(t), "shop")
		if err != nil || len(bs) != 1 {
			t.Fatalf("Buckets(shop) = %+v, %v; want api alone (web dropped)", bs, err)
		}
		b := bs[0]
		if b.Resource != "api" || b.CreatedBy != "ann" || b.CreatedIn != 1 || !b.CreatedAt.Equal(v1.At) ||
			b.UpdatedBy != "bob" || b.UpdatedIn != 2 || !b.UpdatedAt.Equal(v2.At) ||
			strings.Join(b.Apps, ",") != "blog,shop" || strings.Join(b.Kinds, ",") != "flow" {
			t.Fatalf("Buckets(shop) = %+v", b)
		}
		info, err := s.Info(ctxT(t), "shop")
		if err != nil || info.Version != 3 || info.CreatedBy != "ann" || info.UpdatedBy != "cat" || !info.CreatedAt.Equal(v1.At) {
			t.Fatalf("Info(shop) = %+v, %v", info, err)
		}
	})
}
