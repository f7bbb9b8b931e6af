package sluiceredis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/redis/internal/linediff"
	"github.com/sluice-go/sluice/rules"
)

// Defaults of RuleStoreConfig.
const (
	// DefaultRuleHistory is the number of versions of each application's
	// rules a RuleStore keeps when RuleStoreConfig.History is zero.
	DefaultRuleHistory = 100
	// DefaultAuditLen is the number of entries each audit list keeps when
	// RuleStoreConfig.AuditLen is zero.
	DefaultAuditLen = 10000
)

// Bounds on what one call may store, so that memory stays bounded whatever
// clients send. Longer values are refused (names) or cut (texts).
const (
	maxName    = 256      // app, instance, author, user, action: refused beyond
	maxComment = 4 << 10  // a version's comment: refused beyond
	maxText    = 64 << 10 // an audit entry's detail, a report's error: cut beyond
)

// RuleStoreConfig configures a RuleStore. The zero value is usable.
type RuleStoreConfig struct {
	// Prefix starts every key the RuleStore writes; empty means
	// DefaultPrefix. Braces and '%' are escaped, as WithPrefix does.
	Prefix string
	// History is the number of versions kept per application (the version
	// in force included); older ones are deleted as new ones are saved.
	// Zero or less means DefaultRuleHistory.
	History int
	// AuditLen is the number of entries kept in each audit list (one per
	// application, one for entries of no application); the oldest go
	// first. Zero or less means DefaultAuditLen.
	AuditLen int
	// Limits bounds the documents Save accepts (the zero value: the
	// defaults of rules.DecodeLimits).
	Limits rules.DecodeLimits
}

// RuleStore is the Redis implementation of cluster.RuleStore: versioned rule
// documents per application, their history, the instances' reports, an
// audit log, and a pub/sub channel per application that tells instances of
// new versions. The keys of one application share one hash tag, so each
// save is one Lua script on one Redis Cluster slot, atomic. It is safe for
// concurrent use. Build it with NewRuleStore.
type RuleStore struct {
	c        redis.UniversalClient
	prefix   string
	history  int
	auditLen int
	limits   rules.DecodeLimits
}

var _ cluster.RuleStore = (*RuleStore)(nil)

// NewRuleStore returns a RuleStore keeping its data in the Redis that client
// reaches (a *redis.Client or a *redis.ClusterClient). It does not contact
// Redis. Unlike a Store, a RuleStore is not on any decision path: the client
// may retry (a Save that ran but whose reply was lost is refused on retry
// with ErrConflict, never written twice). Closing client is the caller's
// business.
func NewRuleStore(client redis.UniversalClient, cfg RuleStoreConfig) *RuleStore {
	s := &RuleStore{c: client, prefix: DefaultPrefix, history: cfg.History, auditLen: cfg.AuditLen, limits: cfg.Limits}
	if cfg.Prefix != "" {
		s.prefix = escapeTag(cfg.Prefix)
	}
	if s.history <= 0 {
		s.history = DefaultRuleHistory
	}
	if s.auditLen <= 0 {
		s.auditLen = DefaultAuditLen
	}
	return s
}

// ruleKeys are the keys of one application's rules.
type ruleKeys struct {
	cur, hist, audit, rep, repd, vstem, channel string
}

func (s *RuleStore) keys(app string) ruleKeys {
	b := s.prefix + ":rules:{" + escapeTag(app) + "}"
	return ruleKeys{
		cur: b + ":cur", hist: b + ":hist", audit: b + ":audit",
		rep: b + ":rep", repd: b + ":repd", vstem: b + ":v:", channel: b + ":changed",
	}
}

func (s *RuleStore) appsKey() string  { return s.prefix + ":rules:apps" }
func (s *RuleStore) auditKey() string { return s.prefix + ":audit" }

func checkName(what, v string) error {
	switch {
	case v == "":
		return fmt.Errorf("sluiceredis: empty %s", what)
	case len(v) > maxName:
		return fmt.Errorf("sluiceredis: %s of %d bytes, more than %d", what, len(v), maxName)
	}
	return nil
}

// cut returns s cut to at most n bytes, marked when it was cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…(cut)"
}

// Apps returns the applications that have rules in the store, sorted. An
// application is listed from its first Save (also when that Save failed
// after reaching Redis: Current then says version 0).
func (s *RuleStore) Apps(ctx context.Context) ([]string, error) {
	apps, err := s.c.SMembers(ctx, s.appsKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("sluiceredis: apps: %w", err)
	}
	slices.Sort(apps)
	return apps, nil
}

