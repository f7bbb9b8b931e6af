package sluice_test

import (
	"errors"
	"fmt"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
)

// Do runs a call inside an entry: it returns the refusal without calling
// the function, and otherwise the function's error, which circuit breakers
// count (a panic counts as an error too, and goes on to the caller).
func ExampleDo() {
	engine := sluice.New()
	defer engine.Close()
	if err := engine.LoadRules(rules.Set{Flow: []rules.Flow{{Metric: rules.Concurrency, Resource: "charge", Threshold: 1}}}); err != nil {
		panic(err)
	}

	err := engine.Do("charge", func() error {
		// The one slot is taken: a second, nested call is refused.
		inner := engine.Do("charge", func() error { return nil })
		fmt.Println("nested call refused:", errors.Is(inner, sluice.ErrBlocked))
		return errors.New("card declined")
	})
	fmt.Println("first call:", err)
	// Output:
	// nested call refused: true
	// first call: card declined
}
