package window

import "go.uber.org/atomic"

// WindowBuckets is the number of buckets of a Window.
const WindowBuckets = 10

// windowRing is the number of slots of a Window: the window's buckets, the
// one after them (a writer with a slightly later clock reading may have
// started it) and one spare, 96 bytes in all.
const windowRing = 12

// Window is a sliding window of WindowBuckets buckets with one Sum counter
// each: the algorithm of LeapArray with the shape fixed at compile time. It
// has no header: its twelve counter words are all it holds, so a check reads
// nothing but the counters it sums (two cache lines at most). Flow rules keep
// their admission counts in one, preferably the one inside their resource's
// Node (Node.ClaimWindow).
//
// The ring is not a power of two (a LeapArray's is): the slot of a bucket is
// its index modulo twelve, which the compiler turns into a multiplication;
// the slots of a sum are found by stepping down from there.
//
// The bucket width is the caller's: every method takes a bucket index
// (epoch), the time divided by the width the caller chose; it must not be
// negative. Its zero value is an empty window, safe for concurrent use.
type Window struct {
	words [windowRing]atomic.Uint64
}

func windowSlot(epoch int64) int { return int(uint64(epoch) % windowRing) }

// TryAdd adds n to bucket epoch only if the window's total (the last
// WindowBuckets buckets up to epoch) plus n stays at or below limit. It
// reports whether it added, and the total it saw before adding; as with
// LeapArray.TryAdd, concurrent callers can never together take the total past
// limit, even when their clock readings straddle a bucket boundary.
func (w *Window) TryAdd(epoch int64, n uint64, limit float64) (bool, uint64) {
	if n > MaxAdd {
		n = MaxAdd
	}
	s := windowSlot(epoch)
	c := &w.words[s]
	e := uint64(epoch) & epochMask
	for {
		old := c.Load()
		var nb neighbours
		others := w.others(epoch, s, &nb)
		if r, done := tryAddStep(c, old, e, n, others, limit, &nb, nil); done {
			return r.ok, r.total
		}
	}
}

// others sums the window ending with bucket epoch (in slot s), leaving out
// epoch's own slot: the buckets before it and the bucket after it, which a
// writer with a later clock reading may have started. A word counts only
// when it holds the bucket expected in its slot. When nb is not nil it
// records the words of the buckets just before and after epoch as read.
func (w *Window) others(epoch int64, s int, nb *neighbours) uint64 {
	var sum uint64
	for k := 1; k < WindowBuckets; k++ {
		i := s - k
		if i < 0 {
			i += windowRing
		}
		ep := epoch - int64(k)
		x := w.words[i].Load()
		if k == 1 && nb != nil {
			nb.prevW, nb.prev = &w.words[i], x
		}
		if x>>valueBits == uint64(ep)&epochMask {
			sum += x & valueMask
		}
	}
	i := s + 1
	if i == windowRing {
		i = 0
	}
	next := epoch + 1
	x := w.words[i].Load()
	if nb != nil {
		nb.nextW, nb.next = &w.words[i], x
	}
	if x>>valueBits == uint64(next)&epochMask {
		sum += x & valueMask
	}
	return sum
}

// Sub takes back n from bucket epoch, undoing an earlier TryAdd there; it
// does nothing (and reports false) once the bucket has left its slot.
func (w *Window) Sub(epoch int64, n uint64) bool {
	return subWord(&w.words[windowSlot(epoch)], uint64(epoch)&epochMask, n)
}

// Sum returns the total of the window that ends with bucket epoch.
func (w *Window) Sum(epoch int64) uint64 {
	s := windowSlot(epoch)
	sum := w.others(epoch, s, nil)
	if x := w.words[s].Load(); x>>valueBits == uint64(epoch)&epochMask {
		sum += x & valueMask
	}
	return sum
}
