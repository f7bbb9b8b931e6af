package main

import (
	"github.com/failsafe-go/failsafe-go/adaptivelimiter"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
)

var (
	// sluiceAdaptive is Entry+Exit under an adaptive concurrency rule whose
	// limit is at least 1000 (so nothing is refused; its windows decide as
	// in service). Budget: at most 60 ns over SluiceOneRule, 0 allocs.
	sluiceAdaptive = path{name: "SluiceAdaptive", setup: setupSluiceAdaptive}
	// failsafeAdaptive is failsafe-go's adaptive limiter
	// (adaptivelimiter, v0.9.8) at the same limits: TryAcquirePermit and
	// Record, the non-blocking path of an admission and its release.
	failsafeAdaptive = path{name: "FailsafeAdaptive", setup: setupFailsafeAdaptive}
)

func setupSluiceAdaptive() (func() func() error, func(), error) {
	g := sluice.New()
	rule := rules.Flow{Resource: resource, Metric: rules.Concurrency, Adaptive: &rules.Adaptive{Min: 1000, Max: 1000000}}
	if err := g.LoadRules(rules.Set{Flow: []rules.Flow{rule}}); err != nil {
		_ = g.Close()
		return nil, nil, err
	}
	return same(func() error {
		p, err := g.Entry(resource)
		if err != nil {
			return err
		}
		p.Exit()
		return nil
	}), closer(g), nil
}

func setupFailsafeAdaptive() (func() func() error, func(), error) {
	l := adaptivelimiter.NewBuilder[any]().WithLimits(1000, 1000000, 1000).Build()
	return same(func() error {
		p, ok := l.TryAcquirePermit()
		if !ok {
			return errDenied
		}
		p.Record()
		return nil
	}), func() {}, nil
}
