package main

import (
	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
)

// sluiceBudget is sluiceOneRule with sluice.WithBudget on every entry:
// what telling each caller its remaining budget (the RateLimit header
// fields' source) adds to the pass path.
var sluiceBudget = path{name: "SluiceBudget", setup: setupSluiceBudget}

func setupSluiceBudget() (func() func() error, func(), error) {
	g := sluice.New()
	if err := g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: resource, Threshold: rules.MaxThreshold}}}); err != nil {
		_ = g.Close()
		return nil, nil, err
	}
	return func() func() error {
		var b sluice.Budget // one per goroutine, written by every entry
		opts := []sluice.EntryOption{sluice.WithBudget(&b)}
		return func() error {
			p, err := g.Entry(resource, opts...)
			if err != nil {
				return err
			}
			p.Exit()
			return nil
		}
	}, closer(g), nil
}
