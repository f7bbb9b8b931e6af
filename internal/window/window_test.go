package window

import (
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// refWindow is a plain, single-threaded statement of what a Window does:
// a ring of sixteen (bucket, count) slots, a slot counting only for the
// bucket it holds, and a window of the last ten buckets plus the one after.
type refWindow struct {
	bucket [windowRing]int64
	count  [windowRing]uint64
}

func (r *refWindow) value(ep int64) uint64 {
	if i := ep & (windowRing - 1); r.bucket[i] == ep {
		return r.count[i]
	}
	return 0
}

func (r *refWindow) sum(ep int64) uint64 {
	s := r.value(ep + 1)
	for k := int64(0); k < WindowBuckets; k++ {
		s += r.value(ep - k)
	}
	return s
}

// tryAdd adds into the slot of ep, which a caller whose reading lags counts
// into when it already holds a later bucket, and resets when it holds an
// older one.
func (r *refWindow) tryAdd(ep int64, n uint64, limit float64) (bool, uint64) {
	i := ep & (windowRing - 1)
	stale := r.bucket[i] < ep
	total := r.value(ep + 1) // and the others: ep-1 .. ep-9
	for k := int64(1); k < WindowBuckets; k++ {
		total += r.value(ep - k)
	}
	if !stale {
		total += r.count[i]
	}
	if float64(total+n) > limit {
		return false, total
	}
	if stale {
		r.bucket[i], r.count[i] = ep, n
	} else {
		r.count[i] += n
	}
	return true, total
}

func (r *refWindow) sub(ep int64, n uint64) bool {
	i := ep & (windowRing - 1)
	if r.bucket[i] != ep {
		return false
	}
	r.count[i] -= min(n, r.count[i])
	return true
}

// TestWindowMatchesAReferenceModel drives a Window and refWindow with one
// random sequence of operations, callers lagging by a bucket or two and
// time jumping past the whole ring, and requires identical answers.
func TestWindowMatchesAReferenceModel(t *testing.T) {
	for _, seed := range []int64{1, 2, 3, 42} {
		rng := rand.New(rand.NewSource(seed))
		w, ref := new(Window), new(refWindow)
		ep := int64(1000)
		for i := 0; i < 20000; i++ {
			switch r := rng.Intn(100); {
			case r < 10: // time moves on, sometimes past the whole window
				ep += int64(rng.Intn(3))
				if rng.Intn(50) == 0 {
					ep += int64(rng.Intn(40))
				}
			case r < 70:
				at := ep - int64(rng.Intn(3)) // a caller with an older reading
				n := uint64(rng.Intn(4))
				limit := float64(rng.Intn(60)) + rng.Float64()
				ok1, seen1 := w.TryAdd(at, n, limit)
				ok2, seen2 := ref.tryAdd(at, n, limit)
				require.Equal(t, ok2, ok1, "op %d", i)
				require.Equal(t, seen2, seen1, "op %d", i)
			case r < 85:
				at := ep - int64(rng.Intn(18))
				n := uint64(rng.Intn(3))
				require.Equal(t, ref.sub(at, n), w.Sub(at, n), "op %d", i)
			default:
				at := ep - int64(rng.Intn(2))
				require.Equal(t, ref.sum(at), w.Sum(at), "op %d", i)
			}
		}
	}
}

// TestTryAddIsExactUnderContention checks that however many goroutines
// race, the admitted total is exactly what the limit allows. Half the
// callers read a clock one bucket later: they start bucket ep+1, which the
// others must count, and vice versa.
func TestTryAddIsExactUnderContention(t *testing.T) {
	tests := []struct {
		name    string
		limit   float64
		workers int
		tries   int
		batch   uint64
		want    uint64
	}{
		{"unit batches", 1000, 64, 100, 1, 1000},
		{"batches of 3", 100, 32, 50, 3, 99},
		{"fractional limit", 10.5, 16, 10, 1, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := new(Window)
			const ep = 9
			var wg sync.WaitGroup
			var admitted atomic.Uint64
			for g := 0; g < tt.workers; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < tt.tries; i++ {
						if ok, _ := w.TryAdd(int64(ep+g%2), tt.batch, tt.limit); ok {
							admitted.Add(tt.batch)
						}
					}
				}()
			}
			wg.Wait()
			require.Equal(t, tt.want, admitted.Load())
			require.Equal(t, tt.want, w.Sum(ep))
		})
	}
}

