package sluiceredis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/fleettest"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/rules"
)

const (
	docA = "flow:\n  - resource: api\n    threshold: 10\n"
	docB = "flow:\n  - resource: api\n    threshold: 20\n"
	docC = "flow:\n  - resource: api\n    threshold: 30\n  - resource: web\n    threshold: 5\n"
)

func save(t testing.TB, s cluster.RuleStore, app string, base int64, doc string) cluster.RuleVersion {
	t.Helper()
	v, err := s.Save(ctxT(t), app, base, cluster.RuleVersion{Doc: []byte(doc), Author: "ann", Comment: "c" + doc[len(doc)-4:]})
	if err != nil {
		t.Fatalf("Save(%s, base %d): %v", app, base, err)
	}
	return v
}

func current(t testing.TB, s cluster.RuleStore, app string) cluster.RuleVersion {
	t.Helper()
	v, err := s.Current(ctxT(t), app)
	if err != nil {
		t.Fatalf("Current(%s): %v", app, err)
	}
	return v
}

// currentAfterKill is current for a store whose connections a CLIENT KILL
// may just have cut: a read that fails on a dead pooled connection is tried
// again (go-redis drops the connection it failed on), a few times at most.
func currentAfterKill(t testing.TB, s cluster.RuleStore, app string) cluster.RuleVersion {
	t.Helper()
	var err error
	for range 3 {
		var v cluster.RuleVersion
		if v, err = s.Current(ctxT(t), app); err == nil {
			return v
		}
	}
	t.Fatalf("Current(%s) after a kill, three times: %v", app, err)
	return cluster.RuleVersion{}
}

