package sqlstore

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// migrationFiles holds the schema's versions, one file each per dialect,
// named NNNN_name.sql. A migration that drops or rewrites data starts with
// the line "-- destructive": Open applies it only with
// Config.AllowDestructive.
//
//go:embed migrations
var embedded embed.FS

// migrationFiles is embedded, or a test's migrations.
var migrationFiles fs.FS = embedded

type migration struct {
	version     int
	name, body  string
	destructive bool
}

// migrations returns the dialect's migrations, by version.
func migrations(d string) ([]migration, error) {
	dir := path.Join("migrations", d)
	ents, err := fs.ReadDir(migrationFiles, dir)
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range ents {
		num, name, ok := strings.Cut(strings.TrimSuffix(e.Name(), ".sql"), "_")
		n, err := strconv.Atoi(num)
		if !ok || err != nil || n < 1 {
			return nil, fmt.Errorf("sqlstore: migration file %s is not named NNNN_name.sql", e.Name())
		}
		b, err := fs.ReadFile(migrationFiles, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: n, name: name, body: string(b), destructive: strings.HasPrefix(string(b), "-- destructive")})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	return out, nil
}

// SchemaVersion is the version of the schema this package writes and
// reads: the number of its last migration.
const SchemaVersion = 1

// schemaVersionWanted is SchemaVersion, or a test's.
var schemaVersionWanted = SchemaVersion

// migrate brings the database's schema to SchemaVersion, one migration at
// a time, each recorded in sluice_schema with its name and time, under a
// lock (two stores opened at once migrate once). It refuses a schema newer
// than this package knows, and a destructive migration unless allowed.
func migrate(ctx context.Context, db *sql.DB, d *dialect, allowDestructive bool) error {
	ms, err := migrations(d.name)
	if err != nil {
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return ctxErr(ctx, err)
	}
	defer conn.Close()
	have, err := schemaVersion(ctx, conn, d)
	if err != nil {
		return fmt.Errorf("sqlstore: reading the schema version: %w", ctxErr(ctx, err))
	}
	if have == schemaVersionWanted {
		return nil // the everyday case: no lock, no DDL (a read-only user opens the store)
	}
	if have > schemaVersionWanted {
		return fmt.Errorf("sqlstore: the database's schema is version %d, newer than this version of sqlstore knows (%d): upgrade sqlstore", have, schemaVersionWanted)
	}
	if _, err := conn.ExecContext(ctx, d.lock); err != nil {
		return fmt.Errorf("sqlstore: migration lock: %w", ctxErr(ctx, err))
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), d.unlock) //nolint:errcheck // released with the connection anyway
	if _, err := conn.ExecContext(ctx, d.q("CREATE TABLE IF NOT EXISTS sluice_schema (version INT NOT NULL PRIMARY KEY, name VARCHAR(200) NOT NULL, applied_us BIGINT NOT NULL)")); err != nil {
		return fmt.Errorf("sqlstore: creating sluice_schema (may the user create tables?): %w", ctxErr(ctx, err))
	}
	if err := conn.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM sluice_schema").Scan(&have); err != nil {
		return fmt.Errorf("sqlstore: reading the schema version: %w", ctxErr(ctx, err))
	}
	for _, m := range ms {
		if m.version <= have {
			continue
		}
		if m.destructive && !allowDestructive {
			return fmt.Errorf("sqlstore: schema migration %d (%s) drops or rewrites data: back the database up, then open the store with Config.AllowDestructive", m.version, m.name)
		}
		if err := apply(ctx, conn, d, m); err != nil {
			return fmt.Errorf("sqlstore: schema migration %d (%s): %w", m.version, m.name, ctxErr(ctx, err))
		}
	}
	return nil
}

// schemaVersion reads the schema version with no privilege beyond
// reading: 0 on a database without the store's tables.
func schemaVersion(ctx context.Context, conn *sql.Conn, d *dialect) (int, error) {
	exists := "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'sluice_schema'"
	if d.name == "postgres" {
		exists = "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = 'sluice_schema'"
	}
	var n, have int
	if err := conn.QueryRowContext(ctx, exists).Scan(&n); err != nil || n == 0 {
		return 0, err
	}
	err := conn.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM sluice_schema").Scan(&have)
	return have, err
}

// apply runs one migration and records it. PostgreSQL runs it in one
// transaction; MySQL commits each DDL statement by itself, so its
// migrations are written to be run again after a failure part-way
// (each statement checks what exists).
func apply(ctx context.Context, conn *sql.Conn, d *dialect, m migration) error {
	if d.name == "postgres" {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
		if _, err := tx.ExecContext(ctx, m.body); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, d.q("INSERT INTO sluice_schema (version, name, applied_us) VALUES (?, ?, "+d.nowUS+")"), m.version, m.name); err != nil {
			return err
		}
		return tx.Commit()
	}
	for _, stmt := range strings.Split(m.body, ";\n") {
		if strings.TrimSpace(stripComments(stmt)) == "" {
			continue
		}
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	_, err := conn.ExecContext(ctx, "INSERT INTO sluice_schema (version, name, applied_us) VALUES (?, ?, "+d.nowUS+")", m.version, m.name)
	return err
}

func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "--") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