func TestWindowCountsWholeWindowAndSubUndoesLiveBuckets(t *testing.T) {
	w := new(Window)
	ok, _ := w.TryAdd(9, 8, 10) // last bucket of second 0
	require.True(t, ok)
	ok, seen := w.TryAdd(10, 3, 10)
	require.False(t, ok, "8 in the previous bucket + 3 exceeds 10")
	require.Equal(t, uint64(8), seen)
	ok, _ = w.TryAdd(10, 2, 10)
	require.True(t, ok)
	// Once bucket 9 leaves the window (bucket 19) the room comes back.
	ok, seen = w.TryAdd(19, 8, 10)
	require.True(t, ok)
	require.Equal(t, uint64(2), seen)
	require.Equal(t, uint64(10), w.Sum(19))

	require.True(t, w.Sub(19, 5))
	require.Equal(t, uint64(5), w.Sum(19))
	require.False(t, w.Sub(3, 1), "bucket 3's slot holds bucket 19 now")
	// Buckets sixteen apart share a slot: 35 replaces 19.
	ok, _ = w.TryAdd(35, 1, 10)
	require.True(t, ok)
	require.False(t, w.Sub(19, 1))
	require.Equal(t, uint64(1), w.Sum(35))
}

func TestWindowClampsAndSaturates(t *testing.T) {
	w := new(Window)
	ok, _ := w.TryAdd(1, MaxAdd+5, 1e18)
	require.True(t, ok)
	require.Equal(t, MaxAdd, w.Sum(1), "amounts above MaxAdd are clamped")
}

func BenchmarkWindowTryAdd(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		w := new(Window)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			w.TryAdd(int64(i>>16), 1, 1e12)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		w := new(Window)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				w.TryAdd(int64(i>>16), 1, 1e12)
				i++
			}
		})
	})
}

// TestWindowExactAcrossABucketBoundary races callers whose clock readings
// straddle a bucket boundary (half at bucket 9, half at 10): each checks the
// other's bucket and adds to its own, so without validation both sides can
// pass on the same room. Many short rounds make the interleaving likely.
func TestWindowExactAcrossABucketBoundary(t *testing.T) {
	const (
		rounds  = 2000
		workers = 8
		limit   = 64
	)
	for r := 0; r < rounds; r++ {
		w := new(Window)
		var wg sync.WaitGroup
		var admitted atomic.Int64
		start := make(chan struct{})
		for g := 0; g < workers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := 0; i < 2*limit/workers; i++ {
					if ok, _ := w.TryAdd(int64(9+g%2), 1, limit); ok {
						admitted.Add(1)
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		require.Equal(t, int64(limit), admitted.Load(), "admitted, round %d, words %v", r, w.dump())
		require.Equal(t, uint64(limit), w.Sum(10), "sum, round %d", r)
	}
}

func (w *Window) dump() []string {
	var out []string
	for i := range w.words {
		v := w.words[i].Load()
		out = append(out, fmt.Sprintf("%d:%d", v>>valueBits, v&valueMask))
	}
	return out
}

// TestFreeAtIsTheFirstBucketThatAdmits fills windows with random counts,
// including a writer one bucket ahead, and checks FreeAt against the
// definition: the first later bucket at which the window's sum plus n is
// within the limit, nothing else being added.
func TestFreeAtIsTheFirstBucketThatAdmits(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for i := 0; i < 5000; i++ {
		w := new(Window)
		ep := int64(100 + rng.Intn(50))
		for k := -1; k < WindowBuckets+3; k++ { // the bucket after ep, and some that already left
			if rng.Intn(3) > 0 {
				w.TryAdd(ep-int64(k), uint64(rng.Intn(8)), 1e9)
			}
		}
		n := uint64(rng.Intn(10))
		limit := float64(rng.Intn(60)) + rng.Float64()*float64(rng.Intn(2))
		got, ok := w.FreeAt(ep, n, limit)
		if float64(n) > limit {
			require.False(t, ok, "case %d", i)
			continue
		}
		require.True(t, ok, "case %d", i)
		want := ep + 1
		for float64(w.Sum(want)+n) > limit {
			want++
		}
		require.Equal(t, want, got, "case %d: words %v, n %d, limit %v", i, w.dump(), n, limit)
		require.LessOrEqual(t, got, ep+1+WindowBuckets)
	}
}

// TestWindowLateEpochsAndLongIdles checks writes once the bucket index
// has passed 2^27, half the truncated epoch space (37 hours of uptime for
// the 1 ms buckets of a 10 ms rule, 155 days for 100 ms ones), and after
// idles longer than that: a window never written, or last written that
// long ago, counts its adds. Before, the zero epoch of a fresh counter and
// an epoch more than 2^27 buckets old were taken for newer buckets, the
// add went into a word no sum reads, and the limit stopped holding.
func TestWindowLateEpochsAndLongIdles(t *testing.T) {
	const half = int64(1) << 27
	tests := []struct {
		name  string
		first int64 // bucket of a first admission, or -1 for none
		at    int64 // bucket of the checks
	}{
		{"fresh window past 2^27", -1, half + 5},
		{"fresh window just before 2^28", -1, 1<<28 - 3},
		{"fresh window past 2^28 + 2^27", -1, 1<<28 + half + 1},
		{"idle of 2^27 + 16 buckets, same slot", 7, 7 + half + 16},
		{"idle of 2^27 + 9 buckets", 7, 7 + half + 9},
		{"idle of 2^28 - 2^21 buckets", 7, 7 + 1<<28 - 1<<21},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := new(Window)
			if tt.first >= 0 {
				ok, _ := w.TryAdd(tt.first, 2, 2)
				require.True(t, ok)
			}
			ok, seen := w.TryAdd(tt.at, 2, 2)
			require.True(t, ok, "the first admission after the idle")
			require.Equal(t, uint64(0), seen)
			require.Equal(t, uint64(2), w.Sum(tt.at))
			require.Equal(t, uint64(2), w.Sum(tt.at+9), "still in the window nine buckets later")
			ok, seen = w.TryAdd(tt.at+3, 1, 2)
			require.False(t, ok, "the limit holds")
			require.Equal(t, uint64(2), seen)

			a := MustLeapArray[testMetric](10*time.Millisecond, 10, []Kind{Sum, Min}, nil)
			width := a.BucketWidth()
			if tt.first >= 0 {
				a.Add(tt.first*width, mCount, 5)
				a.Add(tt.first*width, mMin, 5)
			}
			a.Add(tt.at*width, mCount, 1)
			a.Add(tt.at*width, mMin, 3)
			require.Equal(t, uint64(1), a.Sum(tt.at*width, mCount))
			v, ok := a.MinOf(tt.at*width, mMin)
			require.True(t, ok)
			require.Equal(t, uint64(3), v)
		})
	}
}

