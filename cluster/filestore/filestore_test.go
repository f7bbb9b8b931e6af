package filestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/fleettest"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	docA = "flow:\n  - resource: api\n    threshold: 10\n"
	docB = "flow:\n  - resource: api\n    threshold: 20\n"
)

var bg = context.Background()

// wall is a settable wall clock.
type wall struct {
	mu sync.Mutex
	t  time.Time
}

func (w *wall) now() time.Time { w.mu.Lock(); defer w.mu.Unlock(); return w.t }
func (w *wall) add(d time.Duration) {
	w.mu.Lock()
	w.t = w.t.Add(d)
	w.mu.Unlock()
}

// open opens a Store on dir with cfg (the first given, else the defaults)
// and a settable wall clock.
func open(t *testing.T, dir string, cfgs ...Config) (*Store, *wall) {
	t.Helper()
	w := &wall{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	var cfg Config
	if len(cfgs) > 0 {
		cfg = cfgs[0]
	}
	cfg.Now = w.now
	s, err := Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, w
}

func save(t *testing.T, s *Store, app string, base int64, doc string) cluster.RuleVersion {
	t.Helper()
	v, err := s.Save(bg, app, base, cluster.RuleVersion{Doc: []byte(doc), Author: "ann"})
	if err != nil {
		t.Fatalf("Save(%s, base %d): %v", app, base, err)
	}
	return v
}

func TestStoreVersions(t *testing.T) {
	dir := t.TempDir()
	s, w := open(t, dir, Config{History: 2})
	if v, err := s.Current(bg, "shop"); err != nil || v.Version != 0 {
		t.Fatalf("Current of a new app = %+v, %v", v, err)
	}
	v1 := save(t, s, "shop", 0, docA)
	w.add(time.Second)
	save(t, s, "shop", 1, docB)
	w.add(time.Second)
	rb, err := s.Save(bg, "shop", 2, cluster.RuleVersion{Doc: v1.Doc, Author: "bob", RollbackOf: 1})
	if err != nil || rb.Version != 3 {
		t.Fatalf("rollback = %+v, %v", rb, err)
	}
	cur, _ := s.Current(bg, "shop")
	if cur.Version != 3 || string(cur.Doc) != docA || cur.RollbackOf != 1 || !cur.At.Equal(w.now()) {
		t.Fatalf("Current = %+v", cur)
	}
	// The rule file is the rules in force, readable as any rule file.
	set, err := rules.DecodeFile(s.RuleFile("shop"))
	if err != nil || len(set.Flow) != 1 || set.Flow[0].Threshold != 10 {
		t.Fatalf("rule file: %+v, %v", set, err)
	}
	h, err := s.History(bg, "shop", 10)
	if err != nil || len(h) != 2 || h[0].Version != 3 || h[1].Version != 2 {
		t.Fatalf("History = %+v, %v; want 3, 2", h, err)
	}
	if _, err := s.Version(bg, "shop", 1); !errors.Is(err, cluster.ErrNoVersion) {
		t.Fatalf("Version(1) beyond the history: %v", err)
	}
	for _, base := range []int64{0, 2, 7} {
		if _, err := s.Save(bg, "shop", base, cluster.RuleVersion{Doc: []byte(docB), Author: "x"}); !errors.Is(err, cluster.ErrConflict) {
			t.Fatalf("Save(base %d) = %v, want ErrConflict", base, err)
		}
	}
	apps, _ := s.Apps(bg)
	if fmt.Sprint(apps) != "[shop]" {
		t.Fatalf("Apps = %v", apps)
	}
	log, err := s.AuditLog(bg, "shop", 10)
	if err != nil || len(log) != 3 || log[0].Action != "rollback" || log[0].Version != 3 || log[1].Detail != "-     threshold: 10\n+     threshold: 20\n" {
		t.Fatalf("AuditLog = %+v, %v", log, err)
	}
}

func TestStoreConflict(t *testing.T) {
	s, _ := open(t, t.TempDir())
	save(t, s, "shop", 0, docA)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, errs[i] = s.Save(bg, "shop", 1, cluster.RuleVersion{Doc: []byte(docB), Author: "w"})
		}(i)
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
		} else if !errors.Is(err, cluster.ErrConflict) {
			t.Fatal(err)
		}
	}
	if won != 1 {
		t.Fatalf("%d saves on base 1 won, want 1", won)
	}
}

