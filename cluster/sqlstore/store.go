package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/sqlstore/internal/linediff"
	"github.com/sluice-go/sluice/rules"
)

// Defaults of Config.
const (
	// DefaultHistory is the number of versions of each application's rules
	// kept when Config.History is zero.
	DefaultHistory = 100
	// DefaultAuditLen is the number of audit entries kept per application
	// (and for entries of no application) when Config.AuditLen is zero.
	DefaultAuditLen = 10000
	// DefaultTimeout bounds a dial when Config.DialTimeout is zero.
	DefaultTimeout = 5 * time.Second
)

// Bounds on what one call may store, as the Redis store's: longer names and
// comments are refused, longer texts cut.
const (
	maxName    = 256
	maxComment = 4 << 10
	maxText    = 64 << 10
)

// Config configures a Store. The zero value is usable.
type Config struct {
	// History is the number of versions kept per application (the version
	// in force included); older ones are deleted as new ones are saved.
	// Zero or less means DefaultHistory.
	History int
	// AuditLen is the number of audit entries kept per application (and
	// for entries of no application). Zero or less means DefaultAuditLen.
	AuditLen int
	// Limits bounds the documents Save accepts (the zero value: the
	// defaults of rules.DecodeLimits).
	Limits rules.DecodeLimits
	// DialTimeout bounds each connection attempt (and, for MySQL, each
	// read and write of a statement is bounded by the caller's context).
	// Zero means DefaultTimeout.
	DialTimeout time.Duration
	// PollInterval is how often a Watch reads the version in force: on
	// MySQL the only way it learns of a save; on PostgreSQL a catch-up
	// beside the notifications (for those lost while the notification
	// connection was down, also read at once when it is back). Zero means
	// 200 ms on MySQL, 2 s on PostgreSQL.
	PollInterval time.Duration
	// AllowDestructive lets Open apply a schema migration that drops or
	// rewrites data (none exists in schema version 1). Without it Open
	// refuses such a migration, saying which, before changing anything.
	AllowDestructive bool
	// OnWatchError, when set, is told when a Watch loses its connection
	// (the PostgreSQL notification connection, or a poll that failed) and
	// when it has it back (with a nil error). A Watch goes on through
	// such losses; the engine keeps the rules in force meanwhile.
	OnWatchError func(app string, err error)
}

// Store is the SQL implementation of cluster.RuleStore, on PostgreSQL or
// MySQL/MariaDB: versioned rule documents per application, their history
// with author, time and comment, the per-resource metadata of the rules in
// force (Buckets), the instances' reports and an audit log. Each Save is
// one transaction. It is safe for concurrent use. Build it with Open.
type Store struct {
	db       *sql.DB
	d        dialect
	history  int
	auditLen int
	limits   rules.DecodeLimits
	poll     time.Duration
	timeout  time.Duration
	onWatch  func(string, error)
	// testAfterVersion, when set, runs inside a Save's transaction after
	// the version row is written and before the version in force moves.
	testAfterVersion func(ctx context.Context, tx *sql.Tx)
}

var _ cluster.RuleStore = (*Store)(nil)

// Open connects to the database at rawURL (postgres://, postgresql:// or
// mysql://user:password@host:port/database), checks it answers within
// cfg.DialTimeout, creates or migrates the store's tables (named
// sluice_*), and returns the Store. Close closes it.
//
// A user that may only read and write the store's tables opens a database
// whose schema is current; creating or migrating the schema needs the
// right to create tables (and, on PostgreSQL, functions and triggers).
func Open(ctx context.Context, rawURL string, cfg Config) (*Store, error) {
	timeout := cfg.DialTimeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	db, d, err := open(rawURL, timeout)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, d: d, history: cfg.History, auditLen: cfg.AuditLen, limits: cfg.Limits, poll: cfg.PollInterval, timeout: timeout, onWatch: cfg.OnWatchError}
	if s.history <= 0 {
		s.history = DefaultHistory
	}
	if s.auditLen <= 0 {
		s.auditLen = DefaultAuditLen
	}
	if s.poll <= 0 {
		s.poll = 200 * time.Millisecond
		if d.name == "postgres" {
			s.poll = 2 * time.Second
		}
	}
	db.SetMaxIdleConns(4)
	db.SetConnMaxIdleTime(5 * time.Minute)
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlstore: connecting to %s: %w", Redact(rawURL), redactErr(ctxErr(pctx, err), rawURL))
	}
	if err := migrate(ctx, db, &s.d, cfg.AllowDestructive); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the store's connections. End the store's watches first
