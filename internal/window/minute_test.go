package window

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/conformance"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sec = int64(time.Second)

// retired collects what a minute window moves on, by metric and second.
type retired struct {
	mu  sync.Mutex
	got map[[2]int64]uint64 // (metric, second) -> value (MinRT: the least)
}

func newRetired() *retired { return &retired{got: map[[2]int64]uint64{}} }

func (r *retired) retire(m Metric, start int64, v uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := [2]int64{int64(m), start / sec}
	old, ok := r.got[k]
	r.got[k] = combine(m, old, ok, v)
}

// combine returns old (when ok) and v combined as metric m's kind does.
func combine(m Metric, old uint64, ok bool, v uint64) uint64 {
	switch {
	case !ok:
		return v
	case nodeKinds[m] == Min:
		return min(old, v)
	case nodeKinds[m] == Max:
		return max(old, v)
	}
	return old + v
}

// TestMinuteCountsNeverWrap: a count is a 32-bit word and its upper half,
// made the first time a count passes 2^32; it carries exactly across 2^32
// and saturates at 2^64-1 rather than wrap, in the window and in what it
// moves on.
func TestMinuteCountsNeverWrap(t *testing.T) {
	r := newRetired()
	w := newMinuteWindow(r.retire)
	w.add(Pass, 0, math.MaxUint32)
	require.Nil(t, w.hi.Load(), "no upper halves below 2^32")
	v, _ := w.valueOK(0, Pass)
	require.Equal(t, uint64(math.MaxUint32), v)
	w.add(Pass, 0, 1)
	require.NotNil(t, w.hi.Load())
	v, _ = w.valueOK(0, Pass)
	require.Equal(t, uint64(1)<<32, v, "carried into the upper half")
	w.add(Block, 5*sec, math.MaxUint64-3)
	w.add(Block, 5*sec, 2)
	v, _ = w.valueOK(5, Block)
	require.Equal(t, uint64(math.MaxUint64-1), v)
	w.add(Block, 5*sec, 10)
	v, _ = w.valueOK(5, Block)
	require.Equal(t, uint64(math.MaxUint64), v, "saturates")
	require.Equal(t, uint64(1)<<32, w.Sum(30*sec, Pass))
	// Second 64 pushes second 0 out, second 69 second 5: whole values.
	w.add(Error, 69*sec, 1)
	assert.Equal(t, map[[2]int64]uint64{
		{int64(Pass), 0}:  1 << 32,
		{int64(Block), 5}: math.MaxUint64,
	}, r.got)
	_, ok := w.valueOK(0, Pass)
	require.False(t, ok)
	v, _ = w.valueOK(69, Error)
	require.Equal(t, uint64(1), v)
}

// TestMinuteWindowMatchesModel adds seeded values of every kept metric for
// seconds around a moving head, late ones (a second the window has moved
// past) included, and compares the window with a model that keeps every
// second: what it holds (valueOK, Sum, Unretired), and that every value
// is held or moved on once, whole.
func TestMinuteWindowMatchesModel(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 60))
			r := newRetired()
			w := newMinuteWindow(r.retire)
			if seed%2 == 0 {
				w.armExtras()
			}
			model := map[[2]int64]uint64{} // what was added, by (metric, second)
			passed := newRetired()         // what add refused (the caller moves it on)
			head := int64(0)
			for i := 0; i < conformance.Steps(4000); i++ {
				if rng.IntN(8) == 0 {
					head += rng.Int64N(3) // and now and then a long idle
					if rng.IntN(50) == 0 {
						head += 30 + rng.Int64N(100)
					}
				}
				s := max(head-rng.Int64N(80), 0) // sometimes behind the window
				m := Metric(rng.IntN(int(keptMetrics)))
				v := rng.Uint64N(1000)
				if rng.IntN(20) == 0 {
					v = MaxAdd
				}
				at := s*sec + rng.Int64N(sec) // anywhere in the second
				if !w.add(m, at, v) {
					passed.retire(m, at, v)
					require.True(t, int(m) >= countMetrics && !w.hasExtras() || s <= w.head.Load()-minuteRing, "refused second %d of %d", s, w.head.Load())
				} else {
					k := [2]int64{int64(m), s}
					old, ok := model[k]
					model[k] = combine(m, old, ok, v)
				}
				if i%97 == 0 {
					compareMinute(t, w, r, model)
				}
			}
			compareMinute(t, w, r, model)
		})
	}
}

