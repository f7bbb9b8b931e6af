package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// dialect is what differs between PostgreSQL and MySQL: the placeholders,
// the clock, the upserts, and how a watch learns of a new version.
type dialect struct {
	name string // "postgres" or "mysql", also the folder of its migrations
	// nowUS is an expression of the server's clock, in Unix microseconds.
	nowUS string
	// ignoreApp inserts an application's row unless it exists (args: app,
	// created_by, created_us).
	ignoreApp string
	// upsertReport inserts or replaces a report (args: app, instance,
	// version, refused, err, at_us, expires_us).
	upsertReport string
	// lock and unlock take and release the migration lock on one
	// connection.
	lock, unlock string
	// pgConfig is set for PostgreSQL: the notification connection's.
	pgConfig *pgx.ConnConfig
}

var (
	postgresDialect = dialect{
		name:      "postgres",
		nowUS:     "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)",
		ignoreApp: "INSERT INTO sluice_rule_apps (app, created_by, created_us) VALUES (?, ?, ?) ON CONFLICT (app) DO NOTHING",
		upsertReport: "INSERT INTO sluice_rule_reports (app, instance, version, refused, err, at_us, expires_us) VALUES (?, ?, ?, ?, ?, ?, ?) " +
			"ON CONFLICT (app, instance) DO UPDATE SET version = EXCLUDED.version, refused = EXCLUDED.refused, err = EXCLUDED.err, at_us = EXCLUDED.at_us, expires_us = EXCLUDED.expires_us",
		lock:   "SELECT pg_advisory_lock(7365716)",
		unlock: "SELECT pg_advisory_unlock(7365716)",
	}
	mysqlDialect = dialect{
		name:      "mysql",
		nowUS:     "CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)",
		ignoreApp: "INSERT IGNORE INTO sluice_rule_apps (app, created_by, created_us) VALUES (?, ?, ?)",
		upsertReport: "INSERT INTO sluice_rule_reports (app, instance, version, refused, err, at_us, expires_us) VALUES (?, ?, ?, ?, ?, ?, ?) " +
			"ON DUPLICATE KEY UPDATE version = VALUES(version), refused = VALUES(refused), err = VALUES(err), at_us = VALUES(at_us), expires_us = VALUES(expires_us)",
		lock:   "SELECT GET_LOCK('sluice_rule_store_migrate', 30)",
		unlock: "SELECT RELEASE_LOCK('sluice_rule_store_migrate')",
	}
)

// q rewrites the ? placeholders of query for the dialect ($1, $2, ... for
// PostgreSQL). The store's queries hold no other question mark.
func (d *dialect) q(query string) string {
	if d.name != "postgres" {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// open parses rawURL (postgres://, postgresql:// or mysql://) and returns
// the database handle and the dialect, not yet connected. timeout bounds
// each dial.
//
// PostgreSQL URLs are libpq's, read by pgx (sslmode, connect_timeout, ...).
// MySQL URLs are mysql://user:password@host:port/database?param=value, the
// parameters those of github.com/go-sql-driver/mysql's DSN.
func open(rawURL string, timeout time.Duration) (*sql.DB, dialect, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error quotes the URL, password and all: only its cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, dialect{}, fmt.Errorf("sqlstore: malformed database URL: %w", err)
	}
	switch u.Scheme {
	case "postgres", "postgresql":
		cfg, err := pgx.ParseConfig(rawURL)
		if err != nil {
			return nil, dialect{}, fmt.Errorf("sqlstore: malformed PostgreSQL URL: %w", redactErr(err, rawURL))
		}
		if cfg.ConnectTimeout == 0 || cfg.ConnectTimeout > timeout {
			cfg.ConnectTimeout = timeout
		}
		d := postgresDialect
		d.pgConfig = cfg.Copy()
		return stdlib.OpenDB(*cfg), d, nil
	case "mysql":
		cfg, err := mysqlConfig(u)
		if err != nil {
			return nil, dialect{}, err
		}
		cfg.Timeout = timeout
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			return nil, dialect{}, fmt.Errorf("sqlstore: MySQL URL: %w", err)
		}
		return sql.OpenDB(conn), mysqlDialect, nil
	}
	return nil, dialect{}, fmt.Errorf("sqlstore: database URL scheme %q: want postgres://, postgresql:// or mysql://", u.Scheme)
}

// mysqlConfig reads a mysql:// URL: user and password, host and port
// (3306 when absent; a host starting with / is a unix socket), the
// database, and the driver's DSN parameters.
func mysqlConfig(u *url.URL) (*mysql.Config, error) {
	q := u.Query()
	dsn := ""
	if u.User != nil {
		dsn = u.User.Username()
		if p, ok := u.User.Password(); ok {
			dsn += ":" + p
		}
		dsn += "@"
	}
	switch host := u.Host; {
	case q.Get("socket") != "":
		dsn += "unix(" + q.Get("socket") + ")"
		q.Del("socket")
	case host == "":
		dsn += "tcp(127.0.0.1:3306)"
	default:
		if _, _, err := net.SplitHostPort(host); err != nil {
			host = net.JoinHostPort(strings.Trim(host, "[]"), "3306")
		}
		dsn += "tcp(" + host + ")"
	}
	dsn += "/" + strings.TrimPrefix(u.Path, "/")
	if len(q) > 0 {
		dsn += "?" + q.Encode()
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: malformed MySQL URL: %w", redactErr(err, u.String()))
	}
	if cfg.DBName == "" {
		return nil, errors.New("sqlstore: MySQL URL names no database (mysql://user:password@host:port/database)")
	}
	return cfg, nil
}

// redactErr returns err with any password of rawURL removed from its text.
func redactErr(err error, rawURL string) error {
	u, perr := url.Parse(rawURL)
	if perr != nil || u.User == nil {
		return err
	}
	p, ok := u.User.Password()
	if !ok || p == "" || !strings.Contains(err.Error(), p) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), p, "xxxxx"))
}

// Redact returns rawURL with its password replaced by "xxxxx", for logs
// and messages.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(malformed URL)"
	}
	return u.Redacted()
}

// isReadOnly tells an error of a write the database refused for lack of
// privilege or a read-only server.
func isReadOnly(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "42501" || pe.Code == "25006" // insufficient_privilege, read_only_sql_transaction
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == 1142 || me.Number == 1044 || me.Number == 1290 || me.Number == 1792 // command denied, access denied, read-only
	}
	return false
}

// isRetryable tells a transaction the database rolled back for a deadlock
// or a serialization failure: run again, it may succeed.
func isRetryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "40001" || pe.Code == "40P01"
	}
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

// ctxErr returns ctx's error when it ended, err otherwise: a call cut
// short by its context says so rather than "driver: bad connection".
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}
