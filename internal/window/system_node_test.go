package window

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNodeSumBefore(t *testing.T) {
	n := NewNode()
	bw := int64(BucketWidth)
	for i := int64(0); i < 12; i++ {
		n.AddPass(i*bw+1, i+1) // bucket i gets i+1
	}
	now := 11*bw + 5
	// Window at bucket 11 holds buckets 2..11 (3+...+12 = 75); before the
	// current one: 3+...+11 = 63.
	assert.Equal(t, uint64(75), n.Sum(now, Pass))
	assert.Equal(t, uint64(63), n.SumBefore(now, Pass))
	assert.Equal(t, uint64(12), n.Bucket(now, Pass))
	// In a bucket nobody has written yet, the whole window is "before".
	assert.Equal(t, uint64(3+4+5+6+7+8+9+10+11+12)-3, n.SumBefore(12*bw, Pass))
}

// TestWindowCache compares the cache with full scans of the window while
// time moves in uneven steps and counts land in every bucket.
func TestWindowCache(t *testing.T) {
	n := NewNode()
	w := NewWindowCache(n)
	now := int64(time.Hour)
	steps := []time.Duration{0, 30 * time.Millisecond, 70 * time.Millisecond, 5 * time.Millisecond, 250 * time.Millisecond, time.Second, 1100 * time.Millisecond}
	for i := 0; i < 100; i++ {
		now += int64(steps[i%len(steps)])
		n.AddPass(now, int64(i%5+1))
		n.AddComplete(now, int64(i)*int64(time.Millisecond), int64(i%3+1), false)
		for k := 0; k < 2; k++ { // a cold read (fill) and a warm one
			p, c, r := w.Sums(now)
			require.Equal(t, n.Sum(now, Pass), p, "step %d pass", i)
			require.Equal(t, n.Sum(now, Complete), c, "step %d complete", i)
			require.Equal(t, n.Sum(now, RT), r, "step %d rt", i)
		}
	}
	// A reader with an older clock reading than the cached bucket computes
	// its own sums.
	p, _, _ := w.Sums(now - int64(300*time.Millisecond))
	assert.Equal(t, n.Sum(now-int64(300*time.Millisecond), Pass), p)
}

func TestNodeRecentMinRT(t *testing.T) {
	sec := int64(time.Second)
	ms := int64(time.Millisecond)
	type done struct {
		at, rt int64 // nanoseconds
	}
	base := 100 * sec // a whole second: the memory spans [91 s, 101 s) at 100.x s
	tests := []struct {
		name   string
		give   []done
		now    int64
		want   int64 // µs
		wantOK bool
	}{
		{name: "nothing completed", now: base},
		{
			name: "current bucket",
			give: []done{{base + 10*ms, 7 * ms}, {base + 20*ms, 5 * ms}},
			now:  base + 50*ms, want: 5000, wantOK: true,
		},
		{
			name: "older than the one-second window, from the minute window",
			give: []done{{base - 8*sec, 5 * ms}, {base, 40 * ms}},
			now:  base + 500*ms, want: 5000, wantOK: true,
		},
		{
			name: "first second of the memory",
			give: []done{{base - 9*sec, 5 * ms}, {base, 40 * ms}},
			now:  base + 999*ms, want: 5000, wantOK: true,
		},
		{
			name: "left the memory",
			give: []done{{base - 9*sec, 5 * ms}, {base + sec, 40 * ms}},
			now:  base + sec, want: 40000, wantOK: true,
		},
		{
			name: "unretired one-second bucket still counts",
			// Only one add, 3 s ago: its 100 ms slot was never reset, so the
			// value never moved to the minute window.
			give: []done{{base - 3*sec, 9 * ms}},
			now:  base, want: 9000, wantOK: true,
		},
		{
			name: "unretired and too old",
			give: []done{{base - 10*sec, 9 * ms}},
			now:  base,
		},
		{
			name: "sub-millisecond",
			give: []done{{base, 1500}, {base + 300*ms, 2 * ms}},
			now:  base + 400*ms, want: 1, wantOK: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := NewNode()
			for _, d := range tt.give {
				n.AddPass(d.at, 1)
				n.AddComplete(d.at, d.rt, 1, false)
			}
			got, ok := n.RecentMinRT(tt.now)
			require.Equal(t, tt.wantOK, ok, "RecentMinRT ok")
			assert.Equal(t, tt.want, got, "RecentMinRT(%v)", time.Duration(tt.now))
			mc, rt, ok := NewWindowCache(n).Best(tt.now)
			require.Equal(t, tt.wantOK, ok, "Best ok")
			assert.Equal(t, uint64(tt.want), rt, "Best minRT")
			assert.Equal(t, uint64(n.MaxCompletePerSecond(tt.now))/SecondBuckets, mc, "Best maxComplete")
		})
	}
}

// TestWindowCacheBest compares Best with full scans while time moves in
// uneven steps, RTs rise (as under a growing queue) and fall, and counts
// land in every bucket.
func TestWindowCacheBest(t *testing.T) {
	n := NewNode()
	w := NewWindowCache(n)
	now := int64(time.Hour)
	steps := []time.Duration{0, 30 * time.Millisecond, 70 * time.Millisecond, 5 * time.Millisecond, 250 * time.Millisecond, time.Second, 1100 * time.Millisecond, 3 * time.Second}
	for i := 0; i < 300; i++ {
		now += int64(steps[i%len(steps)])
		rt := int64(5+(i*7)%60) * int64(time.Millisecond)
		if i > 150 {
			rt = int64(200-i%40) * int64(time.Millisecond)
		}
		n.AddPass(now, int64(i%5+1))
		n.AddComplete(now, rt, int64(i%3+1), false)
		for k := 0; k < 2; k++ { // a cold read (fill) and a warm one
			mc, minRT, ok := w.Best(now)
			wantRT, wantOK := n.RecentMinRT(now)
			require.Equal(t, wantOK, ok, "step %d", i)
			require.Equal(t, uint64(wantRT), minRT, "step %d minRT", i)
			require.Equal(t, uint64(n.MaxCompletePerSecond(now))/SecondBuckets, mc, "step %d maxComplete", i)
		}
	}
	// A reader with an older clock reading than the cached bucket computes
	// its own figures.
	old := now - int64(300*time.Millisecond)
	mc, _, _ := w.Best(old)
	assert.Equal(t, uint64(n.MaxCompletePerSecond(old))/SecondBuckets, mc)
	// Quiet for longer than the memory: nothing left.
	_, _, ok := w.Best(now + int64(MinRTMemory) + int64(time.Second))
	assert.False(t, ok)
}