// (a Watch of a closed store fails each poll until its context ends).
func (s *Store) Close() error { return s.db.Close() }

// Dialect returns "postgres" or "mysql".
func (s *Store) Dialect() string { return s.d.name }

func checkName(what, v string) error {
	switch {
	case v == "":
		return fmt.Errorf("sqlstore: empty %s", what)
	case len(v) > maxName:
		return fmt.Errorf("sqlstore: %s of %d bytes, more than %d", what, len(v), maxName)
	}
	return nil
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…(cut)"
}

// wrap names the call and app of err, says when the database refused a
// write for lack of privilege, and prefers ctx's error to the driver's.
func wrap(ctx context.Context, what, app string, err error) error {
	if isReadOnly(err) {
		return fmt.Errorf("sqlstore: %s %q: the database refused the write (a read-only user or server?): %w", what, app, err)
	}
	return fmt.Errorf("sqlstore: %s %q: %w", what, app, ctxErr(ctx, err))
}

// Apps returns the applications with a version of rules, sorted.
func (s *Store) Apps(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT app FROM sluice_rule_apps WHERE version > 0 ORDER BY app")
	if err != nil {
		return nil, wrap(ctx, "apps", "", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			return nil, wrap(ctx, "apps", "", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(ctx, "apps", "", err)
	}
	return out, nil
}

const versionCols = "version, doc, author, comment, at_us, rollback_of"

func scanVersion(sc interface{ Scan(...any) error }) (cluster.RuleVersion, error) {
	var v cluster.RuleVersion
	var at int64
	if err := sc.Scan(&v.Version, &v.Doc, &v.Author, &v.Comment, &at, &v.RollbackOf); err != nil {
		return v, err
	}
	if v.Doc == nil {
		v.Doc = []byte{}
	}
	v.At = time.UnixMicro(at)
	return v, nil
}

// Current returns the version of app's rules in force, in one query.
func (s *Store) Current(ctx context.Context, app string) (cluster.RuleVersion, error) {
	if err := checkName("app", app); err != nil {
		return cluster.RuleVersion{}, err
	}
	row := s.db.QueryRowContext(ctx, s.d.q("SELECT v.version, v.doc, v.author, v.comment, v.at_us, v.rollback_of FROM sluice_rule_apps a "+
		"JOIN sluice_rule_versions v ON v.app = a.app AND v.version = a.version WHERE a.app = ?"), app)
	v, err := scanVersion(row)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return cluster.RuleVersion{}, nil
	case err != nil:
		return cluster.RuleVersion{}, wrap(ctx, "current", app, err)
	}
	return v, nil
}

// currentVersion returns the number of app's version in force, 0 when none.
func (s *Store) currentVersion(ctx context.Context, app string) (int64, error) {
	var n int64
	err := s.db.QueryRowContext(ctx, s.d.q("SELECT version FROM sluice_rule_apps WHERE app = ?"), app).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return n, err
}

// Version returns version n of app's rules, or cluster.ErrNoVersion.
func (s *Store) Version(ctx context.Context, app string, n int64) (cluster.RuleVersion, error) {
	if err := checkName("app", app); err != nil {
		return cluster.RuleVersion{}, err
	}
	if n < 1 {
		return cluster.RuleVersion{}, cluster.ErrNoVersion
	}
	v, err := scanVersion(s.db.QueryRowContext(ctx, s.d.q("SELECT "+versionCols+" FROM sluice_rule_versions WHERE app = ? AND version = ?"), app, n))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return cluster.RuleVersion{}, cluster.ErrNoVersion
	case err != nil:
		return cluster.RuleVersion{}, wrap(ctx, fmt.Sprintf("version %d of", n), app, err)
	}
	return v, nil
}

