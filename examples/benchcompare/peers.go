package main

import (
	"fmt"
	"sync"
	"time"

	"github.com/failsafe-go/failsafe-go/bulkhead"
	"github.com/failsafe-go/failsafe-go/ratelimiter"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-go/sluice"
	sluiceprom "github.com/sluice-go/sluice/adapters/prometheus"
	"github.com/sluice-go/sluice/rules"
)

// The paths beside failsafe-go's rate limiter and bulkhead, the watched
// resource and the refusal on the system clock.
var (
	// failsafeSmooth is failsafe-go's smooth rate limiter
	// (ratelimiter.NewSmoothWithMaxRate, v0.9.8) at one permit per
	// nanosecond: TryAcquirePermit, which takes the limiter's mutex and
	// reads its stopwatch (time.Since). At this rate a permit is always
	// free by the time a caller asks.
	failsafeSmooth = path{name: "FailsafeSmooth", setup: setupFailsafeSmooth}
	// failsafeBulkhead is failsafe-go's bulkhead (bulkhead.New, v0.9.8)
	// with room for 1<<20 executions: TryAcquirePermit and ReleasePermit,
	// a send into and a receive from a buffered channel.
	failsafeBulkhead = path{name: "FailsafeBulkhead", setup: setupFailsafeBulkhead}
	// sluiceConcurrency is Entry+Exit on a resource whose only rule is a
	// concurrency rule of 1<<20 in flight: the bulkhead's job in sluice.
	sluiceConcurrency = path{name: "SluiceConcurrency", setup: setupSluiceConcurrency}
	// sluiceWatched is SluiceOneRule on a resource that the Prometheus
	// exporter (adapters/prometheus) reads: a registry with the engine's
	// collector is gathered once before the timer starts and then once a
	// second by a goroutine the path owns and stops. A read resource's
	// exits time a sample of their response times (the first 16 of each
	// 100 ms, one in 16 beyond, one in 64 beyond 1,024), so some Exits
	// read the clock.
	sluiceWatched = path{name: "SluiceWatched", setup: setupSluiceWatched}
	// sluiceBlockedClock is SluiceBlocked on the system clock: Entry
	// refused by a QPS rule of one per second. The one entry a second that
	// the rule admits is exited and the call made again, so every operation
	// ends in a refusal (one extra Entry+Exit a second).
	sluiceBlockedClock = path{name: "SluiceBlockedClock", blocked: true, setup: setupSluiceBlockedClock}
)

func setupFailsafeSmooth() (func() func() error, func(), error) {
	l := ratelimiter.NewSmoothWithMaxRate[any](time.Nanosecond)
	return same(func() error {
		if !l.TryAcquirePermit() {
			return errDenied
		}
		return nil
	}), func() {}, nil
}

func setupFailsafeBulkhead() (func() func() error, func(), error) {
	b := bulkhead.New[any](1 << 20)
	return same(func() error {
		if !b.TryAcquirePermit() {
			return errDenied
		}
		b.ReleasePermit()
		return nil
	}), func() {}, nil
}

func setupSluiceConcurrency() (func() func() error, func(), error) {
	g := sluice.New()
	rule := rules.Flow{Resource: resource, Metric: rules.Concurrency, Threshold: 1 << 20}
	if err := g.LoadRules(rules.Set{Flow: []rules.Flow{rule}}); err != nil {
		_ = g.Close()
		return nil, nil, err
	}
	return same(entryExit(g)), closer(g), nil
}

// scrapeEvery is how often the watched path's exporter is gathered.
const scrapeEvery = time.Second

func setupSluiceWatched() (func() func() error, func(), error) {
	g := sluice.New()
	if err := g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: resource, Threshold: rules.MaxThreshold}}}); err != nil {
		_ = g.Close()
		return nil, nil, err
	}
	op := entryExit(g)
	if err := op(); err != nil { // the resource exists before the first scrape
		_ = g.Close()
		return nil, nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(sluiceprom.NewCollector(g))
	if err := gatherResource(reg); err != nil {
		_ = g.Close()
		return nil, nil, err
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(scrapeEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_, _ = reg.Gather()
			}
		}
	}()
	return same(op), func() {
		close(stop)
		wg.Wait()
		_ = g.Close()
	}, nil
}

// gatherResource gathers reg and checks that it reports resource.
func gatherResource(reg *prometheus.Registry) error {
	mfs, err := reg.Gather()
	if err != nil {
		return err
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "resource" && l.GetValue() == resource {
					return nil
				}
			}
		}
	}
	return fmt.Errorf("the exporter reports no metric of %q", resource)
}

func setupSluiceBlockedClock() (func() func() error, func(), error) {
	g := sluice.New()
	if err := g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: resource, Threshold: 1}}}); err != nil {
		_ = g.Close()
		return nil, nil, err
	}
	return same(func() error {
		for {
			p, err := g.Entry(resource)
			if err != nil {
				return err
			}
			p.Exit()
		}
	}), closer(g), nil
}

// entryExit is Entry+Exit of resource on g.
func entryExit(g *sluice.Engine) func() error {
	return func() error {
		p, err := g.Entry(resource)
		if err != nil {
			return err
		}
		p.Exit()
		return nil
	}
}
