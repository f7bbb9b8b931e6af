package sluicetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/linediff"
	"github.com/sluice-go/sluice/rules"
)

// Bounds of the rule store in memory, those of the Redis one by default.
const (
	keepVersions = 100   // versions kept per application
	keepAudit    = 10000 // audit entries kept
)

// NewRuleStore returns a cluster.RuleStore in memory, for tests of code that
// follows, edits or shows versioned rules (sluice.WithRuleStore, a
// dashboard). It keeps the last 100 versions of each application and the
// last 10,000 audit entries; Save validates documents as rules.Decode does
// and requires an Author, as the Redis and file stores do; Watch notifies
// on the calling goroutine and never loses the latest version (it starts
// no goroutine). Versions, reports and audit entries are dated
// time.Unix(0, clock.Nanotime()), or with time.Now when clock is nil;
// reports expire on the same time.
//
// fail makes the store fail as NewStore's does: every method returns err
// until fail(nil); a Watch running meanwhile keeps running.
func NewRuleStore(clock sluice.Clock) (store cluster.RuleStore, fail func(err error)) {
	s := &memRules{now: time.Now, apps: map[string]*memApp{}}
	if clock != nil {
		s.now = func() time.Time { return time.Unix(0, clock.Nanotime()) }
	}
	return s, s.setFail
}

// memRules is NewRuleStore's cluster.RuleStore.
type memRules struct {
	now func() time.Time

	mu    sync.Mutex
	err   error
	apps  map[string]*memApp
	audit []cluster.AuditEntry // oldest first
}

type memApp struct {
	versions []cluster.RuleVersion // the kept ones, oldest first
	reports  map[string]memReport
	watchers map[*watcher]struct{}
}

type memReport struct {
	r       cluster.RuleReport
	expires time.Time
}

// watcher is one Watch: Save leaves the version in latest and wakes it.
type watcher struct {
	wake   chan struct{} // capacity 1
	latest int64         // under memRules.mu
}

var _ cluster.RuleStore = (*memRules)(nil)

func (s *memRules) setFail(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// begin checks app (unless "" is allowed), ctx and the failure, and takes
// the lock.
func (s *memRules) begin(ctx context.Context, app string, anyApp bool) error {
	if app == "" && !anyApp {
		return errors.New("sluicetest: empty app")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return err
	}
	return nil
}

func (s *memRules) app(name string) *memApp {
	a := s.apps[name]
	if a == nil {
		a = &memApp{reports: map[string]memReport{}, watchers: map[*watcher]struct{}{}}
		s.apps[name] = a
	}
	return a
}

func (a *memApp) current() int64 {
	if a == nil || len(a.versions) == 0 {
		return 0
	}
	return a.versions[len(a.versions)-1].Version
}

func cloneVersion(v cluster.RuleVersion) cluster.RuleVersion {
	v.Doc = slices.Clone(v.Doc)
	return v
}

// Apps returns the applications with a version in force, sorted.
func (s *memRules) Apps(ctx context.Context) ([]string, error) {
	if err := s.begin(ctx, "", true); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []string
	for name, a := range s.apps {
		if a.current() > 0 {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Current returns the version in force, Version 0 when there is none.
func (s *memRules) Current(ctx context.Context, app string) (cluster.RuleVersion, error) {
	if err := s.begin(ctx, app, false); err != nil {
		return cluster.RuleVersion{}, err
	}
	defer s.mu.Unlock()
	a := s.apps[app]
	if a.current() == 0 {
		return cluster.RuleVersion{}, nil
	}
	return cloneVersion(a.versions[len(a.versions)-1]), nil
}

// Version returns a kept version, or cluster.ErrNoVersion.
func (s *memRules) Version(ctx context.Context, app string, n int64) (cluster.RuleVersion, error) {
	if err := s.begin(ctx, app, false); err != nil {
		return cluster.RuleVersion{}, err
	}
	defer s.mu.Unlock()
	if a := s.apps[app]; a != nil {
		for _, v := range a.versions {
			if v.Version == n {
				return cloneVersion(v), nil
			}
		}
	}
	return cluster.RuleVersion{}, cluster.ErrNoVersion
}

// History returns up to limit kept versions, newest first.
func (s *memRules) History(ctx context.Context, app string, limit int) ([]cluster.RuleVersion, error) {
	if err := s.begin(ctx, app, false); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []cluster.RuleVersion
	if a := s.apps[app]; a != nil {
		for i := len(a.versions) - 1; i >= 0 && len(out) < limit; i-- {
			out = append(out, cloneVersion(a.versions[i]))
		}
	}
	return out, nil
}

// Save validates v.Doc, writes it as version base+1 if base is in force,
// audits it and wakes the watchers of app.
func (s *memRules) Save(ctx context.Context, app string, base int64, v cluster.RuleVersion) (cluster.RuleVersion, error) {
	switch {
	case v.Author == "":
		return cluster.RuleVersion{}, fmt.Errorf("sluicetest: save %q: empty author", app)
	case base < 0 || v.RollbackOf < 0:
		return cluster.RuleVersion{}, errors.New("sluicetest: negative version")
	}
	if _, err := rules.Decode(v.Doc, rules.YAML); err != nil {
		return cluster.RuleVersion{}, fmt.Errorf("sluicetest: save %q: %w: %w", app, cluster.ErrInvalidRules, err)
	}
	if err := s.begin(ctx, app, false); err != nil {
		return cluster.RuleVersion{}, err
	}
	defer s.mu.Unlock()
	a := s.app(app)
	if a.current() != base {
		return cluster.RuleVersion{}, cluster.ErrConflict
	}
	var old []byte
	if base > 0 {
		old = a.versions[len(a.versions)-1].Doc
	}
	v.Version, v.At, v.Doc = base+1, s.now(), slices.Clone(v.Doc)
	a.versions = append(a.versions, v)
	if len(a.versions) > keepVersions {
		a.versions = slices.Delete(a.versions, 0, len(a.versions)-keepVersions)
	}
	action := "save"
	if v.RollbackOf != 0 {
		action = "rollback"
	}
	s.appendAudit(cluster.AuditEntry{At: v.At, User: v.Author, App: app, Action: action, Version: v.Version, Detail: linediff.Lines(old, v.Doc)})
	for w := range a.watchers {
		w.latest = v.Version
		select {
		case w.wake <- struct{}{}:
		default: // already woken: it reads latest
		}
	}
	return cloneVersion(v), nil
}

// Watch calls changed(0) once it listens, then changed on the calling
// goroutine with the version of each save (the latest, when saves come
// faster than changed returns) until ctx ends, and returns ctx's error.
func (s *memRules) Watch(ctx context.Context, app string, changed func(version int64)) error {
	if err := s.begin(ctx, app, false); err != nil {
		return err
	}
	w := &watcher{wake: make(chan struct{}, 1)}
	s.app(app).watchers[w] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.apps[app].watchers, w)
		s.mu.Unlock()
	}()
	changed(0) // listening: see cluster.RuleStore's Watch
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.wake:
			s.mu.Lock()
			v := w.latest
			s.mu.Unlock()
			changed(v)
		}
	}
}

