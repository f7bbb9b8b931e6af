package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluice-go/sluice/cluster/sqlstore"
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
