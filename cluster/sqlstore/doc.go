// Package sqlstore keeps a fleet's rules in PostgreSQL or MySQL/MariaDB: a
// cluster.RuleStore for fleet.Join and the dashboard, for teams that
// already run, back up and audit one of those databases and would rather
// not keep rule history in a cache.
//
//	s, err := sqlstore.Open(ctx, "postgres://sluice:pw@db:5432/ops", sqlstore.Config{})
//	...
//	m, err := fleet.Join(eng, fleet.Config{App: "shop", Rules: s})
//
// It is a module of its own (github.com/sluice-go/sluice/cluster/sqlstore),
// so that the drivers (github.com/jackc/pgx/v5 and
// github.com/go-sql-driver/mysql) stay out of the root module.
//
// # One design, two dialects
//
// The same tables and the same transactions on both databases:
//
//   - sluice_rule_apps: one row per application, the version in force and
//     who created it and last saved it (Info);
//   - sluice_rule_versions: every version kept (Config.History, 100 by
//     default), with its document, author, comment, time (the database's
//     clock, in Unix microseconds) and the version it rolls back to;
//   - sluice_rule_buckets: per resource named by an application's rules in
//     force, who created its rules and who last changed them, in which
//     version (Buckets, which also lists the applications whose rules
//     name the same resource);
//   - sluice_rule_reports and sluice_audit: the instances' reports and the
//     audit log;
//   - sluice_schema: the migrations applied.
//
// Save validates the document first (the loaders' validation and
// Config.Limits: a document too large or invalid is refused, wrapping
// cluster.ErrInvalidRules, before anything is written), then runs one
// transaction: it locks the application's row, checks that the version in
// force is the base (cluster.ErrConflict otherwise, nothing written),
// writes the version, puts it in force, deletes versions beyond the
// history, updates the resource metadata and appends the audit entry. Of
// two dashboards saving on the same base, one wins and the other gets
// ErrConflict; a save cut short by a lost connection or a crashed server
// has happened whole or not at all.
//
// # Watches
//
// On PostgreSQL a trigger on sluice_rule_apps sends a notification
// (pg_notify on channel sluice_rules) when a version is put in force, by
// the store or by any statement; Watch listens on a connection of its own
// and reads the version in force when notified. A notification connection
// can be lost, and its notifications with it: Watch also reads the version
// in force every Config.PollInterval (2 s) and at once when it has
// listened again, so that no version is missed. On MySQL, which has no
// notifications, Watch reads the version row every Config.PollInterval
// (200 ms): one primary-key read per watching instance.
//
// As with the Redis store, a lost database leaves the engines' rules in
// force: fleet.Join keeps what it loaded and reports the failed reads
// (Member.Status, Config.OnError), watches go on and catch up when the
// database is back, and Config.OnWatchError hears of each loss and
// return.
//
// # Schema and privileges
//
// Open creates the tables and migrates them with the embedded, numbered
// migrations (SchemaVersion), under a lock, and records each in
// sluice_schema. It never applies a migration that drops or rewrites data
// without Config.AllowDestructive, and refuses a schema newer than it
// knows. Creating the schema needs the right to create tables (and, on
// PostgreSQL, a function and a trigger); once it is current, a user that
// may read and write the sluice_* tables is enough, and a user that may
// only read them can run a dashboard that shows rules (its saves are
// refused with an error saying so).
//
// # URLs
//
// PostgreSQL: postgres://user:password@host:port/database?sslmode=...,
// libpq's URL as pgx reads it (search_path picks a schema). MySQL:
// mysql://user:password@host:port/database?param=value, the parameters
// those of the go-sql-driver DSN (tls=true, ...); ?socket=/path for a unix
// socket. Config.DialTimeout (5 s) bounds each connection attempt: a wrong
// password, an unreachable host or a server that never answers is an error
// naming the URL without its password, within it.
package sqlstore
