package window

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/conformance"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNodeLargeBatchesKeepMinuteExact: batches of MaxAdd (WithBatch's
// largest) fill each 100 ms bucket of a second past what one 32-bit count,
// and what one Add of the LeapArray before it (MaxAdd, which clamped a
// retiring bucket's value and lost the rest), can carry. The minute sums,
// History and the totals keep the second whole, in the minute window and
// after it moved on to the history window.
func TestNodeLargeBatchesKeepMinuteExact(t *testing.T) {
	n := new(Node)
	n.InitHistory(5 * time.Minute)
	n.History(0, 5*time.Minute) // a reader asks: every window exists
	const per = 5               // adds per bucket: 5·2^30, below a bucket counter's 2^36 - 2^32
	big := int64(MaxAdd)
	for b := int64(0); b < SecondBuckets; b++ {
		at := b * int64(BucketWidth)
		for range per {
			n.AddPass(at, big)
			n.AddBlock(at, big, core.BlockType(1))
			n.AddComplete(at, int64(time.Millisecond), big, true)
		}
	}
	want := uint64(SecondBuckets * per * MaxAdd)
	require.Greater(t, want, uint64(1)<<32)
	// One add in every slot of the second-level window, at 10 s: second 0
	// retires, bucket by bucket, into the minute window.
	for b := int64(0); b < secRing; b++ {
		at := int64(10*time.Second) + b*int64(BucketWidth)
		n.AddPass(at, 1)
		n.AddBlock(at, 1, core.BlockType(1))
		n.AddComplete(at, int64(time.Millisecond), 1, true)
	}
	now := int64(11700 * time.Millisecond)
	v, ok := n.minute.Load().valueOK(0, Pass)
	require.True(t, ok)
	require.Equal(t, want, v, "in the minute window")
	for _, m := range []Metric{Pass, Block, Complete, Error} {
		assert.Equal(t, want+secRing, n.MinuteSum(now, m), "MinuteSum %d", m)
		assert.Equal(t, want+secRing, n.Total(now, m), "Total %d", m)
	}
	s := n.Snapshot(now)
	assert.Equal(t, want+secRing, s.MinutePass)
	assert.Equal(t, want+secRing, s.TotalError)
	h := n.History(now, 5*time.Minute)
	require.Equal(t, int64(0), h[0].Start)
	assert.Equal(t, want, h[0].Pass)
	assert.Equal(t, want, h[0].Block)
	assert.Equal(t, want, h[0].Complete)
	assert.Equal(t, want, h[0].Error)
	// Adds at 64 s and 65.6 s: second 64 retires and pushes second 0 on to
	// the history window, whole.
	for _, at := range []int64{int64(64 * time.Second), int64(65600 * time.Millisecond)} {
		n.AddPass(at, 1)
	}
	now = int64(100 * time.Second)
	_, ok = n.minute.Load().valueOK(0, Pass)
	require.False(t, ok, "second 0 left the minute window")
	h = n.History(now, 5*time.Minute)
	require.Equal(t, int64(0), h[0].Start)
	assert.Equal(t, want, h[0].Pass)
	assert.Equal(t, want, h[0].Error)
	assert.Equal(t, want+secRing+2, n.Total(now, Pass))
	assert.Equal(t, want+secRing, n.Total(now, Block))
}

// TestNodeSnapshotReaderMatchesModel: a node read by Snapshot, MinuteSum
// and Total only (an exporter's reads) keeps the minute window's counts and
// no extras, and every figure those read matches the reference model,
// across bucket and second boundaries and idles longer than the minute
// window; the RT that passes the minute window by counts in the totals.
func TestNodeSnapshotReaderMatchesModel(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 61))
			n := new(Node)
			n.InitHistory(5 * time.Minute)
			n.Snapshot(0) // the reader's first call makes the minute window
			m := newNodeModel()
			now := int64(0)
			for i := 0; i < conformance.Steps(6000); i++ {
				switch r := rng.IntN(40); {
				case r == 0: // an idle past the minute window
					now += int64(time.Duration(50+rng.IntN(40)) * time.Second)
				case r < 8: // to a bucket boundary, or a nanosecond either side
					next := (now/int64(BucketWidth) + 1) * int64(BucketWidth)
					now = max(now, next+int64(rng.IntN(3))-1)
				case r < 38:
					now += rng.Int64N(int64(120 * time.Millisecond))
				}
				batch := 1 + rng.Int64N(3)
				switch k := rng.IntN(10); {
				case k < 4:
					n.AddPass(now, batch)
					m.pass(now, batch)
				case k < 5:
					by := core.BlockType(rng.IntN(blockTypes))
					n.AddBlock(now, batch, by)
					m.blockEv(now, batch, by)
				default:
					failed := rng.IntN(4) == 0
					rt := rng.Int64N(int64(50 * time.Millisecond))
					if timed := rng.IntN(2) == 0; timed {
						n.AddComplete(now, rt, batch, failed)
						m.exit(now, rt, batch, failed, true)
					} else {
						n.AddCompleteUntimed(now, batch, failed)
						m.exit(now, rt, batch, failed, false)
					}
				}
				if i%41 == 0 {
					compareSnapshotReader(t, n, m, now)
				}
			}
			compareSnapshotReader(t, n, m, now)
			require.False(t, n.minute.Load().hasExtras(), "no reader asked for RT by the second")
		})
	}
}