// Report records r for ttl, replacing the instance's previous report.
func (s *memRules) Report(ctx context.Context, app string, r cluster.RuleReport, ttl time.Duration) error {
	switch {
	case r.Instance == "":
		return fmt.Errorf("sluicetest: report %q: empty instance", app)
	case ttl <= 0:
		return fmt.Errorf("sluicetest: report %q: ttl %v not positive", app, ttl)
	}
	if err := s.begin(ctx, app, false); err != nil {
		return err
	}
	defer s.mu.Unlock()
	r.At = s.now()
	s.app(app).reports[r.Instance] = memReport{r: r, expires: r.At.Add(ttl)}
	return nil
}

// Reports returns the unexpired reports of app's instances, by instance.
func (s *memRules) Reports(ctx context.Context, app string) ([]cluster.RuleReport, error) {
	if err := s.begin(ctx, app, false); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := []cluster.RuleReport{}
	now := s.now()
	if a := s.apps[app]; a != nil {
		for id, r := range a.reports {
			if !now.Before(r.expires) {
				delete(a.reports, id)
				continue
			}
			out = append(out, r.r)
		}
	}
	slices.SortFunc(out, func(a, b cluster.RuleReport) int { return strings.Compare(a.Instance, b.Instance) })
	return out, nil
}

// Audit appends e, dated by the store.
func (s *memRules) Audit(ctx context.Context, e cluster.AuditEntry) error {
	if e.Action == "" {
		return errors.New("sluicetest: audit: empty action")
	}
	if err := s.begin(ctx, "", true); err != nil {
		return err
	}
	defer s.mu.Unlock()
	e.At = s.now()
	s.appendAudit(e)
	return nil
}

func (s *memRules) appendAudit(e cluster.AuditEntry) {
	s.audit = append(s.audit, e)
	if len(s.audit) > keepAudit {
		s.audit = slices.Delete(s.audit, 0, len(s.audit)-keepAudit)
	}
}

// AuditLog returns up to limit entries of app ("" for all), newest first.
func (s *memRules) AuditLog(ctx context.Context, app string, limit int) ([]cluster.AuditEntry, error) {
	if err := s.begin(ctx, "", true); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []cluster.AuditEntry
	for i := len(s.audit) - 1; i >= 0 && len(out) < limit; i-- {
		if app == "" || s.audit[i].App == app {
			out = append(out, s.audit[i])
		}
	}
	return out, nil
}

// Retire deletes app's rules (the versions and the instances' reports), so
// that Apps no longer lists it, and audits it as the file store does: the
// log keeps app's entries and gains one of action "retire" by user holding
// the rules that were in force. Watchers keep watching. A dashboard offers
// retirement for a rule store with this method.
func (s *memRules) Retire(ctx context.Context, app, user string) error {
	if user == "" {
		return fmt.Errorf("sluicetest: retire %q: empty user", app)
	}
	if err := s.begin(ctx, app, false); err != nil {
		return err
	}
	defer s.mu.Unlock()
	detail := "retired; it had no version in force"
	var cur int64
	if a := s.apps[app]; a != nil {
		if cur = a.current(); cur != 0 {
			detail = "retired; version " + strconv.FormatInt(cur, 10) + " was in force:\n" + string(a.versions[len(a.versions)-1].Doc)
		}
		a.versions, a.reports = nil, map[string]memReport{}
	}
	s.appendAudit(cluster.AuditEntry{At: s.now(), User: user, App: app, Action: "retire", Version: cur, Detail: detail})
	return nil
}
