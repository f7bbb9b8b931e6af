// Command circuit-breaker shows a circuit breaker cutting off a flaky
// dependency and probing it back to health.
//
// The dependency fails every call for its first 600 ms, then recovers. The
// breaker (error ratio above 50% over 500 ms, with at least 5 calls) opens
// within the first few calls, refuses calls for 300 ms at a time, lets 2
// probes through each time it turns half-open, and closes once both probes
// succeed. Every state change is printed as it happens, with what caused it
// (the listener's Snapshot value, whose meaning depends on the transition,
// spelled out); the program runs for about 1.5 s and exits.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/ruledef"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

var errUnavailable = errors.New("inventory: service unavailable")

// inventory is the flaky dependency: down until healthyAt.
type inventory struct{ healthyAt time.Time }

func (s inventory) reserve(context.Context) error {
	if time.Now().Before(s.healthyAt) {
		return errUnavailable
	}
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "circuit-breaker:", err)
		os.Exit(1)
	}
}

func run() error {
	// Callers that give up are not the dependency's fault.
	g := sluice.New(sluice.WithErrorClassifier(func(err error) bool {
		return !errors.Is(err, context.Canceled)
	}))
	defer g.Close()

	start := time.Now()
	elapsed := func() time.Duration { return time.Since(start).Round(time.Millisecond) }
	fmt.Println("  time  transition              cause")
	g.Subscribe(func(e stat.Event) {
		if e.Kind == stat.EventBreaker {
			fmt.Printf("%6v  %-9s -> %-9s  %s\n", elapsed(), e.From, e.To, describe(e))
		}
	})

	if err := g.LoadRules(rules.Set{CircuitBreaker: []rules.CircuitBreaker{{
		Resource:         "inventory.reserve",
		Strategy:         rules.ErrorRatio,
		Threshold:        0.5,
		MinRequestAmount: 5,
		StatInterval:     500 * time.Millisecond,
		RetryTimeout:     300 * time.Millisecond,
		Probes:           2,
	}}}); err != nil {
		return err
	}

	dep := inventory{healthyAt: start.Add(600 * time.Millisecond)}
	var passed, failed, refused int
	for time.Since(start) < 1500*time.Millisecond {
		switch ok, err := callInventory(g, dep); {
		case !ok:
			refused++
		case err != nil:
			failed++
		default:
			passed++
		}
		time.Sleep(5 * time.Millisecond)
	}

	st := g.CircuitBreakerStates()[0]
	fmt.Printf("succeeded: %d, failed: %d, refused by the breaker: %d; breaker now %s\n", passed, failed, refused, st.State)
	if st.State != stat.BreakerClosed {
		return fmt.Errorf("breaker is %s, want closed after the dependency recovered", st.State)
	}
	return nil
}

// callInventory makes one protected call. It reports whether the breaker let
// it through and, if so, the dependency's error.
func callInventory(g *sluice.Engine, dep inventory) (bool, error) {
	e, err := g.Entry("inventory.reserve", sluice.WithTraffic(sluice.Outbound))
	if err != nil {
		return false, nil // errors.Is(err, sluice.ErrBlocked): serve a fallback
	}
	defer e.Exit()
	err = dep.reserve(context.Background())
	e.SetError(err)
	return true, err
}

// describe says what caused a breaker's transition, reading e.Value as the
// event defines it (see stat.EventBreaker).
func describe(e stat.Event) string {
	r, _ := e.Rule.(rules.CircuitBreaker) // zero fields mean the defaults
	probes := max(r.Probes, 1)
	if r.StatInterval == 0 {
		r.StatInterval = ruledef.StatInterval
	}
	switch {
	case e.From == "closed" && e.To == "open":
		least := r.MinRequestAmount
		if least == 0 {
			least = ruledef.MinRequestAmount
		}
		switch r.Strategy {
		case rules.ErrorCount:
			return fmt.Sprintf("%g errors in the last %v reached the threshold %g; refusing calls for %v",
				e.Value, r.StatInterval, r.Threshold, r.RetryTimeout)
		case rules.ErrorRatio:
			return fmt.Sprintf("%.0f%% of the calls in the last %v failed (%d calls at least), over the threshold %.0f%%; refusing calls for %v",
				100*e.Value, r.StatInterval, least, 100*r.Threshold, r.RetryTimeout)
		default:
			return fmt.Sprintf("%.0f%% of the calls in the last %v were slower than %v (%d calls at least), over the threshold %.0f%%; refusing calls for %v",
				100*e.Value, r.StatInterval, r.MaxAllowedRT, least, 100*r.Threshold, r.RetryTimeout)
		}
	case e.To == "half-open":
		return fmt.Sprintf("%v since opening: the next %d calls are probes", r.RetryTimeout, probes)
	case e.From == "half-open" && e.To == "open":
		rt := time.Duration(e.Value * float64(time.Millisecond))
		if rt >= r.StatInterval {
			return fmt.Sprintf("a probe was out %v, not less than the %v interval: given up as failed; refusing calls for %v",
				rt.Round(time.Millisecond), r.StatInterval, r.RetryTimeout)
		}
		return fmt.Sprintf("a probe failed after %s ms; refusing calls for another %v",
			strconv.FormatFloat(e.Value, 'f', 2, 64), r.RetryTimeout)
	case e.To == "closed":
		return fmt.Sprintf("%g of %d probes succeeded; counting calls again from an empty window", e.Value, probes)
	}
	return fmt.Sprintf("value %g", e.Value)
}