func TestRuleStoreVersions(t *testing.T) {
	srv := redistest.Start(t)
	s := NewRuleStore(srv.Client(t), RuleStoreConfig{})
	ctx := ctxT(t)

	if v := current(t, s, "shop"); v.Version != 0 || v.Doc != nil {
		t.Fatalf("Current of a new app = %+v, want version 0", v)
	}
	before := redisTime(t, srv.Client(t))
	v1 := save(t, s, "shop", 0, docA)
	after := redisTime(t, srv.Client(t))
	if v1.Version != 1 || v1.At.UnixMicro() < before || v1.At.UnixMicro() > after {
		t.Fatalf("Save = version %d at %d, want 1 within [%d, %d] (Redis time)", v1.Version, v1.At.UnixMicro(), before, after)
	}
	v2 := save(t, s, "shop", 1, docB)
	rb, err := s.Save(ctx, "shop", 2, cluster.RuleVersion{Doc: v1.Doc, Author: "bob", RollbackOf: 1})
	if err != nil {
		t.Fatal(err)
	}
	if rb.Version != 3 || rb.RollbackOf != 1 {
		t.Fatalf("rollback = %+v", rb)
	}
	cur := current(t, s, "shop")
	if cur.Version != 3 || string(cur.Doc) != docA || cur.Author != "bob" || cur.RollbackOf != 1 || !cur.At.Equal(rb.At) {
		t.Fatalf("Current = %+v, want the rollback %+v", cur, rb)
	}
	got, err := s.Version(ctx, "shop", 2)
	if err != nil || string(got.Doc) != docB || got.Comment != v2.Comment || !got.At.Equal(v2.At) {
		t.Fatalf("Version(2) = %+v, %v; want %+v", got, err, v2)
	}
	if _, err := s.Version(ctx, "shop", 4); !errors.Is(err, cluster.ErrNoVersion) {
		t.Fatalf("Version(4) error = %v, want ErrNoVersion", err)
	}
	hist, err := s.History(ctx, "shop", 10)
	if err != nil {
		t.Fatal(err)
	}
	var nums []int64
	for _, v := range hist {
		nums = append(nums, v.Version)
	}
	if fmt.Sprint(nums) != "[3 2 1]" {
		t.Fatalf("History = %v, want [3 2 1] (newest first)", nums)
	}
	if h, _ := s.History(ctx, "shop", 2); len(h) != 2 || h[1].Version != 2 {
		t.Fatalf("History(limit 2) = %d versions", len(h))
	}

	save(t, s, "blog", 0, docC)
	apps, err := s.Apps(ctx)
	if err != nil || fmt.Sprint(apps) != "[blog shop]" {
		t.Fatalf("Apps = %v, %v; want [blog shop]", apps, err)
	}

	log, err := s.AuditLog(ctx, "shop", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 3 {
		t.Fatalf("AuditLog(shop) has %d entries, want 3", len(log))
	}
	if e := log[0]; e.Action != "rollback" || e.User != "bob" || e.Version != 3 || e.App != "shop" || !e.At.Equal(rb.At) {
		t.Fatalf("newest audit entry = %+v", e)
	}
	if d := log[1].Detail; d != "-     threshold: 10\n+     threshold: 20\n" {
		t.Fatalf("save 2's detail = %q, want the line diff", d)
	}
	all, err := s.AuditLog(ctx, "", 10)
	if err != nil || len(all) != 4 || all[0].App != "blog" {
		t.Fatalf("AuditLog(all) = %d entries (newest %+v), %v; want 4, blog's first", len(all), all[0], err)
	}
}

// TestRuleStoreConflict: saves on the same base race; exactly one wins.
func TestRuleStoreConflict(t *testing.T) {
	srv := redistest.Start(t)
	s := NewRuleStore(srv.Client(t), RuleStoreConfig{})
	save(t, s, "shop", 0, docA)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			doc := fmt.Sprintf("flow:\n  - resource: api\n    threshold: %d\n", 100+i)
			_, errs[i] = s.Save(context.Background(), "shop", 1, cluster.RuleVersion{Doc: []byte(doc), Author: "w"})
		}(i)
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, cluster.ErrConflict):
			t.Fatalf("Save %d: %v, want nil or ErrConflict", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d saves on base 1 won, want exactly 1", won)
	}
	if v := current(t, s, "shop"); v.Version != 2 {
		t.Fatalf("version in force %d, want 2", v.Version)
	}
	if h, _ := s.History(ctxT(t), "shop", 100); len(h) != 2 {
		t.Fatalf("history has %d versions, want 2", len(h))
	}
	// A base that is not current, and one never written.
	for _, base := range []int64{0, 1, 5} {
		if _, err := s.Save(ctxT(t), "shop", base, cluster.RuleVersion{Doc: []byte(docB), Author: "x"}); !errors.Is(err, cluster.ErrConflict) {
			t.Fatalf("Save(base %d) = %v, want ErrConflict", base, err)
		}
	}
}

func TestRuleStoreRefusesInvalid(t *testing.T) {
	srv := redistest.Start(t)
	s := NewRuleStore(srv.Client(t), RuleStoreConfig{Limits: rules.DecodeLimits{MaxBytes: 1000}})
	save(t, s, "shop", 0, docA)
	tests := []struct {
		name, doc, author string
		want              string // in the error
		field             string // of the *rules.Error, "" when none
	}{
		{"bad field", "flow:\n  - resource: api\n    treshold: 5\n", "a", `unknown field "treshold"`, "treshold"},
		{"bad value", "flow:\n  - resource: api\n    threshold: -1\n", "a", "Threshold", "Threshold"},
		{"duplicate", "flow:\n  - resource: api\n    threshold: 1\n  - resource: api\n    threshold: 2\n", "a", "flow rule 1", ""},
		{"empty", "", "a", "empty document", ""},
		{"too large", "flow: [" + strings.Repeat(" ", 1000) + "]", "a", "limit of 1000 bytes", ""},
		{"no author", docB, "", "empty author", ""},
		{"long author", docB, strings.Repeat("x", 300), "author of 300 bytes", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Save(ctxT(t), "shop", 1, cluster.RuleVersion{Doc: []byte(tt.doc), Author: tt.author})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Save = %v, want an error containing %q", err, tt.want)
			}
			if tt.author == "a" && !errors.Is(err, cluster.ErrInvalidRules) {
				t.Fatalf("Save = %v, want it to wrap ErrInvalidRules", err)
			}
			var re *rules.Error
			if tt.field != "" && (!errors.As(err, &re) || re.Kind != "flow" || re.Field != tt.field || re.Resource != "api") {
				t.Fatalf("Save error %v: want a *rules.Error of flow rule on api, field %s", err, tt.field)
			}
			if v := current(t, s, "shop"); v.Version != 1 || string(v.Doc) != docA {
				t.Fatalf("after a refused save, version %d in force, want 1", v.Version)
			}
		})
	}
}

