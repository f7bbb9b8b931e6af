package main

import (
	"errors"
	"fmt"
	"math/rand"
	"sync/atomic"
	"testing"
	"time"

	sentinel "github.com/alibaba/sentinel-golang/api"
	sentinelbase "github.com/alibaba/sentinel-golang/core/base"
	sentinelflow "github.com/alibaba/sentinel-golang/core/flow"
	sentinellog "github.com/alibaba/sentinel-golang/logging"
	"go.uber.org/ratelimit"
	"golang.org/x/time/rate"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

// path is one admission check measured by the comparison. setup builds the
// limiter outside the timer and returns a function that makes the operation
// to time (once per goroutine, so an operation may keep state of its own)
// and a function that releases what setup started. The operation returns nil
// when the call was admitted and an error when it was refused.
type path struct {
	name    string // benchmark name, as in BenchmarkSluiceOneRule
	blocked bool   // the operation is meant to be refused every time
	setup   func() (newOp func() func() error, done func(), err error)
}

// same is a newOp for an operation without state of its own.
func same(op func() error) func() func() error { return func() func() error { return op } }

// errDenied is what the x/time/rate operations return when Allow says no.
var errDenied = errors.New("benchcompare: denied")

// resource is the resource every sluice path enters.
const resource = "GET /items"

// user is the param rule's argument. It is built at run time, as a real
// request's value would be, so that the compiler cannot treat it as a
// constant.
var user = fmt.Sprint("user-", 42)

var (
	// sluiceOneRule is Entry+Exit on sluice.New() with one passing QPS
	// rule (budget: <= 150 ns/op and 0 allocs/op, serial and parallel).
	sluiceOneRule = path{name: "SluiceOneRule", setup: setupSluiceOneRule}
	// sluiceAllKinds is Entry+Exit with WithArgs(user) on a resource with a
	// rule of every kind: flow QPS, isolation, circuit breaker, param on the
	// string argument, and a system rule (budget: <= 400 ns/op, 0 allocs).
	sluiceAllKinds = path{name: "SluiceAllKinds", setup: setupSluiceAllKinds}
	// sluiceBlocked is Entry on a resource whose QPS rule refuses it
	// (budget: <= 200 ns/op, <= 1 alloc/op: the *BlockError).
	sluiceBlocked = path{name: "SluiceBlocked", blocked: true, setup: setupSluiceBlocked}
	// sluiceManyResources is Entry+Exit on 10,000 resources with a passing
	// QPS rule each, visited in round-robin (each goroutine from its own
	// offset), so that every call finds a resource that 9,999 calls have
	// pushed out of the nearer caches (budget: <= 2x one resource).
	sluiceManyResources = path{name: "SluiceManyResources", setup: manyResourcesSetup(manyResources, false)}
	// sentinelOneRule is sentinel-golang's api.Entry+Exit, inbound, on a
	// resource with one passing QPS reject rule: SluiceOneRule's path in
	// sentinel-golang. Nothing is initialised with sentinel's Init*, so no
	// metric log writer or system collector runs beside it.
	sentinelOneRule = path{name: "SentinelOneRule", setup: setupSentinelOneRule}
	// rateInfAllow is x/time/rate Allow on an infinite limiter, which
	// returns right after taking the limiter's mutex.
	rateInfAllow = path{name: "RateInfAllow", setup: setupRateInf}
	// rateAllow is x/time/rate Allow on a finite limiter whose burst never
	// runs out: the full token-bucket arithmetic under the mutex.
	rateAllow = path{name: "RateAllow", setup: setupRate}
	// ratelimitTake is go.uber.org/ratelimit Take at one permit per
	// nanosecond without slack. Take paces callers by sleeping; at this rate
	// the next permit is due before a caller could ask for it, so what is
	// measured is Take's bookkeeping (a clock read and a CAS loop), not a
	// wait. Only two parallel callers landing within the same nanosecond
	// make one of them sleep (for 1 ns, plus the scheduler's overhead);
	// counted with a wrapping clock on a 2-core machine, that happened to
	// fewer than 2 in 10,000 parallel calls, and never serially.
	ratelimitTake = path{name: "RatelimitTake", setup: setupRatelimit}
)

// The paths of the scale and param goals (docs/design/benchmarks.md): Entry+Exit
// over 100,000 resources round-robin and over 10,000 and 100,000 in a Zipf
// walk (s = 1.1, each goroutine its own seeded walk), and a resource whose
// param rule tracks 1,000,000 live values, visited in a scattered order,
// beside the same Entry with the same typed argument on a resource without
// a param rule.
var (
	sluiceResources100k     = path{name: "SluiceResources100k", setup: manyResourcesSetup(100_000, false)}
	sluiceResourcesZipf10k  = path{name: "SluiceResourcesZipf10k", setup: manyResourcesSetup(10_000, true)}
	sluiceResourcesZipf100k = path{name: "SluiceResourcesZipf100k", setup: manyResourcesSetup(100_000, true)}
	sluiceParamNone         = path{name: "SluiceParamNone", setup: paramSetup(false)}
	sluiceParam1M           = path{name: "SluiceParam1M", setup: paramSetup(true)}
)

// paths lists every path in the order the program prints them.
var paths = []path{
	sluiceOneRule, sluiceAllKinds, sluiceBlocked, sluiceManyResources,
	sluiceResources100k, sluiceResourcesZipf10k, sluiceResourcesZipf100k,
	sluiceParamNone, sluiceParam1M,
	sentinelOneRule, rateInfAllow, rateAllow, ratelimitTake,
	sluiceAdaptive, failsafeAdaptive,
	sluiceBudget,
	failsafeSmooth, failsafeBulkhead, sluiceConcurrency, sluiceWatched, sluiceBlockedClock,
}

// manyResources is how many resources sluiceManyResources visits.
const manyResources = 10000

func setupSluiceOneRule() (func() func() error, func(), error) {
	g := sluice.New()
	if err := g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: resource, Threshold: rules.MaxThreshold}}}); err != nil {
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

// newAllKindsEngine returns an engine with one rule of every kind on
// resource, each set far above any benchmark's rate so that all of them pass.
func newAllKindsEngine() (*sluice.Engine, error) {
	g := sluice.New()
	err := g.LoadRules(rules.Set{
		Flow: []rules.Flow{
			{Resource: resource, Threshold: rules.MaxThreshold},
			{Metric: rules.Concurrency, Resource: resource, Threshold: 1 << 20},
		},
		CircuitBreaker: []rules.CircuitBreaker{{
			Resource: resource, Strategy: rules.ErrorRatio, Threshold: 0.5, RetryTimeout: time.Second,
		}},
		Param: []rules.Param{{Resource: resource, Index: 0, Threshold: rules.MaxThreshold}},
		// InboundQPS needs no metrics sampler: it reads the engine's own
		// inbound node, as every inbound entry (the default) is checked.
		System: []rules.System{{Metric: rules.InboundQPS, Threshold: rules.MaxThreshold}},
	})
	if err != nil {
		_ = g.Close()
		return nil, err
	}
	return g, nil
}

func setupSluiceAllKinds() (func() func() error, func(), error) {
	g, err := newAllKindsEngine()
	if err != nil {
		return nil, nil, err
	}
	return same(func() error {
		p, err := g.Entry(resource, sluice.WithArgs(user))
		if err != nil {
			return err
		}
		p.Exit()
		return nil
	}), closer(g), nil
}

func setupSluiceBlocked() (func() func() error, func(), error) {
	// A manual clock that never moves keeps the one-per-second rule spent.
	g := sluice.New(sluice.WithClock(sluicetest.NewManualClock(0)))
	if err := g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: resource, Threshold: 1}}}); err != nil {
		_ = g.Close()
		return nil, nil, err
	}
	p, err := g.Entry(resource)
	if err != nil {
		_ = g.Close()
		return nil, nil, fmt.Errorf("first entry: %w", err)
	}
	p.Exit()
	return same(func() error {
		p, err := g.Entry(resource)
		if err != nil {
			return err
		}
		p.Exit()
		return nil
	}), closer(g), nil
}