// Current returns the version of app's rules in force, in one round trip.
func (s *RuleStore) Current(ctx context.Context, app string) (cluster.RuleVersion, error) {
	if err := checkName("app", app); err != nil {
		return cluster.RuleVersion{}, err
	}
	k := s.keys(app)
	vals, err := currentScript.Run(ctx, s.c, []string{k.cur}, k.vstem).StringSlice()
	if err != nil {
		return cluster.RuleVersion{}, fmt.Errorf("sluiceredis: current %q: %w", app, err)
	}
	if len(vals) == 0 {
		return cluster.RuleVersion{}, nil
	}
	return parseVersion(vals)
}

// Version returns version n of app's rules, or cluster.ErrNoVersion.
func (s *RuleStore) Version(ctx context.Context, app string, n int64) (cluster.RuleVersion, error) {
	if err := checkName("app", app); err != nil {
		return cluster.RuleVersion{}, err
	}
	if n < 1 {
		return cluster.RuleVersion{}, cluster.ErrNoVersion
	}
	vals, err := s.c.HMGet(ctx, s.keys(app).vstem+strconv.FormatInt(n, 10), versionFields...).Result()
	if err != nil {
		return cluster.RuleVersion{}, fmt.Errorf("sluiceredis: version %d of %q: %w", n, app, err)
	}
	if vals[0] == nil {
		return cluster.RuleVersion{}, cluster.ErrNoVersion
	}
	strs := []string{strconv.FormatInt(n, 10)}
	for _, v := range vals {
		str, _ := v.(string)
		strs = append(strs, str)
	}
	return parseVersion(strs)
}

// History returns up to limit versions of app's rules, newest first, in one
// round trip. The store keeps RuleStoreConfig.History versions.
func (s *RuleStore) History(ctx context.Context, app string, limit int) ([]cluster.RuleVersion, error) {
	if err := checkName("app", app); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	limit = min(limit, s.history)
	k := s.keys(app)
	vals, err := historyScript.Run(ctx, s.c, []string{k.hist}, k.vstem, limit).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("sluiceredis: history of %q: %w", app, err)
	}
	if len(vals)%len(versionReply) != 0 {
		return nil, fmt.Errorf("sluiceredis: history of %q: malformed reply of %d fields", app, len(vals))
	}
	out := make([]cluster.RuleVersion, 0, len(vals)/len(versionReply))
	for i := 0; i < len(vals); i += len(versionReply) {
		v, err := parseVersion(vals[i : i+len(versionReply)])
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// versionFields are the fields of a version's hash, in the order of the
// replies that carry a version (after its number: versionReply).
var (
	versionFields = []string{"doc", "author", "comment", "at", "rb"}
	versionReply  = append([]string{"n"}, versionFields...)
)

func parseVersion(f []string) (cluster.RuleVersion, error) {
	bad := func() (cluster.RuleVersion, error) {
		return cluster.RuleVersion{}, fmt.Errorf("sluiceredis: malformed rule version %q", f[0])
	}
	if len(f) != len(versionReply) {
		return bad()
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return bad()
	}
	at, err1 := strconv.ParseInt(f[4], 10, 64)
	rb, err2 := strconv.ParseInt(f[5], 10, 64)
	if err1 != nil || err2 != nil {
		return bad()
	}
	return cluster.RuleVersion{
		Version: n, Doc: []byte(f[1]), Author: f[2], Comment: f[3],
		At: time.UnixMicro(at), RollbackOf: rb,
	}, nil
}

// Save validates v.Doc as a rule document (YAML or JSON) within the
// configured limits and writes it as version base+1 of app's rules if
// base is the version in force, returning cluster.ErrConflict otherwise.
// The write is one Lua script: it checks base, writes the version, records
// it in the history (deleting versions beyond RuleStoreConfig.History),
// appends a "save" audit entry (Action "rollback" when v.RollbackOf is set;
// User v.Author; Detail the line diff from version base), puts the version
// in force and publishes its number on app's channel, on Redis's clock. A
// save cut short (connection lost, ctx ended, server stopped) has either
// happened whole or not at all: the version in force is never a partial one.
//
// Author is required; Author and app are at most 256 bytes, Comment at most
// 4 KiB.
//
// complexity: checks each field's length, then the transaction's outcomes (conflict, retry, saved), each reported on its own
func (s *RuleStore) Save(ctx context.Context, app string, base int64, v cluster.RuleVersion) (cluster.RuleVersion, error) {
	if err := checkName("app", app); err != nil {
		return cluster.RuleVersion{}, err
	}
	if err := checkName("author", v.Author); err != nil {
		return cluster.RuleVersion{}, err
	}
	switch {
	case len(v.Comment) > maxComment:
		return cluster.RuleVersion{}, fmt.Errorf("sluiceredis: comment of %d bytes, more than %d", len(v.Comment), maxComment)
	case base < 0 || v.RollbackOf < 0:
		return cluster.RuleVersion{}, errors.New("sluiceredis: negative version")
	}
	if _, err := s.limits.Decode(v.Doc, rules.YAML); err != nil {
		return cluster.RuleVersion{}, fmt.Errorf("sluiceredis: save %q: %w: %w", app, cluster.ErrInvalidRules, err)
	}
	var old []byte
	if base > 0 {
		prev, err := s.Version(ctx, app, base)
		switch {
		case errors.Is(err, cluster.ErrNoVersion):
			return cluster.RuleVersion{}, cluster.ErrConflict
		case err != nil:
			return cluster.RuleVersion{}, err
		}
		old = prev.Doc
	}
	action := "save"
	if v.RollbackOf != 0 {
		action = "rollback"
	}
	entry, err := json.Marshal(auditJSON{User: v.Author, App: app, Action: action, Detail: cut(linediff.Lines(old, v.Doc), maxText)})
	if err != nil {
		return cluster.RuleVersion{}, err
	}
	if err := s.c.SAdd(ctx, s.appsKey(), app).Err(); err != nil {
		return cluster.RuleVersion{}, fmt.Errorf("sluiceredis: save %q: %w", app, err)
	}
	k := s.keys(app)
	res, err := saveScript.Run(ctx, s.c, []string{k.cur, k.hist, k.audit},
		base, k.vstem, v.Doc, v.Author, v.Comment, v.RollbackOf, s.history, s.auditLen, entry, k.channel).Int64Slice()
	if err != nil {
		return cluster.RuleVersion{}, fmt.Errorf("sluiceredis: save %q: %w", app, err)
	}
	if len(res) != 3 {
		return cluster.RuleVersion{}, fmt.Errorf("sluiceredis: save %q: malformed reply", app)
	}
	if res[0] == 0 {
		return cluster.RuleVersion{}, cluster.ErrConflict
	}
	v.Version, v.At = res[1], time.UnixMicro(res[2])
	return v, nil
}

// Watch subscribes to app's channel, calls changed(0) once subscribed,
// then changed with each version number published there, on the calling
// goroutine, until ctx ends; it
// returns ctx's error then, or the error of the first subscription. While
// the connection is down (go-redis subscribes again by itself) messages
// are lost: callers poll Current as well.
func (s *RuleStore) Watch(ctx context.Context, app string, changed func(version int64)) error {
	if err := checkName("app", app); err != nil {
		return err
	}
	sub := s.c.Subscribe(ctx, s.keys(app).channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("sluiceredis: watch %q: %w", app, err)
	}
	ch := sub.Channel()
	changed(0) // listening: see cluster.RuleStore's Watch
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m, ok := <-ch:
			if !ok {
				return fmt.Errorf("sluiceredis: watch %q: subscription closed", app)
			}
			if n, err := strconv.ParseInt(m.Payload, 10, 64); err == nil && n > 0 {
				changed(n)
			}
		}
	}
}

