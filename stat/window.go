package stat

import "go.uber.org/atomic"

// WindowBuckets is the number of buckets of a Window.
const WindowBuckets = 10

// windowRing is RingSize(WindowBuckets).
const windowRing = 16

// Window is a sliding window of WindowBuckets buckets with one Sum counter
// each: a LeapArray whose shape is fixed at compile time. It has no header;
// its sixteen counter words (128 bytes, two cache lines) are all it holds,
// so a check reads nothing but the counters it sums. Flow rules keep their
// admission counts in one.
//
// The bucket width is the caller's: every method takes a bucket index
// (epoch), the time divided by the width the caller chose. Its zero value is
// an empty window, safe for concurrent use.
type Window struct {
	words [windowRing]atomic.Uint64
}

func (w *Window) view() *view {
	return &view{words: w.words[:], stride: 1, mask: windowRing - 1, buckets: WindowBuckets}
}

// TryAdd adds n to bucket epoch only if the window's total (the last
// WindowBuckets buckets up to epoch) plus n stays at or below limit. It
// reports whether it added, and the total it saw before adding; as with
// LeapArray.TryAdd, concurrent callers can never together take the total past
// limit.
func (w *Window) TryAdd(epoch int64, n uint64, limit float64) (bool, uint64) {
	if n > MaxAdd {
		n = MaxAdd
	}
	c := &w.words[epoch&(windowRing-1)]
	e := uint64(epoch) & epochMask
	for {
		old := c.Load()
		if r, done := tryAddStep(c, old, e, n, w.others(epoch), limit); done {
			return r.ok, r.total
		}
	}
}

// others sums the window ending with bucket epoch, leaving out epoch's own
// slot: the buckets before it and a bucket after it that a writer with a
// later clock reading has already started. The shape is constant, so the
// loop reads nothing but counters.
func (w *Window) others(epoch int64) uint64 {
	var s uint64
	for k := int64(1); k < WindowBuckets; k++ {
		ep := epoch - k
		if x := w.words[ep&(windowRing-1)].Load(); x>>valueBits == uint64(ep)&epochMask {
			s += x & valueMask
		}
	}
	next := epoch + 1
	if x := w.words[next&(windowRing-1)].Load(); x>>valueBits == uint64(next)&epochMask {
		s += x & valueMask
	}
	return s
}

// Sub takes back n from bucket epoch, undoing an earlier TryAdd there; it
// does nothing (and reports false) once the bucket has left its slot.
func (w *Window) Sub(epoch int64, n uint64) bool {
	return w.view().sub(epoch, 0, n)
}

// Sum returns the total of the window that ends with bucket epoch.
func (w *Window) Sum(epoch int64) uint64 {
	e := w.words[epoch&(windowRing-1)].Load()
	s := w.others(epoch)
	if e>>valueBits == uint64(epoch)&epochMask {
		s += e & valueMask
	}
	return s
}
