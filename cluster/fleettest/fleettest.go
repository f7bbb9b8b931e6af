// Package fleettest is the shared conformance suite of cluster.RuleStore
// implementations: the Redis store, the file store and any other run the
// same tests of the contract (versions, conflicts, validation, history,
// watch, reports, audit), as a store's own tests call it:
//
//	func TestConformance(t *testing.T) {
//		fleettest.RuleStore(t, func(t *testing.T) cluster.RuleStore { return open(t) })
//	}
package fleettest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/rules"
)

// timeout bounds each wait of the suite (a watch notification, a call).
const timeout = 10 * time.Second

func doc(threshold int) []byte {
	return []byte(fmt.Sprintf("flow:\n  - resource: api\n    threshold: %d\n", threshold))
}

// RuleStore runs the suite against stores made by open, one per subtest,
// each empty: one subtest per promise of the cluster.RuleStore contract,
// named for it, so that a store that fails says which promise it broke. A
// store's Watch must notify within 10 s of a save.
func RuleStore(t *testing.T, open func(t *testing.T) cluster.RuleStore) {
	for _, c := range contract {
		t.Run(c.name, func(t *testing.T) { c.check(t, open(t)) })
	}
}

// contract is the suite: each promise of a cluster.RuleStore and its check,
// run on an empty store.
var contract = []struct {
	name  string
	check func(t *testing.T, s cluster.RuleStore)
}{
	{"empty store has version 0", emptyStore},
	{"save numbers versions from 1 and dates them", saveNumbers},
	{"rollback is a new version that names the one it restores", rollback},
	{"Version returns a saved version whole", versionWhole},
	{"History is newest first and at most n long", historyNewestFirst},
	{"Apps lists the apps with versions, sorted", appsSorted},
	{"of concurrent saves on one base exactly one wins", concurrentSaves},
	{"save on a base other than the version in force is ErrConflict", staleBase},
	{"invalid documents are ErrInvalidRules naming rule and field", invalidDocs},
	{"invalid documents leave the version in force", invalidKeepsVersion},
	{"Watch tells changed(0) once it listens, and then every save", watchListens},
	{"Watch notifies a save", watchNotifies},
	{"Watch returns context.Canceled when its context ends", watchEnds},
	{"Reports holds each instance's latest report, by instance", reportsLatest},
	{"Report without an instance is refused", reportNeedsInstance},
	{"AuditLog records each save with its line diff, newest first", auditSaves},
	{"AuditLog of all apps holds every entry, newest first", auditAll},
	{"Audit without an action is refused", auditNeedsAction},
}

// ctx is a context that ends after timeout or with t.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return c
}

// save saves a document of threshold th on base as "ann", and checks the
// version it makes: base+1, dated.
func save(t *testing.T, s cluster.RuleStore, app string, base int64, th int) cluster.RuleVersion {
	t.Helper()
	v, err := s.Save(ctx(t), app, base, cluster.RuleVersion{Doc: doc(th), Author: "ann", Comment: fmt.Sprint("to ", th)})
	if err != nil {
		t.Fatalf("Save(%s, base %d) = %v", app, base, err)
	}
	if v.Version != base+1 || v.At.IsZero() {
		t.Fatalf("Save(%s, base %d) = version %d at %v, want %d, dated", app, base, v.Version, v.At, base+1)
	}
	return v
}

// saves saves n versions of app, thresholds 10, 20, ...
func saves(t *testing.T, s cluster.RuleStore, app string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		save(t, s, app, int64(i), 10*(i+1))
	}
}

func emptyStore(t *testing.T, s cluster.RuleStore) {
	if v, err := s.Current(ctx(t), "shop"); err != nil || v.Version != 0 || v.Doc != nil {
		t.Fatalf("Current of an empty store = %+v, %v; want version 0", v, err)
	}
	if _, err := s.Version(ctx(t), "shop", 1); !errors.Is(err, cluster.ErrNoVersion) {
		t.Fatalf("Version(1) of an empty store = %v, want ErrNoVersion", err)
	}
}

func saveNumbers(t *testing.T, s cluster.RuleStore) {
	saves(t, s, "shop", 3) // save checks each version and its date
	save(t, s, "blog", 0, 5)
	if cur, err := s.Current(ctx(t), "shop"); err != nil || cur.Version != 3 {
		t.Fatalf("Current(shop) = %+v, %v; want version 3", cur, err)
	}
}