type reportJSON struct {
	Instance string `json:"instance"`
	Version  int64  `json:"version"`
	Refused  int64  `json:"refused,omitempty"`
	Err      string `json:"err,omitempty"`
}

// Report records r for ttl (rounded up to the millisecond), replacing the
// instance's previous report, and forgets the reports that expired, in one
// round trip. r.At is set by the store, on Redis's clock; r.Err is cut to
// 64 KiB.
func (s *RuleStore) Report(ctx context.Context, app string, r cluster.RuleReport, ttl time.Duration) error {
	if err := checkName("app", app); err != nil {
		return err
	}
	if err := checkName("instance", r.Instance); err != nil {
		return err
	}
	if ttl <= 0 {
		return fmt.Errorf("sluiceredis: report: ttl %v not positive", ttl)
	}
	b, err := json.Marshal(reportJSON{Instance: r.Instance, Version: r.Version, Refused: r.Refused, Err: cut(r.Err, maxText)})
	if err != nil {
		return err
	}
	k := s.keys(app)
	ms := (ttl + time.Millisecond - 1) / time.Millisecond
	if err := reportScript.Run(ctx, s.c, []string{k.rep, k.repd}, r.Instance, int64(ms), b).Err(); err != nil {
		return fmt.Errorf("sluiceredis: report %q: %w", app, err)
	}
	return nil
}

