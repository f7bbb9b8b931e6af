package window

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRecordLimitHistory: History gives each second the limit last recorded
// at or before its end, carried over quiet seconds, 0 before the first
// record; a gap longer than the ring, and a record older than the newest
// (counted in the newest second), keep it exact; a node without history
// records nothing.
func TestRecordLimitHistory(t *testing.T) {
	sec := int64(time.Second)
	var n Node
	n.InitHistory(5 * time.Second) // a ring of 7 seconds
	n.RecordLimit(2*sec+5, 10)
	n.RecordLimit(2*sec+9, 12) // the same second: the later one counts
	n.RecordLimit(4*sec, 8)
	limits := func(now int64) []int64 {
		var out []int64
		for _, s := range n.History(now, 5*time.Second) {
			out = append(out, s.AdaptiveLimit)
		}
		return out
	}
	assert.Equal(t, []int64{0, 0, 12, 12, 8}, limits(5*sec))
	assert.Equal(t, []int64{12, 8, 8, 8, 8}, limits(8*sec))
	// Twenty quiet seconds, then a move: the seconds between keep 8.
	n.RecordLimit(28*sec+1, 30)
	assert.Equal(t, []int64{8, 8, 30, 30, 30}, limits(31*sec))
	// A late record (an older reading of another goroutine's clock) counts
	// in the newest second.
	n.RecordLimit(27*sec, 31)
	assert.Equal(t, []int64{8, 8, 31, 31, 31}, limits(31*sec))

	var none Node
	none.Init()
	none.RecordLimit(sec, 5)
	assert.False(t, none.HasLimitHistory())
	var quiet Node
	quiet.InitHistory(time.Minute)
	require.Len(t, quiet.History(3*sec, time.Minute), 3)
	assert.False(t, quiet.HasLimitHistory())
}