func rollback(t *testing.T, s cluster.RuleStore) {
	saves(t, s, "shop", 3)
	rb, err := s.Save(ctx(t), "shop", 3, cluster.RuleVersion{Doc: doc(10), Author: "bob", RollbackOf: 1})
	if err != nil || rb.Version != 4 || rb.RollbackOf != 1 {
		t.Fatalf("rollback = %+v, %v", rb, err)
	}
	cur, err := s.Current(ctx(t), "shop")
	if err != nil || cur.Version != 4 || string(cur.Doc) != string(doc(10)) || cur.Author != "bob" || cur.RollbackOf != 1 {
		t.Fatalf("Current = %+v, %v; want the rollback", cur, err)
	}
}

func versionWhole(t *testing.T, s cluster.RuleStore) {
	saves(t, s, "shop", 3)
	v2, err := s.Version(ctx(t), "shop", 2)
	if err != nil || v2.Version != 2 || string(v2.Doc) != string(doc(20)) || v2.Comment != "to 20" || v2.Author != "ann" || v2.At.IsZero() {
		t.Fatalf("Version(2) = %+v, %v", v2, err)
	}
}

func historyNewestFirst(t *testing.T, s cluster.RuleStore) {
	saves(t, s, "shop", 4)
	h, err := s.History(ctx(t), "shop", 3)
	if err != nil || len(h) != 3 || h[0].Version != 4 || h[1].Version != 3 || h[2].Version != 2 {
		t.Fatalf("History(3) = %+v, %v; want 4, 3, 2", h, err)
	}
}

func appsSorted(t *testing.T, s cluster.RuleStore) {
	save(t, s, "shop", 0, 1)
	save(t, s, "blog", 0, 1)
	apps, err := s.Apps(ctx(t))
	if err != nil || strings.Join(apps, ",") != "blog,shop" {
		t.Fatalf("Apps = %v, %v; want blog, shop", apps, err)
	}
}

func concurrentSaves(t *testing.T, s cluster.RuleStore) {
	save(t, s, "shop", 0, 1)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, errs[i] = s.Save(context.Background(), "shop", 1, cluster.RuleVersion{Doc: doc(100 + i), Author: "w"})
		}(i)
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, cluster.ErrConflict):
			t.Fatalf("Save %d = %v, want nil or ErrConflict", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of 8 saves on one base won, want 1", won)
	}
}

func staleBase(t *testing.T, s cluster.RuleStore) {
	saves(t, s, "shop", 2)
	for _, base := range []int64{0, 1, 9} {
		if _, err := s.Save(ctx(t), "shop", base, cluster.RuleVersion{Doc: doc(7), Author: "x"}); !errors.Is(err, cluster.ErrConflict) {
			t.Fatalf("Save(base %d) with version 2 in force = %v, want ErrConflict", base, err)
		}
	}
}

// invalid are documents no store may save: broken YAML, a bad value, an
// unknown field, an empty document.
var invalid = []string{"flow: [\n", "flow:\n  - resource: api\n    threshold: -1\n", "flow:\n  - resource: api\n    treshold: 1\n", ""}

func invalidDocs(t *testing.T, s cluster.RuleStore) {
	save(t, s, "shop", 0, 1)
	for _, give := range invalid {
		_, err := s.Save(ctx(t), "shop", 1, cluster.RuleVersion{Doc: []byte(give), Author: "a"})
		if !errors.Is(err, cluster.ErrInvalidRules) {
			t.Fatalf("Save(%q) = %v, want ErrInvalidRules", give, err)
		}
		var re *rules.Error
		if strings.Contains(give, "resource") && (!errors.As(err, &re) || re.Kind != "flow" || re.Resource != "api" || re.Field == "") {
			t.Fatalf("Save(%q) = %v, want a *rules.Error naming the rule and field", give, err)
		}
	}
}

func invalidKeepsVersion(t *testing.T, s cluster.RuleStore) {
	save(t, s, "shop", 0, 1)
	for _, give := range invalid {
		_, _ = s.Save(ctx(t), "shop", 1, cluster.RuleVersion{Doc: []byte(give), Author: "a"})
	}
	if v, err := s.Current(ctx(t), "shop"); err != nil || v.Version != 1 || string(v.Doc) != string(doc(1)) {
		t.Fatalf("Current after refused saves = %+v, %v; want version 1", v, err)
	}
}

