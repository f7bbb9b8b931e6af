package window

import (
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type testMetric uint8

const (
	mCount testMetric = iota
	mMin
)

func newTestArray(t *testing.T, retire RetireFunc[testMetric]) *LeapArray[testMetric] {
	t.Helper()
	a, err := NewLeapArray(time.Second, 10, []Kind{Sum, Min}, retire)
	require.NoError(t, err)
	return a
}

const ms = int64(time.Millisecond)

func TestNewLeapArrayRejectsBadShapes(t *testing.T) {
	tests := []struct {
		name     string
		interval time.Duration
		buckets  int
		kinds    []Kind
	}{
		{"zero buckets", time.Second, 0, []Kind{Sum}},
		{"indivisible interval", time.Second + 1, 10, []Kind{Sum}},
		{"zero interval", 0, 10, []Kind{Sum}},
		{"no metrics", time.Second, 10, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewLeapArray[testMetric](tt.interval, tt.buckets, tt.kinds, nil)
			require.Error(t, err)
		})
	}
}

func TestLeapArraySumAtBucketBoundaries(t *testing.T) {
	// One event at the first and one at the last nanosecond of each 100 ms
	// bucket for 2 s, written in time order; each row reads the window at
	// give after writing every event up to give.
	var events []int64
	for b := int64(0); b < 20; b++ {
		events = append(events, b*100*ms, b*100*ms+100*ms-1)
	}
	tests := []struct {
		give int64
		want uint64
	}{
		{give: 0, want: 1},
		{give: 100*ms - 1, want: 2},
		{give: 999 * ms, want: 19},          // buckets 0..9, the last one half
		{give: 1000*ms - 1, want: 20},       // buckets 0..9
		{give: 1000 * ms, want: 19},         // buckets 1..10: bucket 0 left
		{give: 1100*ms - 1, want: 20},       // buckets 1..10
		{give: 1500*ms + 3, want: 19},       // buckets 6..15; 0..5 still in the ring, not counted
		{give: 1600 * ms, want: 19},         // buckets 7..16: slot 0 reused
		{give: 2000*ms - 1, want: 20},       // buckets 10..19
		{give: 2000 * ms, want: 18},         // buckets 11..20, 20 empty
		{give: 2150 * ms, want: 16},         // buckets 12..21
		{give: 2899 * ms, want: 2},          // bucket 19 only
		{give: 2900 * ms, want: 0},          // everything left
		{give: 10_000 * ms, want: 0},        // long after
		{give: 1_000_000_000 * ms, want: 0}, // far after: every slot's epoch is stale
	}
	for _, tt := range tests {
		a := newTestArray(t, nil)
		for _, at := range events {
			if at <= tt.give {
				a.Add(at, mCount, 1)
			}
		}
		assert.Equal(t, tt.want, a.Sum(tt.give, mCount), "Sum(%v)", time.Duration(tt.give))
	}
}

func TestLeapArrayCountsAWriterOneBucketAhead(t *testing.T) {
	a := newTestArray(t, nil)
	a.Add(1050*ms, mCount, 3) // a writer whose clock is in bucket 10
	assert.Equal(t, uint64(3), a.Sum(999*ms, mCount), "a reader still in bucket 9 sees it")
	assert.Equal(t, uint64(0), a.Sum(899*ms, mCount), "two buckets ahead is not lag, it is the future")
}

func TestLeapArrayResetRetiresOldValueOnce(t *testing.T) {
	var retired []uint64
	var starts []int64
	a := newTestArray(t, func(m testMetric, start int64, v uint64) {
		require.Equal(t, mCount, m)
		retired = append(retired, v)
		starts = append(starts, start)
	})
	a.Add(50*ms, mCount, 7)
	a.Add(60*ms, mCount, 3)
	// The same slot a ring later (16 slots of 100 ms): resets and retires
	// bucket 0's 10.
	a.Add(1650*ms, mCount, 1)
	require.Equal(t, []uint64{10}, retired)
	require.Equal(t, []int64{0}, starts)
	require.Equal(t, uint64(1), a.Sum(1650*ms, mCount))
	// A late writer still in bucket 0 counts into the newer bucket, not lost.
	a.Add(70*ms, mCount, 1)
	require.Equal(t, uint64(2), a.Sum(1650*ms, mCount))
	require.Equal(t, []uint64{10}, retired)
}

func TestLeapArrayMin(t *testing.T) {
	a := newTestArray(t, nil)
	_, ok := a.MinOf(0, mMin)
	require.False(t, ok)
	a.Add(10*ms, mMin, 40)
	a.Add(20*ms, mMin, 0) // zero is a value, not "empty"
	a.Add(150*ms, mMin, 30)
	v, ok := a.MinOf(150*ms, mMin)
	require.True(t, ok)
	require.Equal(t, uint64(0), v)
	v, ok = a.MinOf(1050*ms, mMin) // bucket 0 left the window
	require.True(t, ok)
	require.Equal(t, uint64(30), v)
	_, ok = a.MinOf(1150*ms, mMin)
	require.False(t, ok)
}