// History returns up to limit versions of app's rules, newest first, in
// one query. The store keeps Config.History versions.
func (s *Store) History(ctx context.Context, app string, limit int) ([]cluster.RuleVersion, error) {
	if err := checkName("app", app); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	limit = min(limit, s.history)
	rows, err := s.db.QueryContext(ctx, s.d.q("SELECT "+versionCols+" FROM sluice_rule_versions WHERE app = ? ORDER BY version DESC LIMIT ?"), app, limit)
	if err != nil {
		return nil, wrap(ctx, "history of", app, err)
	}
	defer rows.Close()
	var out []cluster.RuleVersion
	for rows.Next() {
		v, err := scanVersion(rows)
		if err != nil {
			return nil, wrap(ctx, "history of", app, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(ctx, "history of", app, err)
	}
	return out, nil
}

// Save validates v.Doc as a rule document (YAML or JSON) within the
// configured limits, before anything is written, and writes it as version
// base+1 of app's rules if base is the version in force, returning
// cluster.ErrConflict otherwise. The write is one transaction: it locks
// app's row, checks base, writes the version, puts it in force, deletes
// versions beyond Config.History, updates the per-resource metadata
// (Buckets), and appends a "save" audit entry (Action "rollback" when
// v.RollbackOf is set; User v.Author; Detail the line diff from version
// base), on the database's clock. On PostgreSQL a trigger notifies the
// watchers when it commits. A save cut short (connection lost, ctx ended,
// server stopped) has happened whole or not at all.
//
// Author is required; Author and app are at most 256 bytes, Comment at most
// 4 KiB.
func (s *Store) Save(ctx context.Context, app string, base int64, v cluster.RuleVersion) (cluster.RuleVersion, error) {
	if err := checkName("app", app); err != nil {
		return cluster.RuleVersion{}, err
	}
	if err := checkName("author", v.Author); err != nil {
		return cluster.RuleVersion{}, err
	}
	switch {
	case len(v.Comment) > maxComment:
		return cluster.RuleVersion{}, fmt.Errorf("sqlstore: comment of %d bytes, more than %d", len(v.Comment), maxComment)
	case base < 0 || v.RollbackOf < 0:
		return cluster.RuleVersion{}, errors.New("sqlstore: negative version")
	}
	set, err := s.limits.Decode(v.Doc, rules.YAML)
	if err != nil {
		return cluster.RuleVersion{}, fmt.Errorf("sqlstore: save %q: %w: %w", app, cluster.ErrInvalidRules, err)
	}
	newRes, err := resources(set)
	if err != nil {
		return cluster.RuleVersion{}, err
	}
	// A deadlock between two saves of a new application (each holding the
	// row's shared lock, each wanting it whole) rolls one back: it tries
	// again, and then finds the other's version (ErrConflict).
	for try := 1; ; try++ {
		out, err := s.saveOnce(ctx, app, base, v, newRes)
		switch {
		case err == nil, errors.Is(err, cluster.ErrConflict):
			return out, err
		case try < 4 && isRetryable(err) && ctx.Err() == nil:
			continue
		}
		return cluster.RuleVersion{}, wrap(ctx, "save", app, err)
	}
}

// saveOnce runs Save's transaction once.
func (s *Store) saveOnce(ctx context.Context, app string, base int64, v cluster.RuleVersion, newRes map[string]resource) (cluster.RuleVersion, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return cluster.RuleVersion{}, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	out, err := s.saveTx(ctx, tx, app, base, v, newRes)
	if err != nil {
		return cluster.RuleVersion{}, err
	}
	if err := tx.Commit(); err != nil {
		return cluster.RuleVersion{}, err
	}
	return out, nil
}

// saveTx is Save's transaction, up to its commit.
//
// complexity: the steps of one save, each checked, in the order the transaction needs them
func (s *Store) saveTx(ctx context.Context, tx *sql.Tx, app string, base int64, v cluster.RuleVersion, newRes map[string]resource) (cluster.RuleVersion, error) {
	var now int64
	if err := tx.QueryRowContext(ctx, "SELECT "+s.d.nowUS).Scan(&now); err != nil {
		return v, err
	}
	if base == 0 {
		if _, err := tx.ExecContext(ctx, s.d.q(s.d.ignoreApp), app, v.Author, now); err != nil {
			return v, err
		}
	}
	var cur int64
	err := tx.QueryRowContext(ctx, s.d.q("SELECT version FROM sluice_rule_apps WHERE app = ? FOR UPDATE"), app).Scan(&cur)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return v, cluster.ErrConflict // base > 0 for an app without rules
	case err != nil:
		return v, err
	case cur != base:
		return v, cluster.ErrConflict
	}
	var old []byte
	if base > 0 {
		if err := tx.QueryRowContext(ctx, s.d.q("SELECT doc FROM sluice_rule_versions WHERE app = ? AND version = ? FOR UPDATE"), app, base).Scan(&old); err != nil {
			return v, fmt.Errorf("reading version %d: %w", base, err)
		}
	}
	v.Version, v.At = base+1, time.UnixMicro(now)
	doc := v.Doc
	if doc == nil {
		doc = []byte{}
	}
	if _, err := tx.ExecContext(ctx, s.d.q("INSERT INTO sluice_rule_versions ("+versionCols+", app) VALUES (?, ?, ?, ?, ?, ?, ?)"),
		v.Version, doc, v.Author, v.Comment, now, v.RollbackOf, app); err != nil {
		return v, err
	}
	if s.testAfterVersion != nil {
		s.testAfterVersion(ctx, tx)
	}
	if _, err := tx.ExecContext(ctx, s.d.q("UPDATE sluice_rule_apps SET version = ?, updated_by = ?, updated_us = ? WHERE app = ?"), v.Version, v.Author, now, app); err != nil {
		return v, err
	}
	if _, err := tx.ExecContext(ctx, s.d.q("DELETE FROM sluice_rule_versions WHERE app = ? AND version <= ?"), app, v.Version-int64(s.history)); err != nil {
		return v, err
	}
	oldRes := map[string]resource{}
	if old != nil {
		if oset, err := s.limits.Decode(old, rules.YAML); err == nil {
			oldRes, _ = resources(oset)
		}
	}
	if err := s.saveBuckets(ctx, tx, app, v, oldRes, newRes); err != nil {
		return v, fmt.Errorf("resource metadata: %w", err)
	}
	action := "save"
	if v.RollbackOf != 0 {
		action = "rollback"
	}
	e := cluster.AuditEntry{User: v.Author, App: app, Action: action, Version: v.Version, Detail: cut(linediff.Lines(old, v.Doc), maxText)}
	if err := s.audit(ctx, tx, e, now); err != nil {
		return v, err
	}
	return v, nil
}

// execer is what audit needs of a *sql.DB or *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// audit appends e, dated now (or the database's clock when now is 0),
// and deletes the entries of its list beyond Config.AuditLen.
func (s *Store) audit(ctx context.Context, x execer, e cluster.AuditEntry, now int64) error {
	at := "?"
	args := []any{now}
	if now == 0 {
		at, args = s.d.nowUS, nil
	}
	args = append(args, e.App, e.User, e.Action, e.Version, e.Detail)
	if _, err := x.ExecContext(ctx, s.d.q("INSERT INTO sluice_audit (at_us, app, usr, action, version, detail) VALUES ("+at+", ?, ?, ?, ?, ?)"), args...); err != nil {
		return err
	}
	var edge int64
	err := x.QueryRowContext(ctx, s.d.q("SELECT id FROM sluice_audit WHERE app = ? ORDER BY id DESC LIMIT 1 OFFSET ?"), e.App, s.auditLen).Scan(&edge)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = x.ExecContext(ctx, s.d.q("DELETE FROM sluice_audit WHERE app = ? AND id <= ?"), e.App, edge)
	return err
}

// Report records r for ttl, replacing the instance's previous report, and
// forgets app's reports that expired. r.At is set by the store, on the
// database's clock; r.Err is cut to 64 KiB.
func (s *Store) Report(ctx context.Context, app string, r cluster.RuleReport, ttl time.Duration) error {
	if err := checkName("app", app); err != nil {
		return err
	}
	if err := checkName("instance", r.Instance); err != nil {
		return err
	}
	if ttl <= 0 {
		return fmt.Errorf("sqlstore: report: ttl %v not positive", ttl)
	}
	var now int64
	if err := s.db.QueryRowContext(ctx, "SELECT "+s.d.nowUS).Scan(&now); err != nil {
		return wrap(ctx, "report", app, err)
	}
	us := int64((ttl + time.Microsecond - 1) / time.Microsecond)
	if _, err := s.db.ExecContext(ctx, s.d.q(s.d.upsertReport), app, r.Instance, r.Version, r.Refused, cut(r.Err, maxText), now, now+us); err != nil {
		return wrap(ctx, "report", app, err)
	}
	if _, err := s.db.ExecContext(ctx, s.d.q("DELETE FROM sluice_rule_reports WHERE app = ? AND expires_us < ?"), app, now); err != nil {
		return wrap(ctx, "report", app, err)
	}
	return nil
}

// Reports returns the unexpired reports of app's instances, by instance.
func (s *Store) Reports(ctx context.Context, app string) ([]cluster.RuleReport, error) {
	if err := checkName("app", app); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, s.d.q("SELECT instance, version, refused, err, at_us FROM sluice_rule_reports WHERE app = ? AND expires_us >= "+s.d.nowUS+" ORDER BY instance"), app)
	if err != nil {
		return nil, wrap(ctx, "reports", app, err)
	}
	defer rows.Close()
	var out []cluster.RuleReport
	for rows.Next() {
		var r cluster.RuleReport
		var at int64
		if err := rows.Scan(&r.Instance, &r.Version, &r.Refused, &r.Err, &at); err != nil {
			return nil, wrap(ctx, "reports", app, err)
		}
		r.At = time.UnixMicro(at)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(ctx, "reports", app, err)
	}
	return out, nil
}