func TestStoreRefuses(t *testing.T) {
	s, _ := open(t, t.TempDir())
	save(t, s, "shop", 0, docA)
	_, err := s.Save(bg, "shop", 1, cluster.RuleVersion{Doc: []byte("flow:\n  - resource: api\n    threshold: -1\n"), Author: "a"})
	var re *rules.Error
	if !errors.As(err, &re) || re.Field != "Threshold" || re.Resource != "api" || !errors.Is(err, cluster.ErrInvalidRules) {
		t.Fatalf("invalid doc: %v, want a *rules.Error on Threshold", err)
	}
	for _, app := range []string{"", "..", "../x", "a/b", ".hidden", "a b", strings.Repeat("a", 200)} {
		if _, err := s.Save(bg, app, 0, cluster.RuleVersion{Doc: []byte(docA), Author: "a"}); err == nil || !strings.Contains(err.Error(), "filestore: app") {
			t.Fatalf("app %q accepted: %v", app, err)
		}
	}
	if _, err := s.Save(bg, "shop", 1, cluster.RuleVersion{Doc: []byte(docB)}); err == nil || errors.Is(err, cluster.ErrInvalidRules) {
		t.Fatalf("a save without an author: %v, want an error that is not ErrInvalidRules", err)
	}
	if _, err := s.Save(bg, "shop", 1, cluster.RuleVersion{Doc: []byte("flow: [\n"), Author: "a"}); !errors.Is(err, cluster.ErrInvalidRules) {
		t.Fatalf("a malformed document: %v, want ErrInvalidRules", err)
	}
	if v, _ := s.Current(bg, "shop"); v.Version != 1 {
		t.Fatalf("version %d after refused saves, want 1", v.Version)
	}
}

// TestStoreInterruptedSave: a save failing at any step before its commit
// leaves the previous version in force and the rule file as it was; a
// crash after it is repaired by Open.
func TestStoreInterruptedSave(t *testing.T) {
	for _, step := range []string{"mkdir", "version", "commit"} {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			s, _ := open(t, dir)
			save(t, s, "shop", 0, docA)
			s.step = func(name string) error {
				if name == step {
					return errors.New("injected")
				}
				return nil
			}
			if _, err := s.Save(bg, "shop", 1, cluster.RuleVersion{Doc: []byte(docB), Author: "a"}); err == nil {
				t.Fatal("the save went through")
			}
			s.step = nil
			if v, _ := s.Current(bg, "shop"); v.Version != 1 || string(v.Doc) != docA {
				t.Fatalf("after a failed %s: version %d in force", step, v.Version)
			}
			if b, _ := os.ReadFile(s.RuleFile("shop")); string(b) != docA {
				t.Fatalf("rule file %q after a failed %s", b, step)
			}
			save(t, s, "shop", 1, docB) // the next save goes through
		})
	}
	t.Run("after commit", func(t *testing.T) {
		dir := t.TempDir()
		s, _ := open(t, dir)
		save(t, s, "shop", 0, docA)
		s.step = func(name string) error {
			if name == "rules" {
				return errors.New("crash")
			}
			return nil
		}
		_, _ = s.Save(bg, "shop", 1, cluster.RuleVersion{Doc: []byte(docB), Author: "a"})
		if v, _ := s.Current(bg, "shop"); v.Version != 2 {
			t.Fatalf("committed version %d, want 2", v.Version)
		}
		s2, _ := open(t, dir)
		if b, _ := os.ReadFile(s2.RuleFile("shop")); string(b) != docB {
			t.Fatalf("Open left the rule file at %q, want version 2's", b)
		}
	})
	// No temporary file is left behind.
	dir := t.TempDir()
	s, _ := open(t, dir)
	save(t, s, "shop", 0, docA)
	matches, _ := filepath.Glob(filepath.Join(dir, "shop", ".tmp-*"))
	if len(matches) != 0 {
		t.Fatalf("temporary files left: %v", matches)
	}
}

