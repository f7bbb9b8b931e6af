package slots_test

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/slots"
)

// readOnly is a custom slot: while set, it refuses the entries of resources
// that write.
type readOnly struct{ on bool }

func (r *readOnly) Check(e *slots.Entry) *sluice.BlockError {
	if r.on && !strings.HasPrefix(e.Resource, "GET ") {
		return &sluice.BlockError{Reason: "read-only maintenance"}
	}
	return nil
}

// A slots.Checker runs after the built-in rules on every entry of the engine
// it is registered with; a refusal without a Type is a custom one.
func ExampleChecker() {
	engine := sluice.New()
	defer engine.Close()
	if err := engine.RegisterSlot(&readOnly{on: true}, 0); err != nil {
		panic(err)
	}
	for _, res := range []string{"GET /orders", "POST /orders"} {
		p, err := engine.Entry(res)
		if err != nil {
			var be *sluice.BlockError
			errors.As(err, &be)
			fmt.Println(res, "refused:", be.Reason)
			continue
		}
		fmt.Println(res, "served")
		p.Exit()
	}
	// Output:
	// GET /orders served
	// POST /orders refused: read-only maintenance
}