// manyResourcesSetup is the setup of Entry+Exit over n resources with a
// passing QPS rule each, visited round-robin or, with zipf, in a Zipf walk
// (s = 1.1) whose indices are drawn before the timer starts.
//
// It is not inlined, so that the closures measured are one copy whatever
// calls the setup (in the copies inlining made, when Entry returned a
// pointer, the compiler moved each Pass to the heap: TestSluicePassNoAllocs).
//
//go:noinline
func manyResourcesSetup(n int, zipf bool) func() (func() func() error, func(), error) {
	return func() (func() func() error, func(), error) {
		names := make([]string, n)
		rs := make([]rules.Flow, n)
		for i := range names {
			names[i] = fmt.Sprintf("GET /api/v1/items/%d", i)
			rs[i] = rules.Flow{Resource: names[i], Threshold: rules.MaxThreshold}
		}
		g := sluice.New(sluice.WithLimits(sluice.Limits{Resources: n + 10, Rules: n + 10}))
		if err := g.LoadRules(rules.Set{Flow: rs}); err != nil {
			_ = g.Close()
			return nil, nil, err
		}
		var goroutines atomic.Uint64
		newOp := func() func() error {
			gi := goroutines.Add(1) - 1
			// Goroutines start far apart in the cycle and never share a counter.
			i := int(gi * 4999 % uint64(n))
			if !zipf {
				return func() error {
					p, err := g.Entry(names[i])
					if i++; i == n {
						i = 0
					}
					if err != nil {
						return err
					}
					p.Exit()
					return nil
				}
			}
			z := rand.NewZipf(rand.New(rand.NewSource(int64(gi+1))), 1.1, 1, uint64(n-1))
			walk := make([]uint32, 1<<16)
			for k := range walk {
				walk[k] = uint32(z.Uint64())
			}
			return func() error {
				p, err := g.Entry(names[walk[i&(len(walk)-1)]])
				i++
				if err != nil {
					return err
				}
				p.Exit()
				return nil
			}
		}
		return newOp, closer(g), nil
	}
}