// TestRuleStoreBounded: the history and the audit lists keep their length,
// and versions beyond the history are deleted.
func TestRuleStoreBounded(t *testing.T) {
	srv := redistest.Start(t)
	raw := srv.Client(t)
	s := NewRuleStore(srv.Client(t), RuleStoreConfig{History: 3, AuditLen: 4})
	for i := int64(0); i < 6; i++ {
		save(t, s, "shop", i, fmt.Sprintf("flow:\n  - resource: api\n    threshold: %d\n", i+1))
	}
	for i := 0; i < 6; i++ {
		if err := s.Audit(ctxT(t), cluster.AuditEntry{User: "u", Action: "login"}); err != nil {
			t.Fatal(err)
		}
	}
	h, err := s.History(ctxT(t), "shop", 100)
	if err != nil || len(h) != 3 || h[0].Version != 6 || h[2].Version != 4 {
		t.Fatalf("History = %d versions, %v; want 6, 5, 4", len(h), err)
	}
	if _, err := s.Version(ctxT(t), "shop", 3); !errors.Is(err, cluster.ErrNoVersion) {
		t.Fatalf("Version(3) beyond the history: %v, want ErrNoVersion", err)
	}
	keys, err := raw.Keys(ctxT(t), "sluice:rules:{shop}:v:*").Result()
	if err != nil || len(keys) != 3 {
		t.Fatalf("version keys = %v, want 3", keys)
	}
	for _, k := range []string{"sluice:rules:{shop}:audit", "sluice:audit"} {
		if n := raw.LLen(ctxT(t), k).Val(); n != 4 {
			t.Fatalf("LLEN %s = %d, want 4", k, n)
		}
	}
	all, err := s.AuditLog(ctxT(t), "", 100)
	if err != nil || len(all) != 4 || all[0].Action != "login" {
		t.Fatalf("AuditLog = %d entries, %v; want the 4 logins (newest)", len(all), err)
	}
}

func TestRuleStoreWatch(t *testing.T) {
	srv := redistest.Start(t)
	s := NewRuleStore(srv.Client(t), RuleStoreConfig{})
	other := NewRuleStore(srv.Client(t), RuleStoreConfig{Prefix: "other"})
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan int64, 10)
	done := make(chan error, 1)
	go func() {
		done <- s.Watch(ctx, "shop", func(v int64) { got <- v })
	}()
	// changed(0): the subscription is in place (the channel has its
	// subscriber), so every save below is announced.
	select {
	case v := <-got:
		if v != 0 {
			t.Fatalf("Watch's first call was changed(%d), want changed(0)", v)
		}
	case <-time.After(testTimeout):
		t.Fatal("Watch did not say it listens")
	}
	if n, err := srv.Client(t).PubSubNumSub(ctx, "sluice:rules:{shop}:changed").Result(); err != nil || n["sluice:rules:{shop}:changed"] != 1 {
		t.Fatalf("after changed(0) the channel has subscribers %v, %v; want 1", n, err)
	}
	save(t, other, "shop", 0, docA) // another prefix: not this channel
	save(t, s, "blog", 0, docA)     // another app
	save(t, s, "shop", 0, docA)
	save(t, s, "shop", 1, docB)
	for _, want := range []int64{1, 2} {
		select {
		case v := <-got:
			if v != want {
				t.Fatalf("Watch saw version %d, want %d", v, want)
			}
		case <-time.After(testTimeout):
			t.Fatalf("Watch did not see version %d", want)
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch returned %v, want context.Canceled", err)
	}
	if len(got) != 0 {
		t.Fatalf("Watch saw %d more versions", len(got))
	}
}