// TestWindowMatchesAReferenceModelLate is TestWindowMatchesAReferenceModel
// from bucket indexes near and past 2^27 and 2^28, with idles of up to
// 2^28 buckets (kept out of the 2^20 buckets around a multiple of 2^28,
// where a truncated epoch cannot tell an old bucket from a newer one).
func TestWindowMatchesAReferenceModelLate(t *testing.T) {
	for _, start := range []int64{1<<27 - 50, 1<<27 + 3, 1<<28 - 20, 3<<27 + 1} {
		rng := rand.New(rand.NewSource(start))
		w, ref := new(Window), new(refWindow)
		ref.bucket = [windowRing]int64{}
		ep := start
		for i := 0; i < 5000; i++ {
			switch r := rng.Intn(100); {
			case r < 10:
				ep += int64(rng.Intn(3))
				if rng.Intn(50) == 0 {
					ep += int64(rng.Intn(40))
				}
				if rng.Intn(200) == 0 {
					jump := int64(16) + rng.Int63n(1<<28)
					if d := jump % (1 << 28); d < 1<<20 || d > 1<<28-1<<20 {
						jump += 1 << 24
					}
					ep += jump
				}
			case r < 70:
				at := ep - int64(rng.Intn(3))
				n := uint64(rng.Intn(4))
				limit := float64(rng.Intn(60)) + rng.Float64()
				ok1, seen1 := w.TryAdd(at, n, limit)
				ok2, seen2 := ref.tryAdd(at, n, limit)
				require.Equal(t, ok2, ok1, "start %d op %d", start, i)
				require.Equal(t, seen2, seen1, "start %d op %d", start, i)
			case r < 85:
				at := ep - int64(rng.Intn(18))
				n := uint64(rng.Intn(3))
				require.Equal(t, ref.sub(at, n), w.Sub(at, n), "start %d op %d", start, i)
			default:
				at := ep - int64(rng.Intn(2))
				require.Equal(t, ref.sum(at), w.Sum(at), "start %d op %d", start, i)
			}
		}
	}
}
