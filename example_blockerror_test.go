package sluice_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

// A refused entry returns a *sluice.BlockError, which errors.Is matches with
// sluice.ErrBlocked and errors.As reads: which kind of rule refused, what it
// measured against which threshold, and when to try again.
func ExampleBlockError() {
	engine := sluice.New(sluice.WithClock(sluicetest.NewManualClock(0)))
	defer engine.Close()
	if err := engine.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "search", Threshold: 1}}}); err != nil {
		panic(err)
	}
	p, _ := engine.Entry("search")
	p.Exit()

	_, err := engine.Entry("search")
	fmt.Println(errors.Is(err, sluice.ErrBlocked))
	var be *sluice.BlockError
	if errors.As(err, &be) {
		fmt.Println(be.Type, be.Resource, be.Threshold, be.RetryAfter <= time.Second)
	}
	// Output:
	// true
	// flow search 1 true
}
