// Package filestore is a cluster.RuleStore in a directory, for a single
// instance or a few on one host: the versioned rules of each application,
// their history, reports and an audit log, as plain files. Each
// application's rules in force are also an ordinary rule file, so an engine
// can either follow the store (fleet.Join) or just follow the file
// (fleet.RuleFile).
//
// Layout of the directory (docs/design/rule-store.md):
//
//	<dir>/<app>/rules.yaml        the rules in force, a rule file
//	<dir>/<app>/version           the version in force, a decimal number
//	<dir>/<app>/versions/<n>.json each kept version: doc, author, comment, at, rollbackOf
//	<dir>/<app>/reports.json      the instances' unexpired reports
//	<dir>/audit.jsonl             the audit log, one JSON entry a line
//	<dir>/audit.jsonl.1           the previous audit file, after rotation
//
// Every file is written whole to a temporary file, synced and renamed over
// the old one. A save writes the version's file, then the version file
// (the commit point: Current reads it), then rules.yaml; a save cut short
// before the commit leaves the previous version in force, and Open puts
// rules.yaml back in line with the version file after a crash between the
// last two. One process writes a directory: saves are serialized by a
// mutex of the Store, not by a lock other processes would see. Readers in
// other processes (a dashboard, an engine watching rules.yaml) are safe.
package filestore

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/clock"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/linediff"
	"github.com/sluice-go/sluice/rules"
)

// Defaults of the Config fields.
const (
	// DefaultHistory is the number of versions kept per application.
	DefaultHistory = 100
	// DefaultAuditBytes is the size at which the audit file is rotated:
	// the log keeps between one and two times as much.
	DefaultAuditBytes = 4 << 20
	// DefaultPollInterval is the time between two reads of the version
	// file by Watch.
	DefaultPollInterval = time.Second
)

// Bounds on what one call may store.
const (
	maxName    = 128      // app names
	maxField   = 256      // author, user, action, instance
	maxComment = 4 << 10  // a version's comment
	maxText    = 64 << 10 // audit detail, report error: cut beyond
)

// Config configures a Store, as sluiceredis.RuleStoreConfig and
// sqlstore.Config configure the other rule stores. The zero Config is the
// defaults.
type Config struct {
	// History is the number of versions kept per application (the version
	// in force included); zero or less means DefaultHistory.
	History int
	// AuditBytes is the size in bytes beyond which the audit file is
	// rotated (the previous one is kept as audit.jsonl.1, the one before
	// deleted); zero or less means DefaultAuditBytes.
	AuditBytes int64
	// PollInterval is the time between two reads of the version file by
	// Watch; zero or less means DefaultPollInterval.
	PollInterval time.Duration
	// Clock times Watch's polls (tests pass a *sluicetest.ManualClock);
	// nil means the system clock.
	Clock core.Clock
	// Now dates versions, reports and audit entries; nil means time.Now.
	Now func() time.Time
	// Limits bounds the documents Save accepts (the zero value: the
	// defaults of rules.DecodeLimits).
	Limits rules.DecodeLimits
}

// Store is a cluster.RuleStore in a directory. It is safe for concurrent
// use by one process. Make it with Open.
type Store struct {
	dir        string
	history    int
	auditBytes int64
	poll       time.Duration
	clock      core.Clock
	limits     rules.DecodeLimits
	now        func() time.Time

	mu sync.Mutex // serializes writes
	// step, in tests, is called before each step of a save and fails it
	// when it returns an error.
	step func(name string) error
}

var _ cluster.RuleStore = (*Store)(nil)