// watch starts s.Watch of shop until the returned cancel; the versions it
// sees arrive on the channel, and what it returns on done.
func watch(s cluster.RuleStore) (got chan int64, done chan error, cancel context.CancelFunc) {
	c, cancel := context.WithCancel(context.Background())
	got = make(chan int64, 100)
	done = make(chan error, 1)
	go func() { done <- s.Watch(c, "shop", func(v int64) { got <- v }) }()
	return got, done, cancel
}

// watchListens: the first call of changed is changed(0), and a save made
// after it is announced (the store's own poll, if it has one, may take its
// interval), without a save before it.
func watchListens(t *testing.T, s cluster.RuleStore) {
	got, done, cancel := watch(s)
	defer func() { cancel(); <-done }()
	select {
	case v := <-got:
		if v != 0 {
			t.Fatalf("Watch's first call was changed(%d), want changed(0) (listening)", v)
		}
	case <-time.After(timeout):
		t.Fatal("Watch did not say it listens (changed(0))")
	}
	save(t, s, "shop", 0, 1)
	select {
	case v := <-got:
		if v != 1 {
			t.Fatalf("after changed(0), a save of version 1 was announced as %d", v)
		}
	case <-time.After(timeout):
		t.Fatal("a save after Watch's changed(0) was not announced")
	}
}

func watchNotifies(t *testing.T, s cluster.RuleStore) {
	got, done, cancel := watch(s)
	defer func() { cancel(); <-done }()
	if v := <-got; v != 0 { // listening
		t.Fatalf("Watch's first call was changed(%d), want changed(0)", v)
	}
	// Save until a notification arrives (the watch may start late).
	var base int64
	deadline := time.After(timeout)
	for {
		save(t, s, "shop", base, int(base+1))
		base++
		select {
		case v := <-got:
			if v < 1 || v > base {
				t.Fatalf("Watch saw version %d after saves up to %d", v, base)
			}
			return
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatal("Watch saw no save")
		}
	}
}

func watchEnds(t *testing.T, s cluster.RuleStore) {
	_, done, cancel := watch(s)
	save(t, s, "shop", 0, 1)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Watch returned %v after its context ended, want context.Canceled", err)
		}
	case <-time.After(timeout):
		t.Fatal("Watch did not return after its context ended")
	}
}

func reportsLatest(t *testing.T, s cluster.RuleStore) {
	for _, r := range []cluster.RuleReport{{Instance: "b", Version: 1}, {Instance: "a", Version: 1}, {Instance: "a", Version: 2, Refused: 3, Err: "rules: no"}} {
		if err := s.Report(ctx(t), "shop", r, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	reps, err := s.Reports(ctx(t), "shop")
	if err != nil || len(reps) != 2 || reps[0].Instance != "a" || reps[0].Version != 2 || reps[0].Refused != 3 || reps[0].Err != "rules: no" || reps[1].Instance != "b" {
		t.Fatalf("Reports = %+v, %v; want a's latest, then b", reps, err)
	}
}

func reportNeedsInstance(t *testing.T, s cluster.RuleStore) {
	if err := s.Report(ctx(t), "shop", cluster.RuleReport{}, time.Minute); err == nil {
		t.Fatal("a report without an instance was accepted")
	}
}

func auditSaves(t *testing.T, s cluster.RuleStore) {
	save(t, s, "shop", 0, 1)
	save(t, s, "shop", 1, 2)
	log, err := s.AuditLog(ctx(t), "shop", 10)
	if err != nil || len(log) != 2 || log[0].Action != "save" || log[0].Version != 2 || log[0].User != "ann" ||
		log[0].Detail != "-     threshold: 1\n+     threshold: 2\n" || log[0].At.IsZero() || log[1].Version != 1 {
		t.Fatalf("AuditLog(shop) = %+v, %v", log, err)
	}
}

func auditAll(t *testing.T, s cluster.RuleStore) {
	save(t, s, "shop", 0, 1)
	save(t, s, "shop", 1, 2)
	if err := s.Audit(ctx(t), cluster.AuditEntry{User: "ann", Action: "login"}); err != nil {
		t.Fatal(err)
	}
	all, err := s.AuditLog(ctx(t), "", 2)
	if err != nil || len(all) != 2 || all[0].Action != "login" || all[1].Version != 2 {
		t.Fatalf("AuditLog(all, 2) = %+v, %v; want the login, then version 2's save", all, err)
	}
}

func auditNeedsAction(t *testing.T, s cluster.RuleStore) {
	if err := s.Audit(ctx(t), cluster.AuditEntry{User: "ann"}); err == nil {
		t.Fatal("an audit entry without an action was accepted")
	}
}
