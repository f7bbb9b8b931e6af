package sluiceredis

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
)

// TestFleetApps: the applications whose instances publish frames
// (Telemetry.Apps) or heartbeats (Store.Apps) are listed while their data
// lives, hostile names as they are, and the index holds at most 1,000
// names whatever is sent.
func TestFleetApps(t *testing.T) {
	s, rc, srv := standalone(t)
	tm := NewTelemetry(srv.Client(t), TelemetryConfig{})
	ctx := ctxT(t)
	xss := `<script>alert("x")</script>{tag}`
	for _, app := range []string{"shop", xss} {
		if err := tm.Publish(ctx, cluster.Frame{App: app, Instance: "i1", Second: 1}, 5, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := tm.Publish(ctx, cluster.Frame{App: "brief", Instance: "i1", Second: 1}, 5, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Beat(ctx, cluster.Member{ID: "m1", App: "pay"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "a frame of 1 ms expires", func() bool {
		apps, err := tm.Apps(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Equal(apps, []string{xss, "shop"})
	})
	if apps, err := s.Apps(ctx); err != nil || !slices.Equal(apps, []string{"pay"}) {
		t.Fatalf("Store.Apps = %q, %v", apps, err)
	}
	for i := range maxFleetApps + 5 {
		if err := noteApp(ctx, rc, tm.appsKey(), fmt.Sprintf("flood-%04d", i), time.Duration(i+1)*time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	apps, err := tm.Apps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(apps) != maxFleetApps || slices.Contains(apps, "shop") || apps[0] != "flood-0005" {
		t.Fatalf("after a flood: %d names, first %q", len(apps), apps[0])
	}
	if n := rc.ZCard(ctx, tm.appsKey()).Val(); n != maxFleetApps {
		t.Fatalf("index of %d names", n)
	}
}

// TestRuleStoreRetire: Retire deletes an application's versions, history,
// reports and audit list, takes it off Apps, keeps its audit entries in
// the list of no application and records the retirement there with the
// rules that were in force; another application is untouched, and the
// name can start again from version 1.
func TestRuleStoreRetire(t *testing.T) {
	_, rc, srv := standalone(t)
	s := NewRuleStore(srv.Client(t), RuleStoreConfig{History: 3})
	ctx := ctxT(t)
	for i := range 5 {
		save(t, s, "shop", int64(i), fmt.Sprintf("flow:\n  - resource: api\n    threshold: %d\n", i+1))
	}
	save(t, s, "other", 0, docA)
	if err := s.Report(ctx, "shop", cluster.RuleReport{Instance: "i1", Version: 5}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Retire(ctx, "shop", "ann"); err != nil {
		t.Fatal(err)
	}
	keys := rc.Keys(ctx, "*{shop}*").Val()
	if len(keys) != 0 {
		t.Fatalf("keys left: %q", keys)
	}
	if apps, err := s.Apps(ctx); err != nil || !slices.Equal(apps, []string{"other"}) {
		t.Fatalf("Apps = %q, %v", apps, err)
	}
	if v := current(t, s, "shop"); v.Version != 0 {
		t.Fatalf("Current = %+v", v)
	}
	if reps, err := s.Reports(ctx, "shop"); err != nil || len(reps) != 0 {
		t.Fatalf("Reports = %+v, %v", reps, err)
	}
	if v := current(t, s, "other"); v.Version != 1 {
		t.Fatalf("other: %+v", v)
	}
	log, err := s.AuditLog(ctx, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 7 || log[0].Action != "retire" || log[0].App != "shop" || log[0].User != "ann" || log[0].Version != 5 ||
		!strings.Contains(log[0].Detail, "version 5 was in force") || !strings.Contains(log[0].Detail, "threshold: 5") {
		t.Fatalf("audit log: %+v", log)
	}
	saves := 0
	for _, e := range log {
		if e.App == "shop" && e.Action == "save" {
			saves++
		}
	}
	if saves != 5 {
		t.Fatalf("%d saves of shop kept in the audit log, want 5: %+v", saves, log)
	}
	if v := save(t, s, "shop", 0, docB); v.Version != 1 {
		t.Fatalf("a new shop: %+v", v)
	}
}

// TestRuleStoreRetireAuditRoom: the entries of a retired application fill
// only the room left in the list of no application, never pushing its own
// entries out.
func TestRuleStoreRetireAuditRoom(t *testing.T) {
	srv := redistest.Start(t)
	s := NewRuleStore(srv.Client(t), RuleStoreConfig{AuditLen: 4})
	ctx := ctxT(t)
	for i := range 3 {
		save(t, s, "shop", int64(i), fmt.Sprintf("flow:\n  - resource: api\n    threshold: %d\n", i+1))
	}
	for i := range 3 {
		if err := s.Audit(ctx, cluster.AuditEntry{User: "root", Action: fmt.Sprintf("user-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Retire(ctx, "shop", "ann"); err != nil {
		t.Fatal(err)
	}
	log, err := s.AuditLog(ctx, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range log {
		got = append(got, e.Action)
	}
	if !slices.Equal(got, []string{"retire", "user-2", "user-1", "user-0"}) {
		t.Fatalf("audit log %q", got)
	}
}
