package window

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sampleModel is the reference for the RT sample readers get (see
// SampleFirst): requests numbered from one in each 100 ms bucket in the
// order their exits are counted; an exit is timed for itself while its
// first request is among the first SampleFirst of its bucket, and else
// for SampleEvery requests per multiple of SampleEvery among its numbers.
type sampleModel struct {
	counted map[int64]int64 // requests counted by bucket
	estRT   int64           // the estimated RT sum, µs
	trueRT  int64           // the true RT sum, µs
	minRT   map[int64]int64 // the smallest timed RT by bucket, µs
}

func (m *sampleModel) exit(now, rt, batch int64) {
	b := now / int64(BucketWidth)
	before := m.counted[b]
	after := before + batch
	m.counted[b] = after
	us := rt / 1000
	m.trueRT += us * batch
	w := batch
	if before >= SampleFirst {
		w = 0
		for k := before + 1; k <= after; k++ { // request numbers, one by one
			period := int64(SampleEvery)
			if k > SampleWide {
				period = SampleSparse
			}
			if k%period == 0 {
				w += period
			}
		}
	}
	if w == 0 {
		return
	}
	m.estRT += us * w
	if v, ok := m.minRT[b]; !ok || us < v {
		m.minRT[b] = us
	}
}

// TestSampledRTAgainstModel drives a node with exits of random response
// times and batches on a manual timeline, some seconds quiet (fewer than
// SampleFirst exits a bucket) and some busy, and checks: every count
// exact; the RT sum and each bucket's MinRT equal the model's sample; a
// quiet bucket's RT exact; and the estimated mean RT within 5 % of the
// true one over the busy seconds (about 1,900 timed exits of 30,000, whose
// standard error is about 1.3 % here).
func TestSampledRTAgainstModel(t *testing.T) {
	n := NewNode()
	m := &sampleModel{counted: map[int64]int64{}, minRT: map[int64]int64{}}
	rng := rand.New(rand.NewPCG(7, 11))
	now := int64(time.Hour)
	var complete, failed uint64
	for i := 0; i < 30000; i++ {
		if i%3000 == 0 {
			now += int64(2 * time.Second) // a new second
		}
		now += int64(rng.IntN(30)) * int64(time.Microsecond)
		rt := int64(200+rng.IntN(1800)) * int64(time.Microsecond)
		batch := int64(1)
		if rng.IntN(10) == 0 {
			batch = int64(1 + rng.IntN(40))
		}
		fail := rng.IntN(7) == 0
		complete += uint64(batch)
		if fail {
			failed += uint64(batch)
		}
		m.exit(now, rt, batch)
		if w := n.AddCompleteSampled(now, batch, fail); w > 0 {
			n.AddSampledRT(now, rt, w)
		}
	}
	require.Equal(t, complete, n.Total(now, Complete))
	require.Equal(t, failed, n.Total(now, Error))
	require.Equal(t, uint64(m.estRT), n.Total(now, RT), "the RT sum is the model's sample")
	for b, want := range m.minRT {
		if b >= (now-int64(time.Second))/int64(BucketWidth) {
			got, ok := n.MinRT(b*int64(BucketWidth) + int64(BucketWidth) - 1)
			require.True(t, ok)
			require.LessOrEqual(t, got, want) // the window's minimum over the buckets up to b
		}
	}
	est, truth := float64(m.estRT), float64(m.trueRT)
	require.InDelta(t, 1, est/truth, 0.05, "estimated RT sum %v µs, true %v µs", est, truth)

	// A quiet bucket: every exit timed, RT and MinRT exact.
	q := NewNode()
	at := int64(time.Hour)
	var sum uint64
	for i := int64(0); i < SampleFirst; i++ {
		rt := (100 + 7*i) * int64(time.Microsecond)
		sum += uint64(rt / 1000)
		w := q.AddCompleteSampled(at, 1, false)
		require.Equal(t, int64(1), w)
		q.AddSampledRT(at, rt, w)
	}
	require.Equal(t, sum, q.Sum(at, RT))
	got, ok := q.MinRT(at)
	require.True(t, ok)
	require.Equal(t, int64(100), got)
	require.Equal(t, float64(sum)/SampleFirst, q.AvgRT(at))
}

// TestSampledCountsExactUnderConcurrency has 64 goroutines exit into one
// bucket at once (-race): the count is exact, and so is the weight the
// sample stands for (every request number is counted once, whatever the
// interleaving), so with one response time for all the RT sum is exact.
func TestSampledCountsExactUnderConcurrency(t *testing.T) {
	n := NewNode()
	at := int64(time.Hour)
	const goroutines, each = 64, 500
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if w := n.AddCompleteSampled(at, 1, i%2 == 0); w > 0 {
					n.AddSampledRT(at, 3*int64(time.Millisecond), w)
				}
			}
		}()
	}
	wg.Wait()
	const total = goroutines * each
	require.Equal(t, uint64(total), n.Sum(at, Complete))
	require.Equal(t, uint64(total/2), n.Sum(at, Error))
	// SampleFirst requests for themselves, then SampleEvery for each
	// multiple of SampleEvery above SampleFirst up to SampleWide, and
	// SampleSparse for each multiple of SampleSparse above: total, since
	// total is a multiple of SampleSparse.
	weight := SampleFirst + (SampleWide/SampleEvery-SampleFirst/SampleEvery)*SampleEvery +
		(total/SampleSparse-SampleWide/SampleSparse)*SampleSparse
	require.Equal(t, total, weight)
	require.Equal(t, uint64(3000*weight), n.Sum(at, RT))
	require.Equal(t, 3000.0*float64(weight)/total, n.AvgRT(at))
	require.Equal(t, int64(0), n.Concurrency()+total)
}

// TestSampleWeightRepresentsEachRequestOnce: a batch that straddles
// SampleWide weighs both ranges, and over any split of a bucket's request
// numbers beyond the first SampleFirst into batches the weights add up to
// the count whenever it ends on a multiple of SampleSparse: each request is
// represented once, by the next multiple of its range's period.
func TestSampleWeightRepresentsEachRequestOnce(t *testing.T) {
	tests := []struct {
		before, after uint64
		want          int64
	}{
		{0, 1, 1},
		{15, 40, 25}, // starts among the first: the whole batch for itself
		{16, 31, 0},
		{16, 32, SampleEvery},
		{1000, 1100, 2*SampleEvery + SampleSparse}, // 1008, 1024; 1088
		{1024, 1087, 0},
		{1087, 1088, SampleSparse},
		{2000, 2000 + 10*SampleSparse, 10 * SampleSparse},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, sampleWeight(tt.before, tt.after, tt.after-tt.before), "sampleWeight(%d, %d)", tt.before, tt.after)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		end := uint64(SampleWide + SampleSparse*(1+rng.IntN(200)))
		var sum int64
		for n := uint64(0); n < SampleFirst; n++ { // singles: a batch that
			// starts among the first SampleFirst weighs itself whole, and
			// one reaching past them overlaps the next multiple's share
			sum += sampleWeight(n, n+1, 1)
		}
		for n := uint64(SampleFirst); n < end; {
			b := min(uint64(1+rng.IntN(100)), end-n)
			sum += sampleWeight(n, n+b, b)
			n += b
		}
		require.Equal(t, int64(end), sum, "round %d", round)
	}
}
