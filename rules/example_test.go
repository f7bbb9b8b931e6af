package rules_test

import (
	"errors"
	"fmt"

	"github.com/sluice-go/sluice/rules"
)

// Decode reads a rule file's text; a rule the engine would refuse is an
// error that names the rule and the field.
func ExampleDecode() {
	set, err := rules.Decode([]byte(`
flow:
  - resource: GET /orders
    threshold: 100
`), rules.YAML)
	if err != nil {
		panic(err)
	}
	fmt.Println(set.Flow[0].Resource, set.Flow[0].Threshold)

	_, err = rules.Decode([]byte("flow:\n  - resource: GET /orders\n    threshold: -1\n"), rules.YAML)
	var re *rules.Error
	if errors.As(err, &re) {
		fmt.Println("refused:", re.Kind, re.Resource, re.Field)
	}
	// Output:
	// GET /orders 100
	// refused: flow GET /orders Threshold
}
