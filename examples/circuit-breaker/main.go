// Command circuit-breaker shows a circuit breaker cutting off a flaky
// dependency and probing it back to health.
//
// The dependency fails every call for its first 600 ms, then recovers. The
// breaker (error ratio above 50% over 500 ms, with at least 5 calls) opens
// within the first few calls, refuses calls for 300 ms at a time, lets 2
// probes through each time it turns half-open, and closes once both probes
// succeed. Every state change is printed as it happens; the program runs for
// about 1.5 s and exits.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
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
	g.AddBreakerListener(func(t sluice.BreakerTransition) {
		fmt.Printf("%6v  %-9s -> %-9s (snapshot %.2f)\n", elapsed(), t.From, t.To, t.Snapshot)
	})

	if _, err := g.LoadCircuitBreakerRules([]rules.CircuitBreaker{{
		Resource:         "inventory.reserve",
		Strategy:         rules.ErrorRatio,
		Threshold:        0.5,
		MinRequestAmount: 5,
		StatInterval:     500 * time.Millisecond,
		RetryTimeout:     300 * time.Millisecond,
		Probes:           2,
	}}); err != nil {
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
	if st.State != sluice.BreakerClosed {
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
