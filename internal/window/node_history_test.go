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
	n.History(0, 5*time.Minute)          // a reader asks: the node keeps its five minutes from now on
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
	v, _ := n.minute.Load().valueOK(0, RT)
	require.Equal(t, wantUS, v)
	// Adds at 64 s and 65.6 s: the second reuses the first's slot of the
	// second-level window, which retires it into the minute window's slot
	// of second 0, which moves second 0 into the history window.
	for _, at := range []int64{int64(64 * time.Second), int64(65600 * time.Millisecond)} {
		n.AddPass(at, 1)
		n.AddComplete(at, int64(time.Millisecond), 1, false)
	}
	_, ok := n.hist.Load().valueOK(0, RT)
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

// TestHistoryMaxConcurrency: overlapping entries across bucket and second
// boundaries give each second's exact maximum, whether it was reached at a
// pass of the second or carried in from before it, through the minute and
// history windows.
func TestHistoryMaxConcurrency(t *testing.T) {
	n := new(Node)
	n.InitHistory(5 * time.Minute)
	n.History(0, 5*time.Minute) // a reader asks: the node keeps its five minutes from now on
	ms := func(v int64) int64 { return v * int64(time.Millisecond) }
	type step struct {
		at    int64 // ms
		batch int64 // > 0: a pass; < 0: an exit
	}
	steps := []step{
		{50, 1}, {150, 2}, {250, -1}, // second 0: 1, 3, 2
		{950, 1}, {999, 1}, // 3, 4: second 0's maximum, at its last bucket
		{1050, -2}, {1500, -1}, // second 1: 4 in flight at its start, none passes
		// second 2: one in flight all along.
		{3000, 5}, {3000, -5}, // second 3: 6 at its first instant
		{3999, 1},  // 2 in its last nanoseconds
		{4000, -1}, // second 4: 2 at its start
		// seconds 5 and 6: one in flight.
		{7200, 3}, // the current second, when read at 7.5 s
	}
	for _, s := range steps {
		if s.batch > 0 {
			n.AddPass(ms(s.at), s.batch)
		} else {
			n.AddComplete(ms(s.at), 0, -s.batch, false)
		}
	}
	maxima := func(now int64, since time.Duration) []int64 {
		var out []int64
		for _, s := range n.History(now, since) {
			out = append(out, s.MaxConcurrency)
		}
		return out
	}
	want := []int64{4, 4, 1, 6, 2, 1, 1}
	assert.Equal(t, want, maxima(ms(7500), time.Minute))
	assert.Equal(t, want[5:], maxima(ms(7500), 2*time.Second), "a short read works out the start from the later seconds")
	// Later, from the minute window and then the history window: the
	// entries of 7.2 s are still in flight.
	for _, now := range []int64{ms(30_000), ms(100_000), ms(250_000)} {
		got := maxima(now, 5*time.Minute)
		first := int(max(0, now/int64(time.Second)-300))
		for i, v := range got {
			sec := first + i
			switch {
			case sec < len(want):
				assert.Equal(t, want[sec], v, "second %d at %v", sec, time.Duration(now))
			default:
				assert.Equal(t, int64(4), v, "second %d at %v", sec, time.Duration(now))
			}
		}
	}
	// Entries in every bucket of seconds 128 to 137 reuse the minute
	// window's slots of seconds 0 to 9, which moves those into the history
	// window.
	for s := int64(128); s < 138; s++ {
		for b := int64(0); b < SecondBuckets; b++ {
			at := s*int64(time.Second) + b*int64(BucketWidth)
			n.AddPass(at, 1)
			n.AddComplete(at, 0, 1, false)
		}
	}
	got := maxima(ms(200_000), 5*time.Minute)
	assert.Equal(t, want, got[:len(want)])
	assert.Equal(t, int64(5), got[130], "4 in flight and one entry at a time")
	_, ok := n.hist.Load().valueOK(3, MaxConcurrency)
	require.True(t, ok, "second 3 is in the history window")
}

// TestHistoryTakesMemoryWhenUsed: a node makes no minute window until a
// reader asks for one (History, MinuteSum), and no history window until
// History asks for more than the minute window holds; seconds that would
// have moved into a window not made yet are in the totals, and History
// serves every second that reaches a window after it is made.
func TestHistoryTakesMemoryWhenUsed(t *testing.T) {
	n := new(Node)
	n.InitHistory(5 * time.Minute)
	sec := func(s int64) int64 { return s * int64(time.Second) }
	for s := int64(0); s < 100; s++ {
		n.AddPass(sec(s), 1)
		n.AddComplete(sec(s), 0, 1, false)
	}
	require.Nil(t, n.minute.Load(), "no reader: no minute window")
	assert.Equal(t, uint64(100), n.Total(sec(100), Pass))
	require.Len(t, n.History(sec(100), time.Minute), 60)
	require.NotNil(t, n.minute.Load(), "a read makes the minute window")
	require.Nil(t, n.hist.Load(), "a read within the minute makes no history window")
	for s := int64(100); s < 200; s++ {
		n.AddPass(sec(s), 1)
	}
	assert.Equal(t, uint64(60), n.MinuteSum(sec(200)-1, Pass))
	h := n.History(sec(200), 5*time.Minute)
	require.NotNil(t, n.hist.Load(), "a long read makes the history window")
	var got uint64
	for _, s := range h {
		got += s.Pass
	}
	// What the two windows still hold: 64 seconds in the minute window, and
	// eight in the second-level one (one add per second, at a bucket start:
	// seconds s and s+8 share a slot of its ring of sixteen).
	assert.Equal(t, uint64(64+8), got)
	for s := int64(200); s < 500; s++ {
		n.AddPass(sec(s), 1)
	}
	h = n.History(sec(500), 5*time.Minute)
	require.Len(t, h, 300)
	for i, s := range h {
		assert.Equal(t, uint64(1), s.Pass, "second %d", 200+i)
	}
	assert.Equal(t, uint64(500), n.Total(sec(500), Pass), "every pass in exactly one place")
}