func compareSnapshotReader(t *testing.T, n *Node, m *nodeModel, now int64) {
	t.Helper()
	at := fmt.Sprintf("at %v", time.Duration(now))
	sec := now / int64(time.Second)
	for _, x := range []Metric{Pass, Block, Complete, Error} {
		require.Equal(t, m.span(sec-MinuteBuckets+1, sec, x), n.MinuteSum(now, x), "MinuteSum %d %s", x, at)
	}
	for _, x := range []Metric{Pass, Block, Complete, Error, RT} {
		require.Equal(t, m.total[x], n.Total(now, x), "Total %d %s", x, at)
	}
	s := n.Snapshot(now)
	require.Equal(t, m.span(sec-MinuteBuckets+1, sec, Pass), s.MinutePass, at)
	require.Equal(t, m.span(sec-MinuteBuckets+1, sec, Block), s.MinuteBlock, at)
	require.Equal(t, m.span(sec-MinuteBuckets+1, sec, Complete), s.MinuteComplete, at)
	require.Equal(t, m.span(sec-MinuteBuckets+1, sec, Error), s.MinuteError, at)
	require.Equal(t, m.total[Pass], s.TotalPass, at)
	require.Equal(t, m.total[Block], s.TotalBlock, at)
	require.Equal(t, m.total[Complete], s.TotalComplete, at)
	require.Equal(t, m.total[Error], s.TotalError, at)
	require.Equal(t, time.Duration(m.total[RT])*time.Microsecond, s.TotalRT, at)
	require.Equal(t, m.blockedBy, s.BlockedBy, at)
}

// TestHistoryAfterSnapshotMakesExtras: a resource that Snapshot read keeps
// counts and the RT sum only; the first History makes the extras, and from
// then on the seconds that reach the minute window carry their MinRT and
// MaxConcurrency too. A second that reached it before shows its counts and
// its AvgRT, exact (a partial RT sum over a whole count would not be), and
// no MinRT; the totals keep every RT.
func TestHistoryAfterSnapshotMakesExtras(t *testing.T) {
	n := new(Node)
	n.InitHistory(time.Minute)
	n.Snapshot(0)
	ms := int64(time.Millisecond)
	exit := func(at, rt int64) {
		n.AddPass(at, 1)
		n.AddComplete(at, rt, 1, false)
	}
	exit(100*ms, 5*ms)  // bucket 1, slot 1 of the second-level window
	exit(1700*ms, 7*ms) // bucket 17, slot 1: second 0 retires, counts only
	require.False(t, n.minute.Load().hasExtras())
	h := n.History(2*int64(time.Second), time.Minute)
	require.True(t, n.minute.Load().hasExtras())
	require.Len(t, h, 2)
	assert.Equal(t, uint64(1), h[0].Pass)
	assert.Equal(t, uint64(1), h[0].Complete)
	assert.Equal(t, 5*time.Millisecond, h[0].AvgRT, "retired before the extras were made: the RT sum is kept")
	assert.Zero(t, h[0].MinRT, "retired before the extras were made")
	assert.Equal(t, 7*time.Millisecond, h[1].AvgRT, "in the second-level window")
	exit(3300*ms, 9*ms) // bucket 33, slot 1: second 1 retires, with its RT
	_, inMinute := n.minute.Load().valueOK(1, RT)
	require.True(t, inMinute)
	now := 4 * int64(time.Second)
	h = n.History(now, time.Minute)
	require.Len(t, h, 4)
	assert.Equal(t, uint64(1), h[0].Pass)
	assert.Equal(t, 5*time.Millisecond, h[0].AvgRT)
	assert.Zero(t, h[0].MinRT)
	assert.Equal(t, 7*time.Millisecond, h[1].AvgRT)
	assert.Equal(t, 7*time.Millisecond, h[1].MinRT)
	assert.Equal(t, int64(1), h[1].MaxConcurrency)
	assert.Equal(t, 9*time.Millisecond, h[3].AvgRT)
	assert.Equal(t, uint64(5000+7000+9000), n.Total(now, RT), "µs: every RT in the totals")
	assert.Equal(t, uint64(3), n.Total(now, Pass))
}

// TestNodeSecondPastHistoryCounter: a second larger than a counter of the
// history window holds (2^36 - 2^32) stays whole in the minute window and,
// once it moves on, saturates its History figure and keeps the totals
// exact: the rest goes into the totals (it was lost, and one retiring
// bucket's count was clamped to MaxAdd, before).
func TestNodeSecondPastHistoryCounter(t *testing.T) {
	n := new(Node)
	n.InitHistory(5 * time.Minute)
	n.History(0, 5*time.Minute)
	const per = 8 // 8·2^30 a bucket, 80·2^30 the second
	for b := int64(0); b < SecondBuckets; b++ {
		for range per {
			n.AddPass(b*int64(BucketWidth), int64(MaxAdd))
		}
	}
	want := uint64(SecondBuckets * per * MaxAdd)
	require.Greater(t, want, valueMask-valueHeadroom)
	for _, at := range []int64{int64(10 * time.Second), int64(64 * time.Second), int64(65600 * time.Millisecond)} {
		for b := int64(0); b < secRing; b++ {
			n.AddPass(at+b*int64(BucketWidth), 1)
		}
	}
	now := int64(100 * time.Second)
	_, ok := n.minute.Load().valueOK(0, Pass)
	require.False(t, ok, "second 0 moved on to the history window")
	h := n.History(now, 5*time.Minute)
	assert.Equal(t, valueMask-valueHeadroom, h[0].Pass, "saturated")
	assert.Equal(t, want+3*secRing, n.Total(now, Pass), "exact")
	// And on into the totals: the history window's counter retires.
	for b := int64(0); b < secRing; b++ {
		n.AddPass(int64(256*time.Second)+b*int64(BucketWidth), 1)
	}
	for b := int64(0); b < secRing; b++ {
		n.AddPass(int64(330*time.Second)+b*int64(BucketWidth), 1)
	}
	now = int64(400 * time.Second)
	assert.Equal(t, want+5*secRing, n.Total(now, Pass))
}
