// Package memstore keeps rules, reports, audit entries and frames in memory:
// the cluster.RuleStore and cluster.Telemetry of a dashboard that shows one
// engine of its own process, and of tests.
package memstore

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/rules"
)

// Bounds of what a Store keeps.
const (
	// MaxHistory is the number of versions kept per application.
	MaxHistory = 100
	// MaxAudit is the number of audit entries kept.
	MaxAudit = 1000
)

// Store is an in-memory cluster.RuleStore and cluster.Telemetry. Like
// sluiceredis, it records each save in the audit log (action "save", or
// "rollback" for a version with RollbackOf; Detail the line diff from the
// version before). It is safe for concurrent use.
type Store struct {
	now   func() time.Time
	apply func(app string, set rules.Set) error

	mu       sync.Mutex
	apps     map[string]*app
	audit    []cluster.AuditEntry // oldest first
	watchers map[string][]chan int64
	frames   map[string]map[string]*frames // app -> instance
}

type app struct {
	versions []cluster.RuleVersion // oldest first, at most MaxHistory
	reports  map[string]report
}

type report struct {
	r       cluster.RuleReport
	expires time.Time
}

type frames struct {
	list    []cluster.Frame
	expires time.Time
}

// New returns an empty Store reading the time with now. apply, when not
// nil, is called with every document about to be saved, after validation;
// an error from it refuses the save (a local engine that would not load the
// rules).
func New(now func() time.Time, apply func(app string, set rules.Set) error) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{now: now, apply: apply, apps: map[string]*app{}, watchers: map[string][]chan int64{},
		frames: map[string]map[string]*frames{}}
}

var (
	_ cluster.RuleStore = (*Store)(nil)
	_ cluster.Telemetry = (*Store)(nil)
)

func (s *Store) appLocked(name string) *app {
	a := s.apps[name]
	if a == nil {
		a = &app{reports: map[string]report{}}
		s.apps[name] = a
	}
	return a
}