// paramValues is how many live values sluiceParam1M's rule tracks.
const paramValues = 1_000_000

// paramSetup is the setup of Entry+Exit with a typed integer argument
// (WithIntArg), visiting paramValues values a large prime stride apart, on
// a resource with a passing QPS rule and, with param, a passing param rule
// that already tracks every value. Not inlined, as manyResourcesSetup.
//
//go:noinline
func paramSetup(param bool) func() (func() func() error, func(), error) {
	return func() (func() func() error, func(), error) {
		g := sluice.New()
		set := rules.Set{Flow: []rules.Flow{{Resource: resource, Threshold: rules.MaxThreshold}}}
		if param {
			set.Param = []rules.Param{{Resource: resource, Threshold: rules.MaxThreshold, Capacity: 2 * paramValues}}
		}
		err := g.LoadRules(set)
		if err == nil && param {
			for v := int64(0); v < paramValues && err == nil; v++ {
				var p sluice.Pass
				if p, err = g.Entry(resource, sluice.WithIntArg(0, v)); err == nil {
					p.Exit()
				}
			}
		}
		if err != nil {
			_ = g.Close()
			return nil, nil, err
		}
		var goroutines atomic.Int64
		newOp := func() func() error {
			v := goroutines.Add(1) * 500_009 % paramValues
			return func() error {
				p, err := g.Entry(resource, sluice.WithIntArg(0, v))
				if v += 7919; v >= paramValues {
					v -= paramValues
				}
				if err != nil {
					return err
				}
				p.Exit()
				return nil
			}
		}
		return newOp, closer(g), nil
	}
}