// checkConsistent checks that app's version in force is whole: its hash has
// every field, it heads the history, its audit entry heads the audit list,
// and the history holds each version once.
func checkConsistent(t *testing.T, s *RuleStore, raw *redis.Client, app string, wantVersions int64) cluster.RuleVersion {
	t.Helper()
	ctx := ctxT(t)
	cur := current(t, s, app)
	if cur.Version != wantVersions || cur.Author == "" || cur.At.IsZero() || len(cur.Doc) == 0 {
		t.Fatalf("version in force %+v, want %d, whole", cur, wantVersions)
	}
	k := s.keys(app)
	hist, _ := raw.LRange(ctx, k.hist, 0, -1).Result()
	if int64(len(hist)) != wantVersions || hist[0] != fmt.Sprint(wantVersions) {
		t.Fatalf("history %v for version %d in force", hist, wantVersions)
	}
	log, _ := s.AuditLog(ctx, app, 1)
	if len(log) != 1 || log[0].Version != wantVersions {
		t.Fatalf("newest audit entry %+v for version %d in force", log, wantVersions)
	}
	return cur
}

// TestRuleStoreInterruptedSave: a save cut short leaves the previous
// version in force, whole; never a partial one.
func TestRuleStoreInterruptedSave(t *testing.T) {
	srv := redistest.Start(t)
	raw := srv.Client(t)
	s := NewRuleStore(srv.Client(t), RuleStoreConfig{})
	save(t, s, "shop", 0, docA)

	t.Run("step fails", func(t *testing.T) {
		// A key in the way of a step after the check: the script refuses
		// before its first write.
		k := s.keys("shop")
		if err := raw.Set(ctxT(t), k.audit, "in the way", 0).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := s.Save(ctxT(t), "shop", 1, cluster.RuleVersion{Doc: []byte(docB), Author: "a"})
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("Save over a wrong-typed key = %v, want WRONGTYPE", err)
		}
		if v := current(t, s, "shop"); v.Version != 1 || string(v.Doc) != docA {
			t.Fatalf("version in force %d after a failed save, want 1", v.Version)
		}
		if n, _ := raw.Exists(ctxT(t), k.vstem+"2").Result(); n != 0 {
			t.Fatal("the failed save wrote its version")
		}
		raw.Del(ctxT(t), k.audit)
		save(t, s, "shop", 1, docB)
		save(t, s, "shop", 2, docA)
	})

	t.Run("connection killed", func(t *testing.T) {
		// Saves whose context ends, or whose connection is killed, at
		// every moment of their round trip: each has happened whole or
		// not at all.
		n := current(t, s, "shop").Version
		var ok, cut int
		for i := 0; i < 60; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%20)*50*time.Microsecond)
			killed := make(chan struct{})
			go func() {
				defer close(killed)
				if i%2 == 1 {
					_ = raw.ClientKillByFilter(context.Background(), "TYPE", "normal", "SKIPME", "yes").Err()
				}
			}()
			doc := fmt.Sprintf("flow:\n  - resource: api\n    threshold: %d\n", i+1)
			_, err := s.Save(ctx, "shop", n, cluster.RuleVersion{Doc: []byte(doc), Author: "k"})
			cancel()
			<-killed
			// The reply may be lost although the script ran: the version
			// in force tells. A kill that lands after the save leaves a
			// dead connection in the pool, which the next command meets
			// (the test client does not retry), so the reads here retry.
			cur := currentAfterKill(t, s, "shop")
			switch cur.Version {
			case n:
				if err == nil {
					t.Fatalf("Save %d succeeded but version %d stays in force", i, n)
				}
				cut++
			case n + 1:
				if string(cur.Doc) != doc {
					t.Fatalf("version %d holds %q, want %q", cur.Version, cur.Doc, doc)
				}
				n++
				ok++
			default:
				t.Fatalf("version %d in force after a save on base %d", cur.Version, n)
			}
			// The history and the audit log agree with the version in force.
			k := s.keys("shop")
			hist, err := raw.LRange(ctxT(t), k.hist, 0, 0).Result()
			if err != nil {
				hist, err = raw.LRange(ctxT(t), k.hist, 0, 0).Result()
			}
			if err != nil {
				t.Fatalf("history after save %d: %v", i, err)
			}
			if len(hist) != 1 || hist[0] != fmt.Sprint(n) {
				t.Fatalf("history head %v with version %d in force", hist, n)
			}
			if log, _ := s.AuditLog(ctxT(t), "shop", 1); len(log) > 0 && log[0].Version != n {
				t.Fatalf("audit head version %d with version %d in force", log[0].Version, n)
			}
		}
		t.Logf("%d saves went through, %d were cut short", ok, cut)
		checkConsistent(t, s, raw, "shop", n)
	})

	t.Run("server stopped", func(t *testing.T) {
		srv.Kill()
		_, err := s.Save(ctxT(t), "shop", 1, cluster.RuleVersion{Doc: []byte(docB), Author: "a"})
		if err == nil {
			t.Fatal("Save on a stopped server succeeded")
		}
		if _, err := s.Current(ctxT(t), "shop"); err == nil {
			t.Fatal("Current on a stopped server succeeded")
		}
		srv.Restart()
	})
}

