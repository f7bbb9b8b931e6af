package window

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/internal/conformance"
)

// TestStripedNodeMatchesModel is TestNodeExitsMatchModel on a node that
// makes its stripes in the middle of a bucket and then spreads its passes
// and exits over every stripe: each figure a reader computes (one-second
// sums, AvgRT, MinRT, maximum completion rate, minute sums, totals,
// History, Snapshot, concurrency) equals the model's, including counts
// that sit in a stripe's word for longer than the second-level window
// keeps their bucket.
func TestStripedNodeMatchesModel(t *testing.T) { runNodeModel(t, true) }

// TestStripedCountsExactUnderConcurrency: 64 goroutines pass and exit
// (timed, untimed and sampled) on one node at a shared manual clock that
// crosses bucket and second boundaries, while the node makes its stripes
// part way, in the middle of a bucket. Once they are done every count is
// exact: the totals, the concurrency, the one-second sums and each
// second of History against the sums of what the goroutines did by
// bucket.
func TestStripedCountsExactUnderConcurrency(t *testing.T) {
	defer goleak.VerifyNone(t)
	const workers = 64
	steps := conformance.Steps(400)
	n := new(Node)
	n.InitHistory(time.Minute)
	n.armMinute()
	var clock atomic.Int64
	clock.Store(int64(time.Second) + int64(BucketWidth)/2)
	type rec struct{ pass, done map[int64]uint64 } // by bucket
	recs := make([]rec, workers)
	var wg sync.WaitGroup
	var started atomic.Int64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			r := rec{map[int64]uint64{}, map[int64]uint64{}}
			for i := range steps {
				if started.Add(1) == workers*int64(steps)/3 {
					n.stripe() // mid-run, mid-bucket: others are writing
				}
				now := clock.Add(rng.Int64N(int64(20 * time.Microsecond)))
				batch := 1 + rng.Int64N(3)
				n.AddPass(now, batch)
				r.pass[now/int64(BucketWidth)] += uint64(batch)
				end := clock.Load()
				switch i % 3 {
				case 0:
					n.AddComplete(end, int64(time.Millisecond), batch, false)
				case 1:
					n.AddCompleteUntimed(end, batch, false)
				default:
					if w := n.AddCompleteSampled(end, batch, false); w > 0 {
						n.AddSampledRT(end, int64(time.Millisecond), w)
					}
				}
				r.done[end/int64(BucketWidth)] += uint64(batch)
			}
			recs[w] = r
		}()
	}
	wg.Wait()
	require.True(t, n.Striped())
	pass, done := map[int64]uint64{}, map[int64]uint64{}
	var totalPass, totalDone uint64
	for _, r := range recs {
		for ep, v := range r.pass {
			pass[ep] += v
			totalPass += v
		}
		for ep, v := range r.done {
			done[ep] += v
			totalDone += v
		}
	}
	now := clock.Load()
	require.Equal(t, totalPass, n.Total(now, Pass))
	require.Equal(t, totalDone, n.Total(now, Complete))
	require.Equal(t, int64(totalPass)-int64(totalDone), n.Concurrency())
	ep := now / int64(BucketWidth)
	var winPass, winDone uint64
	for e := ep - SecondBuckets + 1; e <= ep; e++ {
		winPass, winDone = winPass+pass[e], winDone+done[e]
	}
	require.Equal(t, winPass, n.Sum(now, Pass))
	require.Equal(t, winDone, n.Sum(now, Complete))
	for _, s := range n.History(now, time.Minute) {
		var p, d uint64
		for e := s.Start / int64(BucketWidth); e < (s.Start+int64(time.Second))/int64(BucketWidth); e++ {
			p, d = p+pass[e], d+done[e]
		}
		require.Equal(t, p, s.Pass, "second %d", s.Start/int64(time.Second))
		require.Equal(t, d, s.Complete, "second %d", s.Start/int64(time.Second))
	}
}

// TestNodeStripesOnContention: a node makes its stripes once stripeAfter
// of its passes contend in one bucket, not before, and contention spread
// over buckets does not add up.
func TestNodeStripesOnContention(t *testing.T) {
	n := NewNode()
	for i := range stripeAfter - 1 {
		n.contention(int64(i)) // one a bucket
	}
	require.False(t, n.Striped())
	for range stripeAfter - 1 {
		n.contention(1000)
	}
	require.False(t, n.Striped())
	n.contention(1000)
	require.True(t, n.Striped())
}