// compareMinute checks that every value added to w is either in w (when its
// second is in the window) or moved on (when it is not), whole.
func compareMinute(t *testing.T, w *minuteWindow, r *retired, model map[[2]int64]uint64) {
	t.Helper()
	head := w.head.Load()
	for k, want := range model {
		m, s := Metric(k[0]), k[1]
		got, held := w.valueOK(s, m)
		if s > head-minuteRing {
			require.True(t, held || want == 0, "metric %d second %d head %d", m, s, head)
			require.Equal(t, want, got, "held: metric %d second %d head %d", m, s, head)
			continue
		}
		require.False(t, held)
		r.mu.Lock()
		gone := r.got[k]
		r.mu.Unlock()
		require.Equal(t, want, gone, "moved on: metric %d second %d head %d", m, s, head)
	}
	for _, m := range []Metric{Pass, Block, Complete, Error, RT} {
		var want uint64
		for s := head - MinuteBuckets + 1; s <= head+1; s++ {
			want += model[[2]int64{int64(m), s}]
		}
		require.Equal(t, want, w.Sum(head*sec+sec/2, m), "Sum %d", m)
		var un uint64
		w.Unretired(0, m, func(start int64, v uint64) {
			require.Greater(t, start/sec, head-minuteRing)
			require.LessOrEqual(t, start/sec, head)
			un += v
		})
		want = 0
		for s := head - minuteRing + 1; s <= head; s++ {
			want += model[[2]int64{int64(m), s}]
		}
		require.Equal(t, want, un, "Unretired %d", m)
	}
}

// TestMinuteWindowConcurrent: goroutines add to a minute window for seconds
// around a clock they share and move on, while others read it; every value
// ends up held or moved on exactly once, and a reader's Sum never sees a
// value twice nor a torn count (each add here is 2^31 or 1, so a torn
// read of a count past 2^32 shows up as a sum that no set of adds makes).
func TestMinuteWindowConcurrent(t *testing.T) {
	const writers, readers = 4, 2
	steps := conformance.Steps(20000)
	var movedOn [keptMetrics]atomic.Uint64
	w := newMinuteWindow(func(m Metric, _ int64, v uint64) { movedOn[m].Add(v) })
	w.armExtras()
	var clock atomic.Int64
	var added [writers][keptMetrics]uint64
	var wg, rg sync.WaitGroup
	stop := make(chan struct{})
	for range readers {
		rg.Add(1)
		go func() {
			defer rg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				s := w.Sum(clock.Load(), Pass)
				// Every Pass add is 1 or 2^31: a sum is a count of each,
				// with fewer than 2^31 ones.
				if s%(1<<31) > uint64(writers*steps) {
					t.Errorf("torn sum %d", s)
					return
				}
				w.Unretired(0, Complete, func(int64, uint64) {})
			}
		}()
	}
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 3))
			for range steps {
				now := clock.Add(rng.Int64N(int64(20 * time.Millisecond)))
				at := max(now-rng.Int64N(70*sec), 0)
				m := Metric(rng.IntN(countMetrics + 1)) // the counts and RT
				v := uint64(1)
				if rng.IntN(4) == 0 {
					v = 1 << 31
				}
				if w.add(m, at, v) {
					added[i][m] += v
				} else {
					movedOn[m].Add(v) // the caller moves it on
					added[i][m] += v
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	rg.Wait()
	for m := Metric(0); m <= RT; m++ {
		var want uint64
		for i := range writers {
			want += added[i][m]
		}
		held := uint64(0)
		w.Unretired(0, m, func(_ int64, v uint64) { held += v })
		require.Equal(t, want, held+movedOn[m].Load(), "metric %d", m)
	}
}
