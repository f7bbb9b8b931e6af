// Command rulestore shows two instances of a service following their rules
// in PostgreSQL or MySQL: it saves a version of the rules, both engines
// load it (on PostgreSQL at once, by notification; on MySQL at the watch's
// next poll, within 200 ms), it saves a second one, and it prints what
// each engine runs, what each reported to the store, and who created and
// changed each resource's rules.
//
// Run it from the cluster/sqlstore module with a database it may create
// tables in (it writes the sluice_* tables, application "example-shop"):
//
//	go run ./examples/rulestore postgres://user:password@127.0.0.1:5432/db
//	go run ./examples/rulestore mysql://user:password@127.0.0.1:3306/db
//
// Without a URL it reads $SLUICE_RULES_URL. It ends within a few seconds.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/sqlstore"
	"github.com/sluice-go/sluice/fleet"
)

func main() {
	url := os.Getenv("SLUICE_RULES_URL")
	if len(os.Args) > 1 {
		url = os.Args[1]
	}
	if url == "" {
		fmt.Println("usage: go run ./examples/rulestore postgres://user:password@host:5432/db (or mysql://user:password@host:3306/db)")
		return
	}
	if err := run(os.Stdout, url); err != nil {
		log.Fatal(err)
	}
}

const app = "example-shop"

func run(w io.Writer, url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store, err := sqlstore.Open(ctx, url, sqlstore.Config{})
	if err != nil {
		return err
	}
	defer store.Close()
	base, err := store.Current(ctx, app)
	if err != nil {
		return err
	}

	// Two instances of the application follow its rules in the store.
	var engines []*sluice.Engine
	var members []*fleet.Member
	for _, id := range []string{"shop-1", "shop-2"} {
		eng := sluice.New()
		defer eng.Close()
		m, err := fleet.Join(eng, fleet.Config{App: app, Instance: id, Rules: store})
		if err != nil {
			return err
		}
		defer m.Close()
		engines = append(engines, eng)
		members = append(members, m)
	}

	docs := []string{
		"flow:\n  - resource: GET /orders\n    threshold: 100\n",
		"flow:\n  - resource: GET /orders\n    threshold: 250\n  - resource: POST /orders\n    threshold: 20\n",
	}
	for i, doc := range docs {
		v, err := store.Save(ctx, app, base.Version, cluster.RuleVersion{Doc: []byte(doc), Author: fmt.Sprint("ops-", i+1), Comment: "example"})
		if err != nil {
			return err
		}
		base = v
		start := time.Now()
		for _, m := range members {
			for m.Status().Version != v.Version {
				if ctx.Err() != nil {
					return fmt.Errorf("version %d did not reach %s: %w", v.Version, m.Status().Instance, ctx.Err())
				}
				time.Sleep(time.Millisecond)
			}
		}
		fmt.Fprintf(w, "%s version saved by %s: on both engines within %v\n", store.Dialect(), v.Author, time.Since(start).Round(time.Millisecond))
		for i, eng := range engines {
			for _, r := range eng.Rules().Flow {
				fmt.Fprintf(w, "  %s: %s at %v/s\n", members[i].Status().Instance, r.Resource, r.Threshold)
			}
		}
	}
	// Each engine reported what it runs.
	for {
		reps, err := store.Reports(ctx, app)
		if err != nil {
			return err
		}
		if len(reps) == 2 && reps[0].Version == base.Version && reps[1].Version == base.Version {
			for _, r := range reps {
				fmt.Fprintf(w, "report: %s runs the version in force\n", r.Instance)
			}
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(5 * time.Millisecond)
	}
	buckets, err := store.Buckets(ctx, app)
	if err != nil {
		return err
	}
	for _, b := range buckets {
		fmt.Fprintf(w, "resource %s: created by %s, last changed by %s\n", b.Resource, b.CreatedBy, b.UpdatedBy)
	}
	return nil
}
