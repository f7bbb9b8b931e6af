package window

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHistoryKeepsLargeSums: a second whose RT sum is larger than one Add
// carries keeps it whole through the minute and history windows into the
// totals.
func TestHistoryKeepsLargeSums(t *testing.T) {
	n := new(Node)
	n.InitHistory(5 * time.Minute)
	const rt = int64(1000 * time.Second) // per entry, below the per-entry cap
	for b := int64(0); b < 10; b++ {     // one entry in each 100 ms bucket of second 0
		at := b * int64(BucketWidth)
		n.AddPass(at, 1)
		n.AddComplete(at, rt, 1, false)
	}
	wantUS := uint64(10 * rt / 1000)
	require.Greater(t, wantUS, MaxAdd)
	// An add in every slot of the second-level window, at 10 s: all of
	// second 0 moves into the minute window (10^10 µs in one bucket).
	for b := int64(0); b < secRing; b++ {
		at := int64(10*time.Second) + b*int64(BucketWidth)
		n.AddPass(at, 1)
		n.AddComplete(at, int64(time.Millisecond), 1, false)
	}
	v, _ := n.minute.valueOK(0, RT)
	require.Equal(t, wantUS, v)
	// Adds at 64 s and 65.6 s: the second reuses the first's slot of the
	// second-level window, which retires it into the minute window's slot
	// of second 0, which moves second 0 into the history window.
	for _, at := range []int64{int64(64 * time.Second), int64(65600 * time.Millisecond)} {
		n.AddPass(at, 1)
		n.AddComplete(at, int64(time.Millisecond), 1, false)
	}
	_, ok := n.hist.valueOK(0, RT)
	require.True(t, ok, "second 0 is in the history window")
	for _, now := range []int64{int64(100 * time.Second), int64(200 * time.Second)} {
		h := n.History(now, 5*time.Minute)
		require.NotEmpty(t, h)
		assert.Equal(t, int64(0), h[0].Start)
		assert.Equal(t, uint64(10), h[0].Complete, "at %v", time.Duration(now))
		assert.Equal(t, time.Duration(rt), h[0].AvgRT, "at %v", time.Duration(now))
	}
	assert.Equal(t, wantUS+(secRing+2)*1000, n.Total(int64(200*time.Second), RT), "and the 1 ms of each later entry")
}