// TestStoreWatch: Watch polls on its clock; each poll after a save reports
// the new version once.
func TestStoreWatch(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	s, _ := open(t, t.TempDir(), Config{Clock: clk, PollInterval: time.Second})
	ctx, cancel := context.WithCancel(bg)
	got := make(chan int64, 10)
	done := make(chan error, 1)
	go func() { done <- s.Watch(ctx, "shop", func(v int64) { got <- v }) }()
	if v := <-got; v != 0 {
		t.Fatalf("Watch's first call was changed(%d), want changed(0) (listening)", v)
	}
	// tick moves the clock past the poll's timer and returns once the
	// poll is over (Watch has armed its next timer), so that a save after
	// a tick is never seen by the poll of that tick.
	tick := func() {
		t.Helper()
		tctx, tcancel := context.WithTimeout(bg, 10*time.Second)
		defer tcancel()
		if err := clk.BlockUntil(tctx, 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
		if err := clk.BlockUntil(tctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	tick() // nothing saved: nothing seen
	save(t, s, "shop", 0, docA)
	tick()
	if v := <-got; v != 1 {
		t.Fatalf("Watch saw %d, want 1", v)
	}
	tick()
	save(t, s, "shop", 1, docB)
	save(t, s, "shop", 2, docA)
	tick()
	if v := <-got; v != 3 {
		t.Fatalf("Watch saw %d, want 3 (the version at the poll)", v)
	}
	tick()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch = %v", err)
	}
	if len(got) != 0 {
		t.Fatalf("%d more notifications", len(got))
	}
}

func TestStoreReports(t *testing.T) {
	s, w := open(t, t.TempDir())
	for _, r := range []cluster.RuleReport{{Instance: "b", Version: 1}, {Instance: "a", Version: 1}, {Instance: "a", Version: 2, Refused: 3, Err: "no"}} {
		if err := s.Report(bg, "shop", r, time.Minute); err != nil {
			t.Fatal(err)
		}
		w.add(10 * time.Second)
	}
	got, _ := s.Reports(bg, "shop")
	if len(got) != 2 || got[0].Instance != "a" || got[0].Version != 2 || got[0].Err != "no" || got[1].Instance != "b" {
		t.Fatalf("Reports = %+v", got)
	}
	w.add(35 * time.Second) // b reported 60s ago, a 40s
	if got, _ := s.Reports(bg, "shop"); len(got) != 1 || got[0].Instance != "a" {
		t.Fatalf("Reports after b expired = %+v", got)
	}
}

// TestStoreAuditRotation: the audit file is rotated at its size, so the
// log stays within twice it; the newest entries come first.
func TestStoreAuditRotation(t *testing.T) {
	dir := t.TempDir()
	s, w := open(t, dir, Config{AuditBytes: 1000})
	for i := 0; i < 100; i++ {
		if err := s.Audit(bg, cluster.AuditEntry{User: "u", Action: "login", Detail: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
		w.add(time.Second)
	}
	for _, f := range []string{"audit.jsonl", "audit.jsonl.1"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil || fi.Size() > 1000 {
			t.Fatalf("%s: %v, %v", f, fi, err)
		}
	}
	log, err := s.AuditLog(bg, "", 1000)
	if err != nil || len(log) < 10 || len(log) > 30 || log[0].Detail != "99" {
		t.Fatalf("AuditLog = %d entries (newest %+v), %v", len(log), log[0], err)
	}
	for i := 1; i < len(log); i++ {
		if !log[i].At.Before(log[i-1].At) {
			t.Fatalf("entries not newest first at %d", i)
		}
	}
}

// TestConformance runs the suite every cluster.RuleStore passes.
func TestConformance(t *testing.T) {
	fleettest.RuleStore(t, func(t *testing.T) cluster.RuleStore {
		s, err := Open(t.TempDir(), Config{PollInterval: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
