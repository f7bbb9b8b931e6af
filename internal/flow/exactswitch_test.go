package flow

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/rules"
)

// TestSwitchingExactKeepsTheCount reloads a 10/s reject rule with Exact
// switched on, then off, right after it admitted its limit: neither reload
// admits a fresh interval's worth. Switching on, the window's admissions
// are logged at the end of their bucket (here 100 ms after they were
// admitted, at most): the next pass is one second after that. Switching
// off, the log's admissions go into the window's buckets as they were.
func TestSwitchingExactKeepsTheCount(t *testing.T) {
	const ms = int64(time.Millisecond)
	nf := nodes(nil)
	r := rules.Flow{Resource: "r", Threshold: 10}
	build := func(old map[string][]*Controller, exact bool) map[string][]*Controller {
		r.Exact = exact
		cs, err := Build([]rules.Flow{r}, old, nf, nil)
		require.NoError(t, err)
		return cs
	}
	admit := func(cs map[string][]*Controller, now int64, n int) int {
		got := 0
		for i := 0; i < n; i++ {
			if be, _ := check(t, cs["r"][0], now, 1); be == nil {
				got++
			}
		}
		return got
	}
	cs := build(nil, false)
	require.Equal(t, 10, admit(cs, 550*ms, 20))

	cs = build(cs, true)
	assert.Equal(t, 0, admit(cs, 600*ms, 20), "Exact switched on: the ten of 550 ms still count")
	assert.Equal(t, 0, admit(cs, 1600*ms-2, 20), "logged at 600 ms - 1 ns, the end of their bucket")
	assert.Equal(t, 10, admit(cs, 1600*ms-1, 20))

	cs = build(cs, false)
	assert.Equal(t, 0, admit(cs, 1650*ms, 20), "Exact switched off: the ten of 1.6 s still count")
	assert.Equal(t, 0, admit(cs, 2500*ms-1, 20))
	assert.Equal(t, 10, admit(cs, 2500*ms, 20), "their bucket (1.5 s to 1.6 s) has left the window")
}
