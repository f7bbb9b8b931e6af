package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-go/sluice/stat"
)

// ErrConflict is returned by RuleStore.Save when the application's rules
// changed since the version the caller edited: the caller reloads, looks
// at the newer version and saves again. Nothing was written.
var ErrConflict = errors.New("cluster: rules changed since the version edited")

// ErrInvalidRules is wrapped, beside the decoder's error, by the error of a
// RuleStore.Save that refused the document (malformed, invalid, or over the
// store's limits), so that callers tell a document to fix (errors.Is) from
// a store that failed. Nothing was written.
var ErrInvalidRules = errors.New("cluster: invalid rule document")

// ErrNoVersion is returned by RuleStore.Version for a version the store
// does not have (never written, or older than the history it keeps).
var ErrNoVersion = errors.New("cluster: no such rule version")

// RuleVersion is one version of an application's rules.
type RuleVersion struct {
	// Version numbers the versions of one application from 1, one more at
	// each save; 0 means the application has no rules in the store.
	Version int64
	// Doc is the rule document, in the format of rule files
	// (rules.Decode with rules.YAML reads it; JSON is YAML).
	Doc []byte
	// Author is who saved it; Comment why (optional).
	Author, Comment string
	// At is when it was saved, on the store's clock.
	At time.Time
	// RollbackOf is, for a version saved by rolling back, the earlier
	// version whose document it restores; 0 otherwise.
	RollbackOf int64
}

// RuleReport is what an instance says about the rules it runs.
type RuleReport struct {
	// Instance is the reporting instance's Member.ID.
	Instance string
	// Version is the version it runs (0: none from the store).
	Version int64
	// Refused is the version it refused, 0 when none, and Err why (the
	// engine's validation error, naming the rule and field).
	Refused int64
	Err     string
	// At is when it reported.
	At time.Time
}

// AuditEntry records one change made through a RuleStore or a dashboard.
type AuditEntry struct {
	// At is when it happened, on the store's clock (the store sets it).
	At time.Time
	// User is who did it; App the application concerned ("" for changes
	// that concern no application, such as a failed login).
	User, App string
	// Action names what was done: "save", "rollback", "login",
	// "login-failed", "logout", ...
	Action string
	// Version is the rule version written, 0 when none.
	Version int64
	// Detail says more: for a save, a line diff of the documents.
	Detail string
}

// RuleStore keeps the versioned rules of applications and tells instances
// when they change. Implementations are safe for concurrent use; every
// method returns when ctx ends.
type RuleStore interface {
	// Apps returns the applications that have rules in the store, sorted.
	Apps(ctx context.Context) ([]string, error)
	// Current returns the version in force for app; Version 0 (and a nil
	// Doc) when it has none.
	Current(ctx context.Context, app string) (RuleVersion, error)
	// Version returns one version of app's rules, or ErrNoVersion.
	Version(ctx context.Context, app string, version int64) (RuleVersion, error)
	// History returns up to limit versions of app's rules, newest first.
	History(ctx context.Context, app string, limit int) ([]RuleVersion, error)
	// Save validates v.Doc whole (the loaders' validation: an error wraps
	// ErrInvalidRules and names the rule and field, as a *rules.Error or
	// *rules.PathError reached with errors.As), then writes it as version base+1 if the version in
	// force is base, atomically, records it in the history, and notifies
	// the instances of app. It returns ErrConflict, writing nothing, when
	// the version in force is not base. v.Version and v.At are set by the
	// store; the version written is returned.
	Save(ctx context.Context, app string, base int64, v RuleVersion) (RuleVersion, error)
	// Watch calls changed with the version number each time app's rules
	// are saved, until ctx ends, and returns ctx's error then (or the
	// error that stopped it). Once it listens, it first calls changed(0):
	// a caller that reads Current after that call misses no later save
	// but one whose notification is lost, so a caller that read Current
	// before Watch started (and a save came in between) reads it again
	// there. (A store that announces no save at all need not call it.)
	// Notifications may be lost (a pub/sub message dropped): callers also
	// poll Current.
	Watch(ctx context.Context, app string, changed func(version int64)) error
	// Report records r for app's instance r.Instance, kept for ttl.
	Report(ctx context.Context, app string, r RuleReport, ttl time.Duration) error
	// Reports returns the unexpired reports of app's instances.
	Reports(ctx context.Context, app string) ([]RuleReport, error)
	// Audit appends e to the audit log (the store sets e.At) and AuditLog
	// returns up to limit entries of app ("" for every application),
	// newest first. The log is bounded; the oldest entries go first.
	Audit(ctx context.Context, e AuditEntry) error
	AuditLog(ctx context.Context, app string, limit int) ([]AuditEntry, error)
}

// Frame is what one instance publishes about one second, for dashboards.
type Frame struct {
	// App and Instance name the publisher (Member.App and Member.ID).
	App, Instance string
	// Second is the Unix second the figures are for, on the instance's
	// wall clock.
	Second int64
	// RuleVersion is the rule version the instance runs.
	RuleVersion int64
	// ClusterMode is "remote", "fallback", or "" without a cluster store.
	ClusterMode string
	// Resources holds the second's figures of the busiest resources (at
	// most the publisher's cap, by passed plus refused requests).
	Resources []ResourceSecond
	// Breakers holds the state of every circuit breaker.
	Breakers []BreakerFrame
	// System is the host as system protection sees it, and Shedding
	// whether system protection refused an entry in the second.
	System   stat.System
	Shedding bool
}

// ResourceSecond is one resource's figures in a Frame.
type ResourceSecond struct {
	Resource string
	stat.Second
	// BlockedBy counts the second's refusals by block type, as
	// stat.Snapshot.BlockedBy does.
	BlockedBy [len(stat.Snapshot{}.BlockedBy)]uint64
	// Concurrency is the number in flight when the frame was taken.
	Concurrency int64
	// Tier is the step of the resource's tiered flow rule when the frame
	// was taken, as stat.Snapshot.Tier. (The adaptive limit and the shadow
	// would-be refusals are the second's, in Second.)
	Tier int
	// Callers counts the second's refusals of the resource's most refused
	// callers (sluice.WithCaller; at most 10), by caller: what the
	// dashboard shows as the top refused callers, since no metric carries
	// a caller. A count may be over when more than 16 callers were refused
	// in the second (docs/design/dashboard.md, "Top refused callers").
	Callers map[string]uint64
}

// BreakerFrame is one circuit breaker's state in a Frame.
type BreakerFrame struct {
	Resource string
	State    stat.BreakerState
}

// Telemetry carries instances' frames to dashboards, bounded: a store
// keeps the last frames of each instance for a while and forgets
// instances that stop publishing.
type Telemetry interface {
	// Publish records f, keeping the last keep frames of its instance,
	// which are forgotten ttl after the last Publish.
	Publish(ctx context.Context, f Frame, keep int, ttl time.Duration) error
	// Frames returns the kept frames of app's instances whose Second is at
	// least since (Unix seconds), by instance then Second.
	Frames(ctx context.Context, app string, since int64) ([]Frame, error)
}
