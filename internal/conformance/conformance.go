// Package conformance holds what the conformance tests of several packages
// share: how many steps to run. The tests themselves live beside the code
// they check (docs/design/conformance.md lists them).
package conformance

import (
	"os"
	"strconv"
)

// Scale is the factor by which conformance tests multiply their default
// number of steps: the value of SLUICE_CONFORMANCE_SCALE when it is a
// positive integer (make conformance sets 20), otherwise 1.
func Scale() int {
	n, err := strconv.Atoi(os.Getenv("SLUICE_CONFORMANCE_SCALE"))
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// Steps is n times Scale.
func Steps(n int) int { return n * Scale() }
