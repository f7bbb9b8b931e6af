package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the example (about 7 s): both watches fire, and nothing is
// left running.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for about 7 s; run without -short")
	}
	var out bytes.Buffer
	require.NoError(t, run(&out), out.String())
	t.Log(out.String())
}