// Open returns a Store on dir, creating dir if needed, and repairs each
// application's rules.yaml whose content is not the version in force (a
// crash between a save's commit and its last step).
func Open(dir string, cfg Config) (*Store, error) {
	s := &Store{dir: dir, history: cfg.History, auditBytes: cfg.AuditBytes, poll: cfg.PollInterval,
		clock: cfg.Clock, limits: cfg.Limits, now: cfg.Now}
	if s.now == nil {
		s.now = time.Now
	}
	if s.history <= 0 {
		s.history = DefaultHistory
	}
	if s.auditBytes <= 0 {
		s.auditBytes = DefaultAuditBytes
	}
	if s.poll <= 0 {
		s.poll = DefaultPollInterval
	}
	if s.clock == nil {
		s.clock = clock.System()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	apps, err := s.Apps(context.Background())
	if err != nil {
		return nil, err
	}
	for _, app := range apps {
		v, err := s.Current(context.Background(), app)
		if err != nil || v.Version == 0 {
			continue
		}
		path := s.RuleFile(app)
		if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, v.Doc) {
			if err := writeFile(path, v.Doc); err != nil {
				return nil, fmt.Errorf("filestore: repair %s: %w", path, err)
			}
		}
	}
	return s, nil
}

// checkApp refuses application names that are not plain file names.
func checkApp(app string) error {
	if app == "" || len(app) > maxName || app[0] == '.' {
		return fmt.Errorf("filestore: app %q: want 1 to %d characters of [A-Za-z0-9._-], not starting with '.'", clip(app), maxName)
	}
	for i := 0; i < len(app); i++ {
		c := app[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("filestore: app %q: want 1 to %d characters of [A-Za-z0-9._-], not starting with '.'", clip(app), maxName)
		}
	}
	return nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…(cut)"
}

// RuleFile returns the path of app's rule file, which holds the rules in
// force (for fleet.RuleFile).
func (s *Store) RuleFile(app string) string { return filepath.Join(s.dir, app, "rules.yaml") }

func (s *Store) appDir(app string) string      { return filepath.Join(s.dir, app) }
func (s *Store) versionFile(app string) string { return filepath.Join(s.dir, app, "version") }
func (s *Store) versionPath(app string, n int64) string {
	return filepath.Join(s.dir, app, "versions", strconv.FormatInt(n, 10)+".json")
}

// writeFile writes data to path atomically: a temporary file in the same
// directory, synced, renamed over path, and the directory synced.
func writeFile(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	return nil
}

// Apps returns the applications that have a version in force, sorted.
func (s *Store) Apps(ctx context.Context) ([]string, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("filestore: apps: %w", err)
	}
	var apps []string
	for _, e := range ents {
		if !e.IsDir() || checkApp(e.Name()) != nil {
			continue
		}
		if _, err := os.Stat(s.versionFile(e.Name())); err == nil {
			apps = append(apps, e.Name())
		}
	}
	return apps, nil
}

// current reads app's version file; 0 when there is none.
func (s *Store) current(app string) (int64, error) {
	b, err := os.ReadFile(s.versionFile(app))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("filestore: %w", err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("filestore: %s: not a version: %q", s.versionFile(app), clip(string(b)))
	}
	return n, nil
}

// versionJSON is a version's file.
type versionJSON struct {
	Version    int64     `json:"version"`
	Doc        string    `json:"doc"`
	Author     string    `json:"author"`
	Comment    string    `json:"comment,omitempty"`
	At         time.Time `json:"at"`
	RollbackOf int64     `json:"rollbackOf,omitempty"`
}

// Current returns the version of app's rules in force (the version file's).
func (s *Store) Current(ctx context.Context, app string) (cluster.RuleVersion, error) {
	if err := checkApp(app); err != nil {
		return cluster.RuleVersion{}, err
	}
	n, err := s.current(app)
	if err != nil || n == 0 {
		return cluster.RuleVersion{}, err
	}
	return s.Version(ctx, app, n)
}

