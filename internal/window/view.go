package window

import "go.uber.org/atomic"

// view is what the packed-word algorithms need to know of a window's
// storage. LeapArray builds one from its header; Window builds one from
// constants, so its checks read nothing but the counters.
type view struct {
	words   []atomic.Uint64
	stride  int   // words per slot (one per metric)
	mask    int64 // slots - 1 (slots is a power of two)
	buckets int   // buckets in the window
}

func (v *view) word(epoch int64, m int) *atomic.Uint64 {
	return &v.words[int(epoch&v.mask)*v.stride+m]
}

// sum is the window-summing routine of every window: it sums metric m
// over buckets epoch-from .. epoch-(to-1) and the bucket after epoch (a
// writer one bucket ahead, so a reader that lags a writer never
// under-counts). It visits exactly those slots and counts a word only when
// its epoch is the expected one. With from = 1 it leaves out epoch's own
// slot, and when nb is not nil it records the words of the buckets just
// before and after epoch as read (nothing, for a one-slot ring, whose only
// slot is epoch's own).
func (v *view) sum(epoch int64, m, from, to int, nb *neighbours) uint64 {
	if from > 0 && v.mask == 0 {
		return 0
	}
	// Locals, not v's fields: the compiler would otherwise copy v for each
	// inlined call to word, which costs more than the loads themselves.
	words, stride, mask := v.words, v.stride, v.mask
	var s uint64
	for k := from; k < to; k++ {
		ep := epoch - int64(k)
		p := &words[int(ep&mask)*stride+m]
		w := p.Load()
		if k == 1 && nb != nil {
			nb.prevW, nb.prev = p, w
		}
		if w>>valueBits == uint64(ep)&epochMask {
			s += w & valueMask
		}
	}
	next := epoch + 1
	p := &words[int(next&mask)*stride+m]
	w := p.Load()
	if nb != nil {
		nb.nextW, nb.next = p, w
	}
	if w>>valueBits == uint64(next)&epochMask {
		s += w & valueMask
	}
	return s
}

// value returns metric m of the single bucket epoch: its word's value when
// the word holds that bucket, else zero.
func (v *view) value(epoch int64, m int) uint64 {
	w := v.word(epoch, m).Load()
	if w>>valueBits != uint64(epoch)&epochMask {
		return 0
	}
	return w & valueMask
}

// freeAt returns the first bucket after epoch from whose start a
// check-and-add of n against limit on Sum metric m would succeed if nothing
// were added or taken back meanwhile, and false when n alone exceeds limit.
//
// At the start of bucket epoch+1+j the window has lost its j+1 oldest
// buckets and still counts the others, the bucket after epoch included
// (until epoch+1+buckets). So the walk adds up the buckets from the newest
// (the one after epoch) towards the oldest, n included, and stops at the
// first bucket k back from epoch that takes the sum past limit: that bucket
// and all older ones must leave, which they have at epoch+buckets-k. Each
// word is read once, so a racing writer can skew the answer by its own
// counts but never make it inconsistent.
func (v *view) freeAt(epoch int64, m int, n uint64, limit float64) (int64, bool) {
	if n > MaxAdd {
		n = MaxAdd
	}
	if float64(n) > limit {
		return 0, false
	}
	s := n + v.value(epoch+1, m)
	if float64(s) > limit {
		return epoch + 1 + int64(v.buckets), true
	}
	for k := 0; k < v.buckets; k++ {
		s += v.value(epoch-int64(k), m)
		if float64(s) > limit {
			return epoch + int64(v.buckets-k), true
		}
	}
	return epoch + 1, true // it fits already (a racing Sub freed room)
}

// tryAddResult is what a check-and-add did: whether it added, and the
// total it saw before adding.
type tryAddResult struct {
	ok    bool
	total uint64
}

// retireFunc receives the value oldValue of a stale counter of bucket
// oldEpoch (truncated) that a check-and-add reset.
type retireFunc func(oldEpoch, oldValue uint64)

// tryAdd adds n to Sum metric m in bucket epoch only if the window's total
// plus n stays at or below limit; see LeapArray.TryAdd. retire is called for
// a stale counter the add reset.
func (v *view) tryAdd(epoch int64, m int, n uint64, limit float64, retire retireFunc) tryAddResult {
	if n > MaxAdd {
		n = MaxAdd
	}
	w := v.word(epoch, m)
	e := uint64(epoch) & epochMask
	for {
		old := w.Load()
		// Everything but the current slot; the neighbours' words as read.
		var nb neighbours
		others := v.sum(epoch, m, 1, v.buckets, &nb)
		if r, done := tryAddStep(w, old, e, n, others, limit, &nb, retire); done {
			return r
		}
	}
}

// neighbours are the counters of the buckets just before and after the one
// a check-and-add writes, as its check read them. Callers whose clock
// readings straddle a bucket boundary write those: a check-and-add that finds
// either changed after its own add cannot tell whether the other caller's
// check saw its add, so it takes its add back and tries again. That makes
// admissions exact across a boundary, not only within one bucket. The
// comparison is with the values the check used (not values read before
// it), so a neighbour that changed and changed back in between cannot
// pass unnoticed. (A caller whose reading is two or more buckets stale,
// preempted for 100 ms between reading the clock and adding, is not
// covered: its add can exceed the limit by its own amount once.)
type neighbours struct {
	prevW, nextW *atomic.Uint64 // nil prevW: nothing to validate
	prev, next   uint64
}

func (nb *neighbours) changed() bool {
	return nb.prevW != nil && (nb.prevW.Load() != nb.prev || nb.nextW.Load() != nb.next)
}

// tryAddStep is one attempt of a check-and-add of n on counter w, read as
// old, for bucket e (truncated), where the other buckets of the window sum
// to others. It reports done=false when a concurrent change to w or to a
// neighbour made the attempt fail; the caller then reads again and retries.
// retire, if not nil, is called when the attempt reset a stale counter.
func tryAddStep(w *atomic.Uint64, old, e, n, others uint64, limit float64, nb *neighbours, retire retireFunc) (r tryAddResult, done bool) {
	oe := old >> valueBits
	stale := oe != e && (e-oe)&epochMask < epochHalf
	cur := uint64(0)
	if !stale {
		cur = old & valueMask
	}
	r.total = others + cur
	if float64(r.total+n) > limit {
		return r, true
	}
	switch {
	case stale:
		if !w.CompareAndSwap(old, e<<valueBits|n) {
			return r, false
		}
		if retire != nil {
			retire(oe, old&valueMask)
		}
	case cur+n > valueMask-valueHeadroom:
		return r, true
	default:
		if !w.CompareAndSwap(old, old+n) {
			return r, false
		}
	}
	if nb.changed() {
		subWord(w, e, n)
		return r, false
	}
	r.ok = true
	return r, true
}

// sub takes back n from Sum metric m in bucket epoch; see LeapArray.Sub.
func (v *view) sub(epoch int64, m int, n uint64) bool {
	return subWord(v.word(epoch, m), uint64(epoch)&epochMask, n)
}

// subWord takes back n from counter w if it still holds bucket e
// (truncated), and reports whether it did.
func subWord(w *atomic.Uint64, e, n uint64) bool {
	if n > MaxAdd {
		n = MaxAdd
	}
	for {
		old := w.Load()
		if old>>valueBits != e {
			return false
		}
		x := old & valueMask
		if x < n {
			n = x
		}
		if w.CompareAndSwap(old, old-n) {
			return true
		}
	}
}
