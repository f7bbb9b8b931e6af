package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/sqlstore/sqltest"
)

func flowDoc(th int) []byte {
	return []byte(fmt.Sprintf("flow:\n  - resource: api\n    threshold: %d\n", th))
}

func mustSave(t testing.TB, s *Store, app string, base int64, doc []byte) cluster.RuleVersion {
	t.Helper()
	v, err := s.Save(ctxT(t), app, base, cluster.RuleVersion{Doc: doc, Author: "ann", Comment: "c"})
	if err != nil {
		t.Fatalf("Save(%s, base %d): %v", app, base, err)
	}
	return v
}

// checkStill checks that version 1 (doc) is in force and readable, and
// that no version 2 was written.
func checkStill(t *testing.T, s *Store, doc []byte) {
	t.Helper()
	cur, err := s.Current(ctxT(t), "shop")
	if err != nil || cur.Version != 1 || string(cur.Doc) != string(doc) {
		t.Fatalf("Current after the interrupted save = %+v, %v; want version 1 whole", cur, err)
	}
	if _, err := s.Version(ctxT(t), "shop", 2); !errors.Is(err, cluster.ErrNoVersion) {
		t.Fatalf("Version(2) after the interrupted save = %v, want ErrNoVersion (nothing half-written)", err)
	}
	if h, err := s.History(ctxT(t), "shop", 10); err != nil || len(h) != 1 {
		t.Fatalf("History after the interrupted save = %d versions, %v; want 1", len(h), err)
	}
	if log, err := s.AuditLog(ctxT(t), "shop", 10); err != nil || len(log) != 1 {
		t.Fatalf("AuditLog after the interrupted save = %d entries, %v; want 1", len(log), err)
	}
}

// backendID is the server's id of the connection tx runs on.
func backendID(ctx context.Context, t *testing.T, s *Store, tx *sql.Tx) int64 {
	q := "SELECT CONNECTION_ID()"
	if s.Dialect() == "postgres" {
		q = "SELECT pg_backend_pid()"
	}
	var id int64
	if err := tx.QueryRowContext(ctx, q).Scan(&id); err != nil {
		t.Errorf("backend id: %v", err)
	}
	return id
}

// TestSaveCutByConnectionKill: the server ends a save's connection after
// the version row is written, before the version in force moves: the save
// fails, version 1 stays in force and readable, and the next save works.
func TestSaveCutByConnectionKill(t *testing.T) {
	forEach(t, func(t *testing.T, srv *sqltest.Server) {
		s, url := openStore(t, srv, Config{})
		mustSave(t, s, "shop", 0, flowDoc(1))
		s.testAfterVersion = func(ctx context.Context, tx *sql.Tx) {
			id := backendID(ctx, t, s, tx)
			if s.Dialect() == "postgres" {
				srv.Exec(t, "", fmt.Sprintf("SELECT pg_terminate_backend(%d, 5000)", id)) // returns once it ended
			} else {
				srv.Exec(t, "", fmt.Sprintf("KILL %d", id))
			}
		}
		_, err := s.Save(ctxT(t), "shop", 1, cluster.RuleVersion{Doc: flowDoc(2), Author: "ann"})
		s.testAfterVersion = nil
		if err == nil || errors.Is(err, cluster.ErrConflict) {
			t.Fatalf("Save whose connection was killed = %v, want a connection error", err)
		}
		checkStill(t, s, flowDoc(1))
		other, err := Open(ctxT(t), url, Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		checkStill(t, other, flowDoc(1))
		mustSave(t, s, "shop", 1, flowDoc(3))
	})
}

// TestSaveCutByServerKill: the server is killed (SIGKILL, as a crash)
// during a save; restarted, it has the previous version in force, a watch
// started before the crash sees the next save, and saves work again.
func TestSaveCutByServerKill(t *testing.T) {
	forEach(t, func(t *testing.T, srv *sqltest.Server) {
		var mu sync.Mutex
		var told []string
		s, _ := openStore(t, srv, Config{PollInterval: 100 * time.Millisecond, OnWatchError: func(_ string, err error) {
			mu.Lock()
			defer mu.Unlock()
			told = append(told, fmt.Sprint(err))
		}})
		mustSave(t, s, "shop", 0, flowDoc(1))
		got, stop := watchShop(t, s)
		defer stop()
		n := running(t, s, got, 1) // the watch runs before the crash
		s.testAfterVersion = func(context.Context, *sql.Tx) { srv.Kill() }
		_, err := s.Save(ctxT(t), "shop", n, cluster.RuleVersion{Doc: flowDoc(99), Author: "ann"})
		s.testAfterVersion = nil
		if err == nil {
			t.Fatal("Save through a killed server succeeded")
		}
		if _, err := s.Current(ctxT(t), "shop"); err == nil {
			t.Fatal("Current with the server down succeeded")
		}
		srv.Restart(t)
		var cur cluster.RuleVersion
		for range 3 { // the pool's dead connections fail once each
			if cur, err = s.Current(ctxT(t), "shop"); err == nil {
				break
			}
		}
		if err != nil || cur.Version != n || string(cur.Doc) != string(flowDoc(int(n))) {
			t.Fatalf("Current after the restart = %+v, %v; want version %d", cur, err, n)
		}
		if _, err := s.Version(ctxT(t), "shop", n+1); !errors.Is(err, cluster.ErrNoVersion) {
			t.Fatalf("Version(%d) after the crash = %v, want ErrNoVersion (nothing half-written)", n+1, err)
		}
		v := mustSave(t, s, "shop", n, flowDoc(1000))
		waitVersion(t, got, v.Version, 10*time.Second)
		mu.Lock()
		defer mu.Unlock()
		if len(told) == 0 || told[0] == "<nil>" {
			t.Fatalf("OnWatchError was told %q, want the loss first", told)
		}
	})
}

// running saves versions of shop on saver from base, one after the other,
// until the watch reports one (a watch reports the versions saved after it
// read the version in force), and returns the last version saved, whose
// document is flowDoc(version).
func running(t *testing.T, saver *Store, got <-chan int64, base int64) int64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mustSave(t, saver, "shop", base, flowDoc(int(base+1)))
		base++
		select {
		case <-got:
			for len(got) > 0 {
				<-got
			}
			return base
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the watch reported none of the saves")
		}
	}
}