// Version returns version n of app's rules, or cluster.ErrNoVersion.
func (s *Store) Version(_ context.Context, app string, n int64) (cluster.RuleVersion, error) {
	if err := checkApp(app); err != nil {
		return cluster.RuleVersion{}, err
	}
	if n < 1 {
		return cluster.RuleVersion{}, cluster.ErrNoVersion
	}
	b, err := os.ReadFile(s.versionPath(app, n))
	if errors.Is(err, os.ErrNotExist) {
		return cluster.RuleVersion{}, cluster.ErrNoVersion
	}
	if err != nil {
		return cluster.RuleVersion{}, fmt.Errorf("filestore: %w", err)
	}
	var v versionJSON
	if err := json.Unmarshal(b, &v); err != nil || v.Version != n {
		return cluster.RuleVersion{}, fmt.Errorf("filestore: %s: malformed version file", s.versionPath(app, n))
	}
	return cluster.RuleVersion{Version: n, Doc: []byte(v.Doc), Author: v.Author, Comment: v.Comment, At: v.At, RollbackOf: v.RollbackOf}, nil
}

// History returns up to limit kept versions of app's rules, newest first.
func (s *Store) History(ctx context.Context, app string, limit int) ([]cluster.RuleVersion, error) {
	if err := checkApp(app); err != nil {
		return nil, err
	}
	n, err := s.current(app)
	if err != nil {
		return nil, err
	}
	var out []cluster.RuleVersion
	for v := n; v >= 1 && len(out) < limit && v > n-int64(s.history); v-- {
		rv, err := s.Version(ctx, app, v)
		if errors.Is(err, cluster.ErrNoVersion) {
			break
		}
		if err != nil {
			return nil, err
		}
		out = append(out, rv)
	}
	return out, nil
}

