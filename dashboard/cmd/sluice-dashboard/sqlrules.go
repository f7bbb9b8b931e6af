package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluice-go/sluice/cluster/sqlstore"
	"github.com/sluice-go/sluice/dashboard"
)

// openSQLRules opens the rule store at rawURL (postgres://… or
// mysql://…), creating or migrating its tables, within 10 s. A lost
// connection of a watch is logged (the dashboard's pages show the store's
// failures as they happen).
func openSQLRules(ctx context.Context, rawURL string) (*sqlstore.Store, error) {
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := sqlstore.Open(octx, rawURL, sqlstore.Config{OnWatchError: func(app string, err error) {
		if err != nil {
			log.Printf("rule store: %v", err)
		} else {
			log.Printf("rule store: watch of %q connected again", app)
		}
	}})
	if err != nil {
		return nil, fmt.Errorf("-rules: %w", err)
	}
	return s, nil
}

// sqlRules is the SQL rule store as the dashboard takes it: every method
// of sqlstore.Store, and Buckets in the dashboard's types
// (dashboard.BucketStore), for the rules page to show who created and
// changed each resource's rules.
type sqlRules struct{ *sqlstore.Store }

func (s sqlRules) Buckets(ctx context.Context, app string) ([]dashboard.BucketInfo, error) {
	bs, err := s.Store.Buckets(ctx, app)
	if err != nil {
		return nil, err
	}
	out := make([]dashboard.BucketInfo, len(bs))
	for i, b := range bs {
		out[i] = dashboard.BucketInfo{Resource: b.Resource, Kinds: b.Kinds, Apps: b.Apps,
			CreatedBy: b.CreatedBy, CreatedIn: b.CreatedIn, CreatedAt: b.CreatedAt,
			UpdatedBy: b.UpdatedBy, UpdatedIn: b.UpdatedIn, UpdatedAt: b.UpdatedAt}
	}
	return out, nil
}
