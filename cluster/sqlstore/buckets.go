package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/rules"
)

// Bucket is the metadata of one resource named by an application's rules
// in force: who created its rules and who last changed them, in which
// version, and which applications' rules name it (the applications that
// count on it: a resource is used by naming it in an application's rules,
// and the dashboard's grants say who may change those).
type Bucket struct {
	// App is the application whose rules name the resource; Resource the
	// resource; Kinds the kinds of rule that name it (flow,
	// circuitBreaker, param), sorted.
	App, Resource string
	Kinds         []string
	// Apps lists every application whose rules in force name Resource,
	// App included, sorted.
	Apps []string
	// CreatedBy saved the version CreatedIn, the first of the run of
	// versions that name the resource, at CreatedAt; UpdatedBy the last
	// version that changed its rules, UpdatedIn, at UpdatedAt.
	CreatedBy, UpdatedBy string
	CreatedIn, UpdatedIn int64
	CreatedAt, UpdatedAt time.Time
}

// resource is one resource's rules in a document, as canonical JSON, and
// the kinds of rule that name it.
type resource struct {
	text  string
	kinds []string
}

// resources groups the rules of set by resource (system rules name none
// and are left out).
func resources(set rules.Set) (map[string]resource, error) {
	b, err := json.Marshal(set)
	if err != nil {
		return nil, err
	}
	var kinds map[string][]map[string]any
	if err := json.Unmarshal(b, &kinds); err != nil {
		return nil, err
	}
	out := map[string]resource{}
	for kind, rs := range kinds {
		for _, r := range rs {
			name, ok := r["resource"].(string)
			if !ok {
				continue
			}
			rb, _ := json.Marshal(r)
			res := out[name]
			res.text += kind + string(rb) + "\n"
			if !slices.Contains(res.kinds, kind) {
				res.kinds = append(res.kinds, kind)
			}
			out[name] = res
		}
	}
	for name, res := range out {
		slices.Sort(res.kinds)
		lines := strings.Split(strings.TrimSuffix(res.text, "\n"), "\n")
		slices.Sort(lines)
		res.text = strings.Join(lines, "\n")
		out[name] = res
	}
	return out, nil
}

// batch is the number of rows one statement of saveBuckets writes.
const batch = 500

// saveBuckets brings app's resource metadata from the document of oldRes to
// that of newRes, saved as version v: new resources are created by
// v.Author, changed ones updated, dropped ones deleted, in batches.
//
// complexity: sorts the resources into created, changed and dropped, then writes each set in batches
func (s *Store) saveBuckets(ctx context.Context, tx *sql.Tx, app string, v cluster.RuleVersion, oldRes, newRes map[string]resource) error {
	have := map[string]bool{}
	rows, err := tx.QueryContext(ctx, s.d.q("SELECT resource FROM sluice_rule_buckets WHERE app = ? FOR UPDATE"), app)
	if err != nil {
		return err
	}
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			rows.Close()
			return err
		}
		have[r] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var created, changed, dropped []string
	for name, res := range newRes {
		switch old, ok := oldRes[name]; {
		case !have[name]:
			created = append(created, name)
		case !ok || old.text != res.text:
			changed = append(changed, name)
		}
	}
	for name := range have {
		if _, ok := newRes[name]; !ok {
			dropped = append(dropped, name)
		}
	}
	slices.Sort(created)
	at := v.At.UnixMicro()
	for chunk := range slices.Chunk(created, batch) {
		q := "INSERT INTO sluice_rule_buckets (app, resource, kinds, created_by, created_us, created_in, updated_by, updated_us, updated_in) VALUES " +
			strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?, ?), ", len(chunk)), ", ")
		args := make([]any, 0, 9*len(chunk))
		for _, name := range chunk {
			args = append(args, app, name, strings.Join(newRes[name].kinds, ","), v.Author, at, v.Version, v.Author, at, v.Version)
		}
		if _, err := tx.ExecContext(ctx, s.d.q(q), args...); err != nil {
			return err
		}
	}
	for _, name := range changed {
		// Each changed resource may have changed kinds: one statement each
		// (a save changes few resources).
		if _, err := tx.ExecContext(ctx, s.d.q("UPDATE sluice_rule_buckets SET kinds = ?, updated_by = ?, updated_us = ?, updated_in = ? WHERE app = ? AND resource = ?"),
			strings.Join(newRes[name].kinds, ","), v.Author, at, v.Version, app, name); err != nil {
			return err
		}
	}
	for chunk := range slices.Chunk(dropped, batch) {
		q := "DELETE FROM sluice_rule_buckets WHERE app = ? AND resource IN (" + strings.TrimSuffix(strings.Repeat("?, ", len(chunk)), ", ") + ")"
		args := []any{app}
		for _, name := range chunk {
			args = append(args, name)
		}
		if _, err := tx.ExecContext(ctx, s.d.q(q), args...); err != nil {
			return err
		}
	}
	return nil
}

// Buckets returns the metadata of the resources app's rules in force name,
// by resource, in one query.
func (s *Store) Buckets(ctx context.Context, app string) ([]Bucket, error) {
	if err := checkName("app", app); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, s.d.q("SELECT b.resource, b.kinds, b.created_by, b.created_us, b.created_in, b.updated_by, b.updated_us, b.updated_in, o.app "+
		"FROM sluice_rule_buckets b JOIN sluice_rule_buckets o ON o.resource = b.resource WHERE b.app = ? ORDER BY b.resource, o.app"), app)
	if err != nil {
		return nil, wrap(ctx, "buckets of", app, err)
	}
	defer rows.Close()
	var out []Bucket
	for rows.Next() {
		var b Bucket
		var kinds, other string
		var cus, uus int64
		if err := rows.Scan(&b.Resource, &kinds, &b.CreatedBy, &cus, &b.CreatedIn, &b.UpdatedBy, &uus, &b.UpdatedIn, &other); err != nil {
			return nil, wrap(ctx, "buckets of", app, err)
		}
		if n := len(out); n > 0 && out[n-1].Resource == b.Resource {
			out[n-1].Apps = append(out[n-1].Apps, other)
			continue
		}
		b.App, b.Kinds, b.Apps = app, strings.Split(kinds, ","), []string{other}
		b.CreatedAt, b.UpdatedAt = time.UnixMicro(cus), time.UnixMicro(uus)
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(ctx, "buckets of", app, err)
	}
	return out, nil
}

// AppInfo is an application's row: who saved its first and its latest
// version, and when.
type AppInfo struct {
	App                  string
	Version              int64
	CreatedBy, UpdatedBy string
	CreatedAt, UpdatedAt time.Time
}

// Info returns app's row; Version 0 when app has no rules.
func (s *Store) Info(ctx context.Context, app string) (AppInfo, error) {
	if err := checkName("app", app); err != nil {
		return AppInfo{}, err
	}
	i := AppInfo{App: app}
	var cus, uus int64
	err := s.db.QueryRowContext(ctx, s.d.q("SELECT version, created_by, created_us, updated_by, updated_us FROM sluice_rule_apps WHERE app = ?"), app).
		Scan(&i.Version, &i.CreatedBy, &cus, &i.UpdatedBy, &uus)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return i, nil
	case err != nil:
		return AppInfo{}, wrap(ctx, "info of", app, err)
	}
	i.CreatedAt, i.UpdatedAt = time.UnixMicro(cus), time.UnixMicro(uus)
	return i, nil
}