// sentinelResource is the resource of the sentinel-golang path; its rules
// are sentinel's global state, set by each setup.
const sentinelResource = "GET /items (sentinel)"

func setupSentinelOneRule() (func() func() error, func(), error) {
	sentinellog.ResetGlobalLoggerLevel(sentinellog.WarnLevel) // no "rules loaded" line on stdout
	if _, err := sentinelflow.LoadRules([]*sentinelflow.Rule{{
		Resource:               sentinelResource,
		TokenCalculateStrategy: sentinelflow.Direct,
		ControlBehavior:        sentinelflow.Reject,
		Threshold:              rules.MaxThreshold,
		StatIntervalInMs:       1000,
	}}); err != nil {
		return nil, nil, err
	}
	return same(func() error {
			e, b := sentinel.Entry(sentinelResource, sentinel.WithTrafficType(sentinelbase.Inbound))
			if b != nil {
				return fmt.Errorf("sentinel: blocked: %v", b)
			}
			e.Exit()
			return nil
		}), func() {
			_ = sentinelflow.ClearRules()
		}, nil
}

func setupRateInf() (func() func() error, func(), error) {
	return same(allow(rate.NewLimiter(rate.Inf, 1))), func() {}, nil
}

func setupRate() (func() func() error, func(), error) {
	// A burst of 1e9 refilled at 1e9/s: no benchmark can drain it.
	return same(allow(rate.NewLimiter(1e9, 1e9))), func() {}, nil
}

func setupRatelimit() (func() func() error, func(), error) {
	rl := ratelimit.New(1e9, ratelimit.WithoutSlack)
	return same(func() error {
		rl.Take()
		return nil
	}), func() {}, nil
}

func allow(l *rate.Limiter) func() error {
	return func() error {
		if !l.Allow() {
			return errDenied
		}
		return nil
	}
}

func closer(g *sluice.Engine) func() { return func() { _ = g.Close() } }

// verify builds the path and runs its operation n times, returning an error
// unless every call was admitted (or, for a blocked path, refused by a sluice
// flow rule).
func (p path) verify(n int) error {
	newOp, done, err := p.setup()
	if err != nil {
		return fmt.Errorf("%s: setup: %w", p.name, err)
	}
	defer done()
	op := newOp()
	for i := 0; i < n; i++ {
		if err := p.check(op()); err != nil {
			return fmt.Errorf("%s: call %d: %w", p.name, i, err)
		}
	}
	return nil
}

// check returns nil when err is the outcome p expects.
func (p path) check(err error) error {
	if !p.blocked {
		if err != nil {
			return fmt.Errorf("refused, want admitted: %w", err)
		}
		return nil
	}
	var be *sluice.BlockError
	if !errors.As(err, &be) {
		return fmt.Errorf("got %v, want a *sluice.BlockError", err)
	}
	if be.Type != sluice.BlockFlow {
		return fmt.Errorf("blocked by %v, want %v", be.Type, sluice.BlockFlow)
	}
	return nil
}

// run measures p serially and, when parallel, with b.RunParallel.
func (p path) run(b *testing.B, parallel bool) {
	newOp, done, err := p.setup()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(done)
	p.runOp(b, newOp, parallel)
}

// runOp is run on a path already set up: the program sets a path up once
// per measurement, not once per b.N its benchmark tries, since building
// 100,000 resources or 1,000,000 param values takes seconds.
func (p path) runOp(b *testing.B, newOp func() func() error, parallel bool) {
	b.ReportAllocs()
	b.ResetTimer()
	if !parallel {
		op := newOp()
		for i := 0; i < b.N; i++ {
			if err := op(); (err != nil) != p.blocked {
				b.Fatalf("%s: unexpected outcome %v", p.name, err)
			}
		}
		return
	}
	b.RunParallel(func(pb *testing.PB) {
		op := newOp()
		for pb.Next() {
			if err := op(); (err != nil) != p.blocked {
				b.Errorf("%s: unexpected outcome %v", p.name, err)
				return
			}
		}
	})
}