// Save validates v.Doc, and if base is the version in force writes it as
// version base+1: its version file, then the version file (the commit),
// then rules.yaml, each atomically; then it deletes the versions beyond
// the history and appends a "save" (or "rollback") audit entry with the
// line diff. It returns cluster.ErrConflict, writing nothing, when base is
// not the version in force. Notification is by polling: see Watch.
//
// complexity: the save's steps (conflict check, version file, rules.yaml, history trim, audit entry), each failing on its own
func (s *Store) Save(ctx context.Context, app string, base int64, v cluster.RuleVersion) (cluster.RuleVersion, error) {
	if err := checkApp(app); err != nil {
		return cluster.RuleVersion{}, err
	}
	switch {
	case v.Author == "" || len(v.Author) > maxField:
		return cluster.RuleVersion{}, fmt.Errorf("filestore: save %s: author of %d bytes, want 1 to %d", app, len(v.Author), maxField)
	case len(v.Comment) > maxComment:
		return cluster.RuleVersion{}, fmt.Errorf("filestore: save %s: comment of %d bytes, more than %d", app, len(v.Comment), maxComment)
	case base < 0 || v.RollbackOf < 0:
		return cluster.RuleVersion{}, errors.New("filestore: negative version")
	}
	if _, err := s.limits.Decode(v.Doc, rules.YAML); err != nil {
		return cluster.RuleVersion{}, fmt.Errorf("filestore: save %s: %w: %w", app, cluster.ErrInvalidRules, err)
	}
	if err := ctx.Err(); err != nil {
		return cluster.RuleVersion{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, err := s.current(app)
	if err != nil {
		return cluster.RuleVersion{}, err
	}
	if cur != base {
		return cluster.RuleVersion{}, cluster.ErrConflict
	}
	var old []byte
	if base > 0 {
		prev, err := s.Version(ctx, app, base)
		if err != nil {
			return cluster.RuleVersion{}, err
		}
		old = prev.Doc
	}
	v.Version, v.At = base+1, s.now()
	b, err := json.Marshal(versionJSON{Version: v.Version, Doc: string(v.Doc), Author: v.Author, Comment: v.Comment, At: v.At, RollbackOf: v.RollbackOf})
	if err != nil {
		return cluster.RuleVersion{}, err
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"mkdir", func() error { return os.MkdirAll(filepath.Join(s.appDir(app), "versions"), 0o755) }},
		{"version", func() error { return writeFile(s.versionPath(app, v.Version), b) }},
		{"commit", func() error { return writeFile(s.versionFile(app), []byte(strconv.FormatInt(v.Version, 10)+"\n")) }},
		{"rules", func() error { return writeFile(s.RuleFile(app), v.Doc) }},
	}
	for _, st := range steps {
		if s.step != nil {
			if err := s.step(st.name); err != nil {
				return cluster.RuleVersion{}, fmt.Errorf("filestore: save %s: %s: %w", app, st.name, err)
			}
		}
		if err := st.do(); err != nil {
			return cluster.RuleVersion{}, fmt.Errorf("filestore: save %s: %s: %w", app, st.name, err)
		}
	}
	// Committed: what follows cannot undo the save.
	if gone := v.Version - int64(s.history); gone >= 1 {
		for n := gone; n >= 1; n-- {
			if err := os.Remove(s.versionPath(app, n)); errors.Is(err, os.ErrNotExist) {
				break
			}
		}
	}
	action := "save"
	if v.RollbackOf != 0 {
		action = "rollback"
	}
	_ = s.audit(cluster.AuditEntry{User: v.Author, App: app, Action: action, Version: v.Version, Detail: linediff.Lines(old, v.Doc)})
	return v, nil
}

// Watch reads app's version file every poll interval (Config.PollInterval,
// on Config.Clock) and calls changed with each new version, until
// ctx ends; it returns ctx's error. It calls changed(0) once it has read
// the version in force it compares with.
func (s *Store) Watch(ctx context.Context, app string, changed func(version int64)) error {
	if err := checkApp(app); err != nil {
		return err
	}
	last, _ := s.current(app)
	changed(0) // listening: see cluster.RuleStore's Watch
	for {
		t := s.clock.NewTimer(s.poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C():
		}
		n, err := s.current(app)
		if err == nil && n != last {
			last = n
			changed(n)
		}
	}
}

// reportJSON is a report in reports.json.
type reportJSON struct {
	cluster.RuleReport
	Expires time.Time `json:"expires"`
}

// Report records r (dated by the store) for ttl in app's reports.json,
// replacing the instance's previous report and dropping expired ones.
func (s *Store) Report(_ context.Context, app string, r cluster.RuleReport, ttl time.Duration) error {
	if err := checkApp(app); err != nil {
		return err
	}
	if r.Instance == "" || len(r.Instance) > maxField || ttl <= 0 {
		return fmt.Errorf("filestore: report %s: instance of %d bytes (want 1 to %d) or ttl %v not positive", app, len(r.Instance), maxField, ttl)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	reps := s.reports(app, now)
	r.At, r.Err = now, cut(r.Err, maxText)
	reps = slices.DeleteFunc(reps, func(x reportJSON) bool { return x.Instance == r.Instance })
	reps = append(reps, reportJSON{RuleReport: r, Expires: now.Add(ttl)})
	b, err := json.Marshal(reps)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.appDir(app), 0o755); err != nil {
		return fmt.Errorf("filestore: %w", err)
	}
	if err := writeFile(filepath.Join(s.appDir(app), "reports.json"), b); err != nil {
		return fmt.Errorf("filestore: report %s: %w", app, err)
	}
	return nil
}

// reports reads app's unexpired reports at now.
func (s *Store) reports(app string, now time.Time) []reportJSON {
	b, err := os.ReadFile(filepath.Join(s.appDir(app), "reports.json"))
	if err != nil {
		return nil
	}
	var reps []reportJSON
	if json.Unmarshal(b, &reps) != nil {
		return nil
	}
	return slices.DeleteFunc(reps, func(r reportJSON) bool { return !now.Before(r.Expires) })
}

// Reports returns the unexpired reports of app's instances, by instance.
func (s *Store) Reports(_ context.Context, app string) ([]cluster.RuleReport, error) {
	if err := checkApp(app); err != nil {
		return nil, err
	}
	out := []cluster.RuleReport{}
	for _, r := range s.reports(app, s.now()) {
		out = append(out, r.RuleReport)
	}
	slices.SortFunc(out, func(a, b cluster.RuleReport) int { return strings.Compare(a.Instance, b.Instance) })
	return out, nil
}

func (s *Store) auditPath() string { return filepath.Join(s.dir, "audit.jsonl") }

// Audit appends e (dated by the store) to the audit file, rotating it
// first when it has grown beyond the configured size.
func (s *Store) Audit(_ context.Context, e cluster.AuditEntry) error {
	if e.Action == "" || len(e.Action) > maxField || len(e.User) > maxField || len(e.App) > maxName {
		return fmt.Errorf("filestore: audit: action of %d bytes (want 1 to %d), or user or app too long", len(e.Action), maxField)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.audit(e)
}

// audit appends e; the caller holds s.mu.
func (s *Store) audit(e cluster.AuditEntry) error {
	e.At, e.Detail = s.now(), cut(e.Detail, maxText)
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	path := s.auditPath()
	if fi, err := os.Stat(path); err == nil && fi.Size()+int64(len(b))+1 > s.auditBytes {
		if err := os.Rename(path, path+".1"); err != nil {
			return fmt.Errorf("filestore: audit: rotate: %w", err)
		}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("filestore: audit: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("filestore: audit: %w", err)
	}
	return nil
}

// AuditLog returns up to limit entries of app ("" for all), newest first,
// from the audit file and the previous one.
func (s *Store) AuditLog(_ context.Context, app string, limit int) ([]cluster.AuditEntry, error) {
	if limit <= 0 {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []cluster.AuditEntry
	for _, path := range []string{s.auditPath() + ".1", s.auditPath()} {
		f, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("filestore: audit log: %w", err)
		}
		err = readLines(f, func(line []byte) {
			var e cluster.AuditEntry
			if json.Unmarshal(line, &e) == nil && (app == "" || e.App == app) {
				out = append(out, e)
			}
		})
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("filestore: audit log: %w", err)
		}
	}
	slices.Reverse(out)
	slices.SortStableFunc(out, func(a, b cluster.AuditEntry) int { return cmp.Compare(b.At.UnixNano(), a.At.UnixNano()) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// readLines calls f with each line of r; a line beyond a megabyte (the
// store writes none) is an error.
func readLines(r io.Reader, f func([]byte)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f(sc.Bytes())
	}
	return sc.Err()
}

// Retire deletes app's rules: its directory (the version in force,
// rules.yaml, the history and the instances' reports), so that Apps no
// longer lists it. The directory is first renamed to a hidden name, so a
// retirement cut short leaves either the application whole or nothing
// that Apps lists. The audit file keeps app's entries, and an entry of
// action "retire" by user, naming the version that was in force and
// holding its rules, is appended. Engines that follow app keep the rules
// they run.
func (s *Store) Retire(ctx context.Context, app, user string) error {
	if err := checkApp(app); err != nil {
		return err
	}
	if user == "" || len(user) > maxField {
		return fmt.Errorf("filestore: retire %s: user of %d bytes, want 1 to %d", app, len(user), maxField)
	}
	cur, err := s.Current(ctx, app)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var b [4]byte
	_, _ = rand.Read(b[:])
	gone := filepath.Join(s.dir, ".retired-"+app+"-"+hex.EncodeToString(b[:]))
	if err := os.Rename(s.appDir(app), gone); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("filestore: retire %s: %w", app, err)
	}
	if err := syncDir(s.dir); err != nil {
		return fmt.Errorf("filestore: retire %s: %w", app, err)
	}
	if err := os.RemoveAll(gone); err != nil {
		return fmt.Errorf("filestore: retire %s: %w", app, err)
	}
	detail := "retired; it had no version in force"
	if cur.Version != 0 {
		detail = "retired; version " + strconv.FormatInt(cur.Version, 10) + " was in force:\n" + string(cur.Doc)
	}
	return s.audit(cluster.AuditEntry{User: user, App: app, Action: "retire", Version: cur.Version, Detail: detail})
}