// TestRuleStoreReports: a report replaces the instance's previous one;
// reports expire with their ttl, and so do the keys that hold them.
func TestRuleStoreReports(t *testing.T) {
	srv := redistest.Start(t)
	raw := srv.Client(t)
	s := NewRuleStore(srv.Client(t), RuleStoreConfig{})
	ctx := ctxT(t)
	rep := func(inst string, v int64, ttl time.Duration) {
		t.Helper()
		if err := s.Report(ctx, "shop", cluster.RuleReport{Instance: inst, Version: v, Refused: v + 1, Err: "rules: flow rule 0: Cluster: no"}, ttl); err != nil {
			t.Fatal(err)
		}
	}
	rep("b", 1, time.Minute)
	rep("a", 1, time.Minute)
	rep("a", 2, 30*time.Second)
	got, err := s.Reports(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Instance != "a" || got[0].Version != 2 || got[0].Refused != 3 || got[0].Err == "" || got[1].Instance != "b" || got[0].At.IsZero() {
		t.Fatalf("Reports = %+v", got)
	}
	k := s.keys("shop")
	for _, key := range []string{k.rep, k.repd} {
		ttl := raw.PTTL(ctx, key).Val()
		if ttl <= 50*time.Second || ttl > time.Minute {
			t.Fatalf("PTTL %s = %v, want the longest report's (1m)", key, ttl)
		}
	}
	// A report of 1 ms: gone once Redis's clock has passed it.
	rep("c", 1, time.Millisecond)
	deadline := time.Now().Add(testTimeout)
	for {
		got, err := s.Reports(ctx, "shop")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the 1 ms report is still listed: %+v", got)
		}
		time.Sleep(time.Millisecond)
	}
	if n := raw.HLen(ctx, k.repd).Val(); n != 2 {
		t.Fatalf("reports hash holds %d, want 2 (expired ones dropped)", n)
	}
	if err := s.Report(ctx, "shop", cluster.RuleReport{Instance: ""}, time.Second); err == nil {
		t.Fatal("a report without an instance was accepted")
	}
}

