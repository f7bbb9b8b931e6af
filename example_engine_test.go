package sluice_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

// An engine guards a resource with the rules loaded into it: here at most
// two entries a second. A refused entry's error says which rule refused it.
// The manual clock makes the example exact; programs use sluice.New().
func Example() {
	clk := sluicetest.NewManualClock(0)
	engine := sluice.New(sluice.WithClock(clk))
	defer engine.Close()
	if err := engine.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "GET /orders", Threshold: 2}}}); err != nil {
		panic(err)
	}

	for i := 1; i <= 3; i++ {
		p, err := engine.Entry("GET /orders")
		var be *sluice.BlockError
		if errors.As(err, &be) {
			fmt.Printf("request %d refused by a %s rule at %v a second\n", i, be.Type, be.Threshold)
			continue
		}
		fmt.Printf("request %d served\n", i)
		p.Exit()
	}
	clk.Advance(time.Second)
	if p, err := engine.Entry("GET /orders"); err == nil {
		fmt.Println("a second later: served")
		p.Exit()
	}
	// Output:
	// request 1 served
	// request 2 served
	// request 3 refused by a flow rule at 2 a second
	// a second later: served
}
