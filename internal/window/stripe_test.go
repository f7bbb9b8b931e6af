package window

import (
	"fmt"
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

// TestStripedNodeEqualsPlain feeds the same seeded timeline to a node that
// counts in stripes (each pass and exit through a stripe the timeline
// picks) and to one that does not, and compares the figures the engine's
// checks read: the sums with and without the current bucket, FreeAt,
// RecentMinRT, the maximum completion rate, and a WindowCache over each
// (Sums and Best, cold and warm), with clock steps within a bucket, across
// one, and past the one-second window and the RT memory.
func TestStripedNodeEqualsPlain(t *testing.T) {
	steps := []time.Duration{0, 30 * time.Millisecond, 70 * time.Millisecond, 5 * time.Millisecond, 250 * time.Millisecond, time.Second, 1100 * time.Millisecond, 3 * time.Second}
	for seed := uint64(1); seed <= 4; seed++ {
		rng := rand.New(rand.NewPCG(seed, 5))
		plain, striped := NewNode(), NewNode()
		st := striped.stripe()
		wp, ws := NewWindowCache(plain), NewWindowCache(striped)
		now := int64(time.Hour) + rng.Int64N(int64(BucketWidth))
		for i := range conformance.Steps(600) {
			now += int64(steps[rng.IntN(len(steps))]) + rng.Int64N(int64(time.Millisecond))
			ep := now / int64(BucketWidth)
			s := &st.stripe[rng.IntN(len(st.stripe))]
			batch := 1 + rng.Int64N(4)
			rt := rng.Int64N(int64(200 * time.Millisecond))
			failed := rng.IntN(5) == 0
			plain.AddPass(now, batch)
			striped.passStriped(st, s, ep, uint64(batch), batch)
			if rng.IntN(2) == 0 {
				plain.AddComplete(now, rt, batch, failed)
				striped.completeStriped(s, ep, rt/1000, batch, failed)
			} else {
				plain.AddCompleteUntimed(now, batch, failed)
				striped.untimedStriped(s, ep, uint64(batch), batch, failed)
			}
			at := fmt.Sprintf("seed %d step %d", seed, i)
			for _, m := range []Metric{Pass, Complete, Error, RT, Untimed} {
				require.Equal(t, plain.Sum(now, m), striped.Sum(now, m), "Sum %d %s", m, at)
				require.Equal(t, plain.SumBefore(now, m), striped.SumBefore(now, m), "SumBefore %d %s", m, at)
			}
			require.Equal(t, plain.FreeAt(now, Pass, 7), striped.FreeAt(now, Pass, 7), at)
			require.Equal(t, plain.Concurrency(), striped.Concurrency(), at)
			require.Equal(t, plain.MaxCompletePerSecond(now), striped.MaxCompletePerSecond(now), at)
			pr, pok := plain.RecentMinRT(now)
			sr, sok := striped.RecentMinRT(now)
			require.Equal(t, pok, sok, at)
			require.Equal(t, pr, sr, at)
			for range 2 { // a cold read (fill) and a warm one
				p1, c1, r1 := wp.Sums(now)
				p2, c2, r2 := ws.Sums(now)
				require.Equal(t, [3]uint64{p1, c1, r1}, [3]uint64{p2, c2, r2}, "Sums %s", at)
				m1, n1, ok1 := wp.Best(now)
				m2, n2, ok2 := ws.Best(now)
				require.Equal(t, [2]uint64{m1, n1}, [2]uint64{m2, n2}, "Best %s", at)
				require.Equal(t, ok1, ok2, at)
			}
		}
	}
}

// TestStripeOlderReadingKeepsItsBucket: a caller whose clock reading is a
// bucket older than the one its stripe holds (another goroutine on the same
// P read the clock later and wrote first) counts in its own bucket, through
// the second-level window's slot, as on a node without stripes.
func TestStripeOlderReadingKeepsItsBucket(t *testing.T) {
	n := NewNode()
	st := n.stripe()
	s := &st.stripe[0]
	const ep = 100
	at := func(e int64) int64 { return e * int64(BucketWidth) }
	n.passStriped(st, s, ep+1, 1, 1)
	n.passStriped(st, s, ep, 2, 2)
	n.completeStriped(s, ep+1, 900, 1, false)
	n.completeStriped(s, ep, 300, 2, true)
	require.Equal(t, uint64(2), n.Bucket(at(ep), Pass))
	require.Equal(t, uint64(1), n.Bucket(at(ep+1), Pass))
	require.Equal(t, uint64(2), n.Bucket(at(ep), Complete))
	require.Equal(t, uint64(2), n.Bucket(at(ep), Error))
	require.Equal(t, uint64(600), n.Bucket(at(ep), RT))
	require.Equal(t, uint64(900), n.Bucket(at(ep+1), RT))
	h := n.sec.Value(ep, MinRT)
	require.Equal(t, uint64(300), h, "the older bucket's minimum is its own")
	require.Equal(t, uint64(3), n.Sum(at(ep+1), Pass))
	require.Equal(t, int64(0), n.Concurrency())
}

// TestStripedCallsLeaveSharedWordsAlone: once a node has its stripes, a
// pass and an exit in a bucket its stripe already holds write neither the
// concurrency word nor any word of the second-level window (the maximum
// concurrency is written at the stripe's first pass of the bucket only,
// while it rises): the lines every call wrote before, which the cores then
// passed back and forth, are not written per call.
func TestStripedCallsLeaveSharedWordsAlone(t *testing.T) {
	n := NewNode()
	n.stripe()
	now := int64(time.Hour) + int64(BucketWidth)/2
	n.AddPass(now, 1) // the stripe's first pass of the bucket, and its first exit
	n.AddCompleteUntimed(now, 1, false)
	conc := n.concurrency.Load()
	var before [len(n.secWords)]uint64
	for i := range n.secWords {
		before[i] = n.secWords[i].Load()
	}
	for range 1000 {
		n.AddPass(now, 1)
		n.AddCompleteUntimed(now, 1, false)
		if w := n.AddCompleteSampled(now, 0, false); w > 0 { // batch 0: counts nothing
			n.AddSampledRT(now, int64(time.Millisecond), w)
		}
	}
	require.Equal(t, conc, n.concurrency.Load())
	for i := range n.secWords {
		require.Equal(t, before[i], n.secWords[i].Load(), "word %d of the second-level window", i)
	}
	require.Equal(t, uint64(1001), n.Sum(now, Pass))
	require.Equal(t, uint64(1001), n.Sum(now, Complete))
	require.Zero(t, n.Concurrency())
}