// Audit appends e to the audit log, stamped with the database's clock, and
// trims e.App's entries to Config.AuditLen. Action is required; User, App
// and Action are at most 256 bytes; Detail is cut to 64 KiB.
func (s *Store) Audit(ctx context.Context, e cluster.AuditEntry) error {
	if err := checkName("action", e.Action); err != nil {
		return err
	}
	if len(e.User) > maxName || len(e.App) > maxName {
		return fmt.Errorf("sqlstore: audit: user or app longer than %d bytes", maxName)
	}
	e.Detail = cut(e.Detail, maxText)
	if err := s.audit(ctx, s.db, e, 0); err != nil {
		return wrap(ctx, "audit", e.App, err)
	}
	return nil
}

// AuditLog returns up to limit audit entries of app, newest first; for app
// "", those of every application and of none.
func (s *Store) AuditLog(ctx context.Context, app string, limit int) ([]cluster.AuditEntry, error) {
	if limit <= 0 {
		return nil, nil
	}
	limit = min(limit, s.auditLen)
	query, args := "SELECT at_us, app, usr, action, version, detail FROM sluice_audit ORDER BY id DESC LIMIT ?", []any{limit}
	if app != "" {
		if err := checkName("app", app); err != nil {
			return nil, err
		}
		query, args = "SELECT at_us, app, usr, action, version, detail FROM sluice_audit WHERE app = ? ORDER BY id DESC LIMIT ?", []any{app, limit}
	}
	rows, err := s.db.QueryContext(ctx, s.d.q(query), args...)
	if err != nil {
		return nil, wrap(ctx, "audit log", app, err)
	}
	defer rows.Close()
	var out []cluster.AuditEntry
	for rows.Next() {
		var e cluster.AuditEntry
		var at int64
		if err := rows.Scan(&at, &e.App, &e.User, &e.Action, &e.Version, &e.Detail); err != nil {
			return nil, wrap(ctx, "audit log", app, err)
		}
		e.At = time.UnixMicro(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(ctx, "audit log", app, err)
	}
	return out, nil
}