// watchShop watches "shop" on s until the returned stop.
func watchShop(t *testing.T, s *Store) (<-chan int64, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan int64, 100)
	done := make(chan error, 1)
	go func() { done <- s.Watch(ctx, "shop", func(v int64) { got <- v }) }()
	return got, func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Watch = %v, want context.Canceled", err)
		}
	}
}

// waitVersion waits for the watch to report version want (failing on a
// higher one), within d.
func waitVersion(t *testing.T, got <-chan int64, want int64, d time.Duration) time.Time {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case v := <-got:
			if v == want {
				return time.Now()
			}
			if v > want {
				t.Fatalf("watch reported version %d, want %d", v, want)
			}
		case <-deadline:
			t.Fatalf("watch did not report version %d within %v", want, d)
		}
	}
}

// TestWatchSeesAnotherClientsSave: a store watching sees the saves of
// another client (another Store on the same database), within 1 s in the
// median of five saves (the poll is 200 ms on MySQL; PostgreSQL notifies)
// and within 10 s each (a busy host may stall a process for seconds).
func TestWatchSeesAnotherClientsSave(t *testing.T) {
	forEach(t, func(t *testing.T, srv *sqltest.Server) {
		watcher, url := openStore(t, srv, Config{})
		saver, err := Open(ctxT(t), url, Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer saver.Close()
		got, stop := watchShop(t, watcher)
		defer stop()
		mustSave(t, saver, "shop", 0, flowDoc(1))
		n := running(t, saver, got, 1)
		var lat []time.Duration
		for i := n; i < n+5; i++ {
			v := mustSave(t, saver, "shop", i, flowDoc(int(i+1)))
			saved := time.Now()
			lat = append(lat, waitVersion(t, got, v.Version, 10*time.Second).Sub(saved))
		}
		slices.Sort(lat)
		if lat[2] > time.Second {
			t.Fatalf("watch latencies %v: median above 1 s", lat)
		}
	})
}

// TestWatchRawInsertAndNotify: on PostgreSQL a version written by hand (a
// raw INSERT and UPDATE, then pg_notify) is seen by a watch at once (the
// poll is a minute), and a notification by hand of a version that is not
// in force does not pass for one.
func TestWatchRawInsertAndNotify(t *testing.T) {
	srv := sqltest.Shared(t, sqltest.Postgres)
	s, url := openStore(t, srv, Config{PollInterval: time.Minute})
	db := dbName(srv, url)
	mustSave(t, s, "shop", 0, flowDoc(1))
	got, stop := watchShop(t, s)
	defer stop()
	n := running(t, s, got, 1)
	// A notification of a version that is not in force: the watch reads
	// the version in force and reports nothing.
	srv.Exec(t, db, "SELECT pg_notify('sluice_rules', '99 shop')")
	insert := func(v int64) string {
		return fmt.Sprintf("INSERT INTO sluice_rule_versions (app, version, doc, author, comment, at_us, rollback_of) "+
			"VALUES ('shop', %d, convert_to('flow:\n  - resource: api\n    threshold: %d\n', 'UTF8'), 'dba', 'by hand', 0, 0)", v, v)
	}
	srv.Exec(t, db, "BEGIN", insert(n+1),
		"ALTER TABLE sluice_rule_apps DISABLE TRIGGER sluice_rule_apps_notify",
		fmt.Sprintf("UPDATE sluice_rule_apps SET version = %d WHERE app = 'shop'", n+1),
		"ALTER TABLE sluice_rule_apps ENABLE TRIGGER sluice_rule_apps_notify",
		fmt.Sprintf("SELECT pg_notify('sluice_rules', '%d shop')", n+1),
		"COMMIT")
	waitVersion(t, got, n+1, 5*time.Second)
	// A raw UPDATE alone: the trigger notifies.
	srv.Exec(t, db, insert(n+2), fmt.Sprintf("UPDATE sluice_rule_apps SET version = %d WHERE app = 'shop'", n+2))
	waitVersion(t, got, n+2, 5*time.Second)
	if cur, err := s.Current(ctxT(t), "shop"); err != nil || cur.Author != "dba" || cur.Version != n+2 || string(cur.Doc) != string(flowDoc(int(n+2))) {
		t.Fatalf("Current = %+v, %v; want version %d by dba", cur, err, n+2)
	}
}

// TestDroppedNotificationConnectionLosesNoVersion: the server ends a
// watch's notification connection and a version is saved before the watch
// listens again; the watch reports it when it is back (its poll is a
// minute: only the catch-up on reconnecting can), and OnWatchError hears of
// the loss and of the return.
func TestDroppedNotificationConnectionLosesNoVersion(t *testing.T) {
	srv := sqltest.Shared(t, sqltest.Postgres)
	var saver *Store
	var mu sync.Mutex
	var told []string
	s, url := openStore(t, srv, Config{PollInterval: time.Minute, OnWatchError: func(_ string, err error) {
		mu.Lock()
		told = append(told, fmt.Sprint(err))
		first := len(told) == 1
		mu.Unlock()
		if first && err != nil {
			// The listener is down and waits for this call to dial again:
			// a save now is one no notification carries.
			if _, serr := saver.Save(context.Background(), "shop", 1, cluster.RuleVersion{Doc: flowDoc(2), Author: "bob"}); serr != nil {
				t.Errorf("save while the listener is down: %v", serr)
			}
		}
	}})
	saver, err := Open(ctxT(t), url, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer saver.Close()
	mustSave(t, s, "shop", 0, flowDoc(1))
	got, stop := watchShop(t, s)
	defer stop()
	// Wait until the watch listens, then end its connection.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		h, _ := sql.Open("pgx", srv.URL("", "", ""))
		_ = h.QueryRow("SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query = 'LISTEN sluice_rules' AND pid <> pg_backend_pid()").Scan(&n)
		h.Close()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no LISTEN connection to end")
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitVersion(t, got, 2, 10*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(told) < 2 || !strings.Contains(told[0], "notification connection lost") || told[1] != "<nil>" {
		t.Fatalf("OnWatchError heard %q, want the loss then nil (back)", told)
	}
}

// TestRacingWriters: two clients each save ten versions as dashboards do
// (read the version in force, save on it, on a conflict read again): every
// save lands exactly once, versions 1 to 20 each hold one writer's
// document, nothing is lost or doubled.
func TestRacingWriters(t *testing.T) {
	forEach(t, func(t *testing.T, srv *sqltest.Server) {
		a, url := openStore(t, srv, Config{})
		b, err := Open(ctxT(t), url, Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		var wg sync.WaitGroup
		conflicts := make([]int, 2)
		for w, s := range []*Store{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 10; {
					cur, err := s.Current(ctxT(t), "shop")
					if err != nil {
						t.Error(err)
						return
					}
					doc := flowDoc(1000*(w+1) + i)
					_, err = s.Save(ctxT(t), "shop", cur.Version, cluster.RuleVersion{Doc: doc, Author: fmt.Sprint("w", w)})
					switch {
					case errors.Is(err, cluster.ErrConflict):
						conflicts[w]++
					case err != nil:
						t.Error(err)
						return
					default:
						i++
					}
				}
			}()
		}
		wg.Wait()
		h, err := a.History(ctxT(t), "shop", 100)
		if err != nil || len(h) != 20 || h[0].Version != 20 {
			t.Fatalf("History = %d versions (newest %d), %v; want 20", len(h), h[0].Version, err)
		}
		var docs []string
		for i, v := range h {
			if v.Version != int64(20-i) {
				t.Fatalf("History[%d] is version %d, want %d", i, v.Version, 20-i)
			}
			docs = append(docs, string(v.Doc))
		}
		sort.Strings(docs)
		if len(slices.Compact(docs)) != 20 {
			t.Fatal("a document was saved twice")
		}
		t.Logf("conflicts met: %v", conflicts)
	})
}

// bigDoc is a document of n flow rules.
func bigDoc(n int) []byte {
	var b strings.Builder
	b.WriteString("flow:\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "  - resource: res-%05d\n    threshold: %d\n", i, i+1)
	}
	return []byte(b.String())
}

// TestTenThousandRules: a document of 10,000 rules is saved and read back
// byte for byte, with a metadata row for each resource; one more is
// refused before anything is written.
func TestTenThousandRules(t *testing.T) {
	forEach(t, func(t *testing.T, srv *sqltest.Server) {
		s, _ := openStore(t, srv, Config{})
		doc := bigDoc(10000)
		v := mustSave(t, s, "shop", 0, doc)
		cur, err := s.Current(ctxT(t), "shop")
		if err != nil || cur.Version != v.Version || string(cur.Doc) != string(doc) {
			t.Fatalf("Current = version %d of %d bytes, %v; want the %d bytes saved", cur.Version, len(cur.Doc), err, len(doc))
		}
		bs, err := s.Buckets(ctxT(t), "shop")
		if err != nil || len(bs) != 10000 || bs[0].Resource != "res-00000" || bs[9999].CreatedIn != 1 {
			t.Fatalf("Buckets = %d, %v; want 10000", len(bs), err)
		}
		_, err = s.Save(ctxT(t), "blog", 0, cluster.RuleVersion{Doc: bigDoc(10001), Author: "ann"})
		if !errors.Is(err, cluster.ErrInvalidRules) {
			t.Fatalf("Save of 10,001 rules = %v, want ErrInvalidRules", err)
		}
		if apps, _ := s.Apps(ctxT(t)); len(apps) != 1 {
			t.Fatalf("Apps after a refused save = %v, want [shop]", apps)
		}
	})
}

// TestTooLargeRefusedBeforeWriting: a document over Limits.MaxBytes is
// refused with ErrInvalidRules, and nothing of it is written (no app, no
// audit entry).
func TestTooLargeRefusedBeforeWriting(t *testing.T) {
	forEach(t, func(t *testing.T, srv *sqltest.Server) {
		s, _ := openStore(t, srv, Config{})
		s.limits.MaxBytes = 1000
		_, err := s.Save(ctxT(t), "shop", 0, cluster.RuleVersion{Doc: bigDoc(100), Author: "ann"})
		if !errors.Is(err, cluster.ErrInvalidRules) || !strings.Contains(err.Error(), "1000") {
			t.Fatalf("Save over MaxBytes = %v, want ErrInvalidRules naming the limit", err)
		}
		apps, err1 := s.Apps(ctxT(t))
		log, err2 := s.AuditLog(ctxT(t), "", 10)
		info, err3 := s.Info(ctxT(t), "shop")
		if len(apps) != 0 || len(log) != 0 || info.Version != 0 || info.CreatedBy != "" || errors.Join(err1, err2, err3) != nil {
			t.Fatalf("after a refused save: apps %v, audit %v, info %+v (%v)", apps, log, info, errors.Join(err1, err2, err3))
		}
	})
}
