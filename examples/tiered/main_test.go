package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRun: admissions follow the response time, unlimited -> 500 -> 200
// -> unlimited, through the moves the engine reports, the same on every
// run.
func TestRun(t *testing.T) {
	var out, again bytes.Buffer
	require.NoError(t, run(&out))
	require.NoError(t, run(&again))
	require.Equal(t, out.String(), again.String())
	t.Log("\n" + out.String())
	lines := strings.Split(out.String(), "\n")
	var admitted []string
	for _, l := range lines {
		if f := strings.Fields(l); len(f) == 5 && f[0] != "second" {
			admitted = append(admitted, f[2])
		}
	}
	// Seconds 2, 5, 8 and 11, the last of each RT, are settled.
	require.Len(t, admitted, 12)
	assert.Equal(t, []string{"1000", "500", "200", "1000"}, []string{admitted[2], admitted[5], admitted[8], admitted[11]})
	assert.Contains(t, out.String(), "step 0 -> 1")
	assert.Contains(t, out.String(), "step 1 -> 2")
}