// Apps implements cluster.RuleStore.
func (s *Store) Apps(ctx context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for name, a := range s.apps {
		if len(a.versions) > 0 {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Current implements cluster.RuleStore.
func (s *Store) Current(ctx context.Context, name string) (cluster.RuleVersion, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.apps[name]
	if a == nil || len(a.versions) == 0 {
		return cluster.RuleVersion{}, nil
	}
	return a.versions[len(a.versions)-1], nil
}

// Version implements cluster.RuleStore.
func (s *Store) Version(ctx context.Context, name string, version int64) (cluster.RuleVersion, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.apps[name]; a != nil {
		for _, v := range a.versions {
			if v.Version == version {
				return v, nil
			}
		}
	}
	return cluster.RuleVersion{}, cluster.ErrNoVersion
}

// History implements cluster.RuleStore.
func (s *Store) History(ctx context.Context, name string, limit int) ([]cluster.RuleVersion, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.apps[name]
	if a == nil {
		return nil, nil
	}
	var out []cluster.RuleVersion
	for i := len(a.versions) - 1; i >= 0 && len(out) < limit; i-- {
		out = append(out, a.versions[i])
	}
	return out, nil
}

// Save implements cluster.RuleStore.
func (s *Store) Save(ctx context.Context, name string, base int64, v cluster.RuleVersion) (cluster.RuleVersion, error) {
	set, err := rules.Decode(v.Doc, rules.YAML)
	if err != nil {
		return cluster.RuleVersion{}, err
	}
	s.mu.Lock()
	a := s.appLocked(name)
	var cur int64
	if n := len(a.versions); n > 0 {
		cur = a.versions[n-1].Version
	}
	if cur != base {
		s.mu.Unlock()
		return cluster.RuleVersion{}, cluster.ErrConflict
	}
	if s.apply != nil {
		// Under the lock, so that two saves apply in the order they are
		// recorded.
		if err := s.apply(name, set); err != nil {
			s.mu.Unlock()
			return cluster.RuleVersion{}, err
		}
	}
	var old []byte
	if n := len(a.versions); n > 0 {
		old = a.versions[n-1].Doc
	}
	v.Version = cur + 1
	v.At = s.now()
	v.Doc = slices.Clone(v.Doc)
	a.versions = append(a.versions, v)
	// Recorded with the save, as sluiceredis does.
	action := "save"
	if v.RollbackOf != 0 {
		action = "rollback"
	}
	s.auditLocked(cluster.AuditEntry{User: v.Author, App: name, Action: action, Version: v.Version,
		Detail: cluster.LineDiff(old, v.Doc)})
	if len(a.versions) > MaxHistory {
		a.versions = slices.Delete(a.versions, 0, len(a.versions)-MaxHistory)
	}
	ws := slices.Clone(s.watchers[name])
	s.mu.Unlock()
	for _, w := range ws {
		select {
		case w <- v.Version:
		default: // notifications may be lost; watchers poll too
		}
	}
	return v, nil
}

// Watch implements cluster.RuleStore.
func (s *Store) Watch(ctx context.Context, name string, changed func(version int64)) error {
	ch := make(chan int64, 16)
	s.mu.Lock()
	s.watchers[name] = append(s.watchers[name], ch)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.watchers[name] = slices.DeleteFunc(s.watchers[name], func(c chan int64) bool { return c == ch })
		s.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case v := <-ch:
			changed(v)
		}
	}
}

// Report implements cluster.RuleStore.
func (s *Store) Report(ctx context.Context, name string, r cluster.RuleReport, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.appLocked(name).reports[r.Instance] = report{r: r, expires: s.now().Add(ttl)}
	return nil
}

// Reports implements cluster.RuleStore.
func (s *Store) Reports(ctx context.Context, name string) ([]cluster.RuleReport, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.apps[name]
	if a == nil {
		return nil, nil
	}
	now := s.now()
	var out []cluster.RuleReport
	for id, r := range a.reports {
		if now.After(r.expires) {
			delete(a.reports, id)
			continue
		}
		out = append(out, r.r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Instance < out[j].Instance })
	return out, nil
}

// Audit implements cluster.RuleStore.
func (s *Store) Audit(ctx context.Context, e cluster.AuditEntry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.auditLocked(e)
	return nil
}

func (s *Store) auditLocked(e cluster.AuditEntry) {
	e.At = s.now()
	s.audit = append(s.audit, e)
	if len(s.audit) > MaxAudit {
		s.audit = slices.Delete(s.audit, 0, len(s.audit)-MaxAudit)
	}
}

// AuditLog implements cluster.RuleStore.
func (s *Store) AuditLog(ctx context.Context, name string, limit int) ([]cluster.AuditEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []cluster.AuditEntry
	for i := len(s.audit) - 1; i >= 0 && len(out) < limit; i-- {
		if name == "" || s.audit[i].App == name {
			out = append(out, s.audit[i])
		}
	}
	return out, nil
}

// Publish implements cluster.Telemetry.
func (s *Store) Publish(ctx context.Context, f cluster.Frame, keep int, ttl time.Duration) error {
	if f.App == "" || f.Instance == "" {
		return fmt.Errorf("memstore: frame without app or instance")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.frames[f.App]
	if m == nil {
		m = map[string]*frames{}
		s.frames[f.App] = m
	}
	fs := m[f.Instance]
	if fs == nil {
		fs = &frames{}
		m[f.Instance] = fs
	}
	fs.list = append(fs.list, f)
	if len(fs.list) > keep {
		fs.list = slices.Delete(fs.list, 0, len(fs.list)-keep)
	}
	fs.expires = s.now().Add(ttl)
	return nil
}

// Frames implements cluster.Telemetry.
func (s *Store) Frames(ctx context.Context, name string, since int64) ([]cluster.Frame, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	m := s.frames[name]
	ids := make([]string, 0, len(m))
	for id, fs := range m {
		if now.After(fs.expires) {
			delete(m, id)
			continue
		}
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []cluster.Frame
	for _, id := range ids {
		for _, f := range m[id].list {
			if f.Second >= since {
				out = append(out, f)
			}
		}
	}
	return out, nil
}