// TestRuleStorePrefix: stores with different prefixes share nothing, and
// no app name escapes its hash tag.
func TestRuleStorePrefix(t *testing.T) {
	srv := redistest.Start(t)
	a := NewRuleStore(srv.Client(t), RuleStoreConfig{Prefix: "a"})
	b := NewRuleStore(srv.Client(t), RuleStoreConfig{Prefix: "b"})
	save(t, a, "shop", 0, docA)
	if v := current(t, b, "shop"); v.Version != 0 {
		t.Fatalf("prefix b sees version %d of prefix a", v.Version)
	}
	if apps, _ := b.Apps(ctxT(t)); len(apps) != 0 {
		t.Fatalf("prefix b lists %v", apps)
	}
	save(t, b, "shop", 0, docB)
	if v := current(t, a, "shop"); string(v.Doc) != docA {
		t.Fatal("a save under prefix b changed prefix a")
	}
	for _, app := range []string{"{shop}", "a}b", "x%7Dy"} {
		save(t, a, app, 0, docC)
		if v := current(t, a, app); v.Version != 1 {
			t.Fatalf("app %q: version %d", app, v.Version)
		}
	}
	if v := current(t, a, "shop"); v.Version != 1 {
		t.Fatalf("apps with braces touched shop: version %d", v.Version)
	}
	keys, _ := srv.Client(t).Keys(ctxT(t), "*").Result()
	for _, k := range keys {
		if !strings.HasPrefix(k, "a:") && !strings.HasPrefix(k, "b:") {
			t.Fatalf("key %q outside the prefixes", k)
		}
	}
}

// TestRuleStoreCluster runs the store on a 3-primary Redis Cluster: every
// key of an app in one slot, saves, watch and reports as on one server.
func TestRuleStoreCluster(t *testing.T) {
	rc := redistest.StartCluster(t, 3)
	s := NewRuleStore(rc.Client(t), RuleStoreConfig{History: 2})
	admin := rc.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan int64, 10)
	done := make(chan error, 1)
	go func() { done <- s.Watch(ctx, "shop", func(v int64) { got <- v }) }()

	for _, app := range []string{"shop", "blog", "a{b}c"} {
		k := s.keys(app)
		want := slot(escapeTag(app))
		for _, key := range []string{k.cur, k.hist, k.audit, k.rep, k.repd, k.vstem + "1"} {
			if sl := admin.ClusterKeySlot(ctxT(t), key).Val(); sl != int64(want) {
				t.Fatalf("key %s in slot %d, want %d", key, sl, want)
			}
		}
		for i := int64(0); i < 3; i++ {
			save(t, s, app, i, fmt.Sprintf("flow:\n  - resource: api\n    threshold: %d\n", i+1))
		}
		checkConsistentCluster(t, s, app, 3)
	}
	if err := s.Report(ctxT(t), "shop", cluster.RuleReport{Instance: "i1", Version: 3}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Reports(ctxT(t), "shop"); err != nil || len(r) != 1 || r[0].Version != 3 {
		t.Fatalf("Reports = %+v, %v", r, err)
	}
	if all, err := s.AuditLog(ctxT(t), "", 100); err != nil || len(all) != 9 {
		t.Fatalf("AuditLog = %d entries, %v; want 9", len(all), err)
	}
	// Once Watch says it listens (changed(0)), a save is seen.
	for v := range got {
		if v == 0 {
			break
		}
	}
	save(t, s, "shop", 3, "flow:\n  - resource: api\n    threshold: 4\n")
	for {
		select {
		case v := <-got:
			if v != 4 {
				continue // a save made before Watch listened
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("Watch = %v", err)
			}
			return
		case <-time.After(testTimeout):
			t.Fatal("Watch on Cluster did not see version 4")
		}
	}
}

func checkConsistentCluster(t *testing.T, s *RuleStore, app string, want int64) {
	t.Helper()
	cur := current(t, s, app)
	h, err := s.History(ctxT(t), app, 10)
	if err != nil || cur.Version != want || len(h) != 2 || h[0].Version != want {
		t.Fatalf("%s: current %d, history %d versions (%v); want %d, 2", app, cur.Version, len(h), err, want)
	}
}

// TestRuleStoreConformance runs the suite every cluster.RuleStore passes,
// each subtest under a prefix of its own on one server.
func TestRuleStoreConformance(t *testing.T) {
	srv := redistest.Start(t)
	n := 0
	fleettest.RuleStore(t, func(t *testing.T) cluster.RuleStore {
		n++
		return NewRuleStore(srv.Client(t), RuleStoreConfig{Prefix: fmt.Sprint("suite", n)})
	})
}
