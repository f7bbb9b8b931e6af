package window

import "sync/atomic"

// WindowBuckets is the number of buckets of a Window.
const WindowBuckets = 10

// windowRing is the number of slots of a Window: RingSize(WindowBuckets),
// so the window's buckets, the one after them (a writer with a slightly
// later clock reading may have started it) and five older ones that every
// sum skips; 128 bytes in all.
const windowRing = 16

// Window is a sliding window of WindowBuckets buckets with one Sum counter
// each, in which flow rules count admissions with a check-and-add
// (TryAdd). Its counters are packed words as a LeapArray's, in a ring of
// sixteen with no header, so a check reads nothing but the counters it
// sums, and its shape is constant, so the summing loop shared with
// LeapArray (sumSpan) compiles to straight arithmetic here. Flow rules
// keep their counts in one, preferably the one inside their resource's Node
// (Node.ClaimWindow).
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
// WindowBuckets buckets up to epoch, and the one after it) plus n stays at
// or below limit. It reports whether it added, and the total it saw before
// adding. The check and the add are one atomic step on the bucket's
// counter: concurrent callers can never together take the total past
// limit, even when their clock readings straddle a bucket boundary.
//
// Each attempt reads the counter it will write, then the others, checks,
// and compare-and-swaps the counter: an add or, for a stale counter, a
// reset carrying the add. It then checks the neighbouring buckets (below),
// and starts again when any of it raced another caller.
//
// Neighbours: callers whose clock readings straddle a bucket boundary
// write the buckets just before and after the one an attempt writes. An
// attempt that finds either changed after its own add cannot tell whether
// the other caller's check saw its add, so it takes its add back and tries
// again. That makes admissions exact across a boundary, not only within
// one bucket. The comparison is with the values the check used (not values
// read before it), so a neighbour that changed and changed back in between
// cannot pass unnoticed. (A caller whose reading is two or more buckets
// stale, preempted for 100 ms between reading the clock and adding, is not
// covered: its add can exceed the limit by its own amount once.)
func (w *Window) TryAdd(epoch int64, n uint64, limit float64) (bool, uint64) {
	if n > MaxAdd {
		n = MaxAdd
	}
	const mask = windowRing - 1
	c := &w.words[epoch&mask]
	prevW, nextW := &w.words[(epoch-1)&mask], &w.words[(epoch+1)&mask]
	e := uint64(epoch) & epochMask
	for {
		old := c.Load()
		prev := prevW.Load()
		others := count(prev, epoch-1) + sumSpan(w.words[:], 1, mask, 0, epoch-2, epoch-WindowBuckets)
		next := nextW.Load()
		others += count(next, epoch+1)

		stale := isStale(old, e)
		cur := uint64(0)
		if !stale {
			cur = old & valueMask
		}
		total := others + cur
		if float64(total+n) > limit || cur+n > valueMask-valueHeadroom {
			return false, total // over the limit, or saturated
		}
		swapped := false
		if stale {
			swapped = c.CompareAndSwap(old, e<<valueBits|n)
		} else {
			swapped = c.CompareAndSwap(old, old+n)
		}
		if !swapped {
			continue
		}
		if prevW.Load() != prev || nextW.Load() != next {
			subWord(c, e, n)
			continue
		}
		return true, total
	}
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
	return v.sum(epoch, 0, 0, WindowBuckets)
}

// FreeAt returns the first bucket after epoch from whose start a TryAdd of
// n within limit would succeed if nothing were added or taken back
// meanwhile: the counts leave the window oldest bucket first, and the
// answer is the bucket at which enough of them have left. It reports false
// when n alone exceeds limit (no bucket will do). The counts are read
// without stopping writers: exact when none race it, a close estimate
// otherwise.
func (w *Window) FreeAt(epoch int64, n uint64, limit float64) (int64, bool) {
	// view.freeAt with the window's shape as constants (a refusal's
	// RetryAfter: the walk then compiles to a few loads and compares).
	if n > MaxAdd {
		n = MaxAdd
	}
	if float64(n) > limit {
		return 0, false
	}
	const mask = windowRing - 1
	s := n + count(w.words[(epoch+1)&mask].Load(), epoch+1)
	if float64(s) > limit {
		return epoch + 1 + WindowBuckets, true
	}
	for k := int64(0); k < WindowBuckets; k++ {
		s += count(w.words[(epoch-k)&mask].Load(), epoch-k)
		if float64(s) > limit {
			return epoch + WindowBuckets - k, true
		}
	}
	return epoch + 1, true // it fits already (a racing Sub freed room)
}

// LastCounted returns the newest bucket of the window that ends with
// bucket epoch (the bucket after it included, as TryAdd counts it) that
// holds a count, and false when none does. A counted request leaves the
// window at the start of bucket LastCounted+WindowBuckets at the latest.
func (w *Window) LastCounted(epoch int64) (int64, bool) {
	const mask = windowRing - 1
	for ep := epoch + 1; ep > epoch-WindowBuckets; ep-- {
		if count(w.words[ep&mask].Load(), ep) > 0 {
			return ep, true
		}
	}
	return 0, false
}