// Reports returns the unexpired reports of app's instances, by instance.
func (s *RuleStore) Reports(ctx context.Context, app string) ([]cluster.RuleReport, error) {
	if err := checkName("app", app); err != nil {
		return nil, err
	}
	k := s.keys(app)
	vals, err := reportsScript.Run(ctx, s.c, []string{k.rep, k.repd}).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("sluiceredis: reports %q: %w", app, err)
	}
	out := make([]cluster.RuleReport, 0, len(vals))
	for _, v := range vals {
		at, body, ok := strings.Cut(v, " ")
		ms, err := strconv.ParseInt(at, 10, 64)
		var r reportJSON
		if !ok || err != nil || json.Unmarshal([]byte(body), &r) != nil {
			return nil, fmt.Errorf("sluiceredis: reports %q: malformed report %q", app, cut(v, 80))
		}
		out = append(out, cluster.RuleReport{
			Instance: r.Instance, Version: r.Version, Refused: r.Refused, Err: r.Err, At: time.UnixMilli(ms),
		})
	}
	slices.SortFunc(out, func(a, b cluster.RuleReport) int { return strings.Compare(a.Instance, b.Instance) })
	return out, nil
}

// auditJSON is an audit entry as stored, after its time and version.
type auditJSON struct {
	User   string `json:"user,omitempty"`
	App    string `json:"app,omitempty"`
	Action string `json:"action"`
	Detail string `json:"detail,omitempty"`
}

// Audit appends e to the audit list of e.App (or to the list of entries of
// no application), stamped with Redis's time, and trims the list to
// RuleStoreConfig.AuditLen entries, in one round trip. Action is required;
// User, App and Action are at most 256 bytes; Detail is cut to 64 KiB.
func (s *RuleStore) Audit(ctx context.Context, e cluster.AuditEntry) error {
	if err := checkName("action", e.Action); err != nil {
		return err
	}
	if len(e.User) > maxName || len(e.App) > maxName {
		return fmt.Errorf("sluiceredis: audit: user or app longer than %d bytes", maxName)
	}
	b, err := json.Marshal(auditJSON{User: e.User, App: e.App, Action: e.Action, Detail: cut(e.Detail, maxText)})
	if err != nil {
		return err
	}
	key := s.auditKey()
	if e.App != "" {
		key = s.keys(e.App).audit
	}
	if err := auditScript.Run(ctx, s.c, []string{key}, e.Version, b, s.auditLen).Err(); err != nil {
		return fmt.Errorf("sluiceredis: audit: %w", err)
	}
	return nil
}

// AuditLog returns up to limit audit entries of app, newest first; for app
// "", those of every application and of none, merged (one round trip per
// application).
func (s *RuleStore) AuditLog(ctx context.Context, app string, limit int) ([]cluster.AuditEntry, error) {
	if limit <= 0 {
		return nil, nil
	}
	limit = min(limit, s.auditLen)
	if app != "" {
		if err := checkName("app", app); err != nil {
			return nil, err
		}
		return s.auditList(ctx, s.keys(app).audit, limit)
	}
	apps, err := s.Apps(ctx)
	if err != nil {
		return nil, err
	}
	out, err := s.auditList(ctx, s.auditKey(), limit)
	if err != nil {
		return nil, err
	}
	for _, a := range apps {
		es, err := s.auditList(ctx, s.keys(a).audit, limit)
		if err != nil {
			return nil, err
		}
		out = append(out, es...)
	}
	slices.SortStableFunc(out, func(a, b cluster.AuditEntry) int { return b.At.Compare(a.At) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func (s *RuleStore) auditList(ctx context.Context, key string, limit int) ([]cluster.AuditEntry, error) {
	vals, err := s.c.LRange(ctx, key, 0, int64(limit)-1).Result()
	if err != nil {
		return nil, fmt.Errorf("sluiceredis: audit log: %w", err)
	}
	out := make([]cluster.AuditEntry, 0, len(vals))
	for _, v := range vals {
		e, err := parseAudit(v)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// parseAudit reads "<µs> <version> <json>".
func parseAudit(v string) (cluster.AuditEntry, error) {
	bad := fmt.Errorf("sluiceredis: audit log: malformed entry %q", cut(v, 80))
	at, rest, ok1 := strings.Cut(v, " ")
	ver, body, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 {
		return cluster.AuditEntry{}, bad
	}
	us, err1 := strconv.ParseInt(at, 10, 64)
	n, err2 := strconv.ParseInt(ver, 10, 64)
	var a auditJSON
	if err1 != nil || err2 != nil || json.Unmarshal([]byte(body), &a) != nil {
		return cluster.AuditEntry{}, bad
	}
	return cluster.AuditEntry{At: time.UnixMicro(us), User: a.User, App: a.App, Action: a.Action, Version: n, Detail: a.Detail}, nil
}
