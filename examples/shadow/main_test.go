package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRun: in shadow mode nothing is refused and the rule would refuse
// what it then refuses once enforced, 100 of the 300 requests of each
// whole second; the output is the same on every run.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out, 6))
	require.Equal(t, `second  mode      passed  refused  would-refuse
     0  shadow       300        0           100
     1  shadow       300        0           100
     2  shadow       300        0           100
     3  enforced     200      100             0
     4  enforced     200      100             0
     5  enforced     200      100             0
totals: passed 1500, refused 300, would have refused in shadow mode 300
`, out.String())
}