// TestNodeNoCountLostAcrossResets sends a known number of events from many
// goroutines whose clocks interleave across hundreds of bucket rollovers, so
// that resets race adds constantly; every event must be found exactly once in
// the node's totals.
func TestNodeNoCountLostAcrossResets(t *testing.T) {
	const (
		workers = 16
		events  = 20000
	)
	n := NewNode()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < events; i++ {
				// Time advances 1 ms per event, each worker offset so the
				// goroutines straddle bucket boundaries differently; about
				// 200 s of simulated time, 2,000 second-level and 200
				// minute-level rollovers per slot.
				now := int64(i)*ms + int64(w)*7*ms
				n.AddPass(now, 1)
				n.AddComplete(now, 1000, 1, i%3 == 0)
				if i%5 == 0 {
					n.AddBlock(now, 2, core.BlockFlow)
				}
			}
		}(w)
	}
	wg.Wait()
	end := int64(events+workers*7) * ms
	assert.Equal(t, uint64(workers*events), n.Total(end, Pass))
	assert.Equal(t, uint64(workers*events), n.Total(end, Complete))
	assert.Equal(t, uint64(workers*((events+2)/3)), n.Total(end, Error))
	assert.Equal(t, uint64(workers*events/5*2), n.Total(end, Block))
	assert.Equal(t, uint64(workers*events), n.Total(end, RT), "1 µs per completion")
	assert.Equal(t, int64(0), n.Concurrency())
}

func TestNodeWindowsAndSnapshot(t *testing.T) {
	n := NewNode()
	for i := int64(0); i < 10; i++ {
		now := i * 100 * ms
		n.AddPass(now, 2)
		n.AddComplete(now+5*ms, int64(i+1)*int64(time.Millisecond), 2, i == 9)
	}
	now := 999 * ms
	require.Equal(t, uint64(20), n.Sum(now, Pass))
	require.Equal(t, float64(20), n.QPS(now, Pass))
	mn, ok := n.MinRT(now)
	require.True(t, ok)
	require.Equal(t, int64(1000), mn, "1 ms in µs")
	require.InDelta(t, 5500.0, n.AvgRT(now), 0.001, "mean of 1..10 ms in µs")
	require.Equal(t, float64(20), n.MaxCompletePerSecond(now), "2 per 100 ms bucket")
	// A minute later the second window is empty but the minute window and
	// totals keep everything.
	later := 30 * int64(time.Second)
	require.Equal(t, uint64(0), n.Sum(later, Pass))
	require.Equal(t, uint64(20), n.MinuteSum(later, Pass))
	s := n.Snapshot(later)
	require.Equal(t, uint64(20), s.MinutePass)
	require.Equal(t, uint64(20), s.TotalPass)
	require.Equal(t, uint64(2), s.TotalError)
	// Past the minute, only the totals remain.
	much := 200 * int64(time.Second)
	require.Equal(t, uint64(0), n.MinuteSum(much, Pass))
	require.Equal(t, uint64(20), n.Total(much, Pass))
}

// TestClaimWindowAfterRelease checks the window's ownership: one owner at a
// time, and a new owner finds it empty.
func TestClaimWindowAfterRelease(t *testing.T) {
	n := NewNode()
	w := n.ClaimWindow()
	require.Same(t, n.OwnWindow(), w)
	require.Nil(t, n.ClaimWindow(), "held")
	ok, _ := w.TryAdd(7, 5, 10)
	require.True(t, ok)
	n.ReleaseWindow()
	w2 := n.ClaimWindow()
	require.Same(t, w, w2)
	require.Zero(t, w2.Sum(7), "a new owner starts empty")
}

// TestLeapArrayMax: a Max metric keeps each bucket's largest value, starts
// afresh when its slot is reused (retiring the old maximum), and a racing
// raise never loses the largest value.
func TestLeapArrayMax(t *testing.T) {
	type retired struct {
		start int64
		v     uint64
	}
	var got []retired
	a, err := NewLeapArray(time.Second, 10, []Kind{Sum, Max}, func(m testMetric, start int64, v uint64) {
		if m == 1 {
			got = append(got, retired{start, v})
		}
	})
	require.NoError(t, err)
	for _, v := range []uint64{3, 7, 5} {
		a.Add(10*ms, 1, v)
	}
	a.RaiseAt(a.Slot(0), 0, 1, 6)
	a.RaiseAt(a.Slot(0), 0, 1, 0)  // nothing
	a.RaiseAt(a.Slot(0), 0, 1, -4) // nothing
	assert.Equal(t, uint64(7), a.Value(0, 1))
	a.RaiseAt(a.Slot(1), 1, 1, 2)
	a.RaiseAt(a.Slot(16), 16, 1, 1) // reuses bucket 0's slot
	assert.Equal(t, uint64(1), a.Value(16, 1))
	assert.Equal(t, []retired{{0, 7}}, got)
	a.RaiseAt(a.Slot(17), 17, 1, int64(MaxAdd)+5)
	assert.Equal(t, MaxAdd, a.Value(17, 1), "clamped")

	var wg sync.WaitGroup
	for g := 1; g <= 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				a.RaiseAt(a.Slot(40), 40, 1, int64(g*1000+i))
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, uint64(8999), a.Value(40, 1))
}
