package window

import "go.uber.org/atomic"

// WindowBuckets is the number of buckets of a Window.
const WindowBuckets = 10

// windowRing is the number of slots of a Window: RingSize(WindowBuckets),
// so the window's buckets, the one after them (a writer with a slightly
// later clock reading may have started it) and five older ones that every
// sum skips; 128 bytes in all.
const windowRing = 16

// Window is a sliding window of WindowBuckets buckets with one Sum counter
// each: a LeapArray of fixed shape with no header. Its sixteen counter words
// are all it holds, so a check reads nothing but the counters it sums. Flow
// rules keep their admission counts in one, preferably the one inside their
// resource's Node (Node.ClaimWindow).
//
// The bucket width is the caller's: every method takes a bucket index
// (epoch), the time divided by the width the caller chose; it must not be
// negative. Its zero value is an empty window, safe for concurrent use.
type Window struct {
	words [windowRing]atomic.Uint64
}

// view returns the window's shape for the algorithms of view.go, from
// constants.
func (w *Window) view() view {
	return view{words: w.words[:], stride: 1, mask: windowRing - 1, buckets: WindowBuckets}
}

// TryAdd adds n to bucket epoch only if the window's total (the last
// WindowBuckets buckets up to epoch) plus n stays at or below limit. It
// reports whether it added, and the total it saw before adding; as with
// LeapArray.TryAdd, concurrent callers can never together take the total past
// limit, even when their clock readings straddle a bucket boundary.
func (w *Window) TryAdd(epoch int64, n uint64, limit float64) (bool, uint64) {
	v := w.view()
	return v.tryAdd(epoch, 0, n, limit, nil)
}

// Sub takes back n from bucket epoch, undoing an earlier TryAdd there; it
// does nothing (and reports false) once the bucket has left its slot.
func (w *Window) Sub(epoch int64, n uint64) bool {
	v := w.view()
	return v.sub(epoch, 0, n)
}

// Sum returns the total of the window that ends with bucket epoch.
func (w *Window) Sum(epoch int64) uint64 {
	v := w.view()
	return v.sum(epoch, 0, 0, WindowBuckets, nil)
}

// FreeAt returns the first bucket after epoch from whose start a TryAdd of
// n within limit would succeed if nothing were added or taken back
// meanwhile: the counts leave the window oldest bucket first, and the
// answer is the bucket at which enough of them have left. It reports false
// when n alone exceeds limit (no bucket will do). The counts are read
// without stopping writers: exact when none race it, a close estimate
// otherwise.
func (w *Window) FreeAt(epoch int64, n uint64, limit float64) (int64, bool) {
	v := w.view()
	return v.freeAt(epoch, 0, n, limit)
}
