package filestore

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
)

// TestStoreRetire: Retire removes an application's directory (versions,
// rules file, reports), takes it off Apps, keeps its audit entries and
// appends the retirement with the rules that were in force; another
// application is untouched and the name can start again from version 1.
func TestStoreRetire(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	save(t, s, "shop", 0, docA)
	save(t, s, "shop", 1, docB)
	save(t, s, "other", 0, docA)
	if err := s.Report(bg, "shop", cluster.RuleReport{Instance: "i1", Version: 2}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Retire(bg, "shop", "ann"); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if slices.Contains(names, "shop") || slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, ".retired") }) {
		t.Fatalf("left in the directory: %q", names)
	}
	if apps, err := s.Apps(bg); err != nil || !slices.Equal(apps, []string{"other"}) {
		t.Fatalf("Apps = %q, %v", apps, err)
	}
	if v, err := s.Current(bg, "shop"); err != nil || v.Version != 0 {
		t.Fatalf("Current = %+v, %v", v, err)
	}
	if reps, err := s.Reports(bg, "shop"); err != nil || len(reps) != 0 {
		t.Fatalf("Reports = %+v, %v", reps, err)
	}
	log, err := s.AuditLog(bg, "shop", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 3 || log[0].Action != "retire" || log[0].User != "ann" || log[0].Version != 2 ||
		!strings.Contains(log[0].Detail, "version 2 was in force") || !strings.Contains(log[0].Detail, "threshold: 20") {
		t.Fatalf("audit log: %+v", log)
	}
	if v := save(t, s, "shop", 0, docA); v.Version != 1 {
		t.Fatalf("a new shop: %+v", v)
	}
	if err := s.Retire(bg, "../x", "ann"); err == nil {
		t.Fatal("Retire of ../x: no error")
	}
}
