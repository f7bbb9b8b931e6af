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
	// Locals, not v's fields: the compiler would otherwise reload them
	// from memory on every iteration.
	words, stride, mask := v.words, v.stride, v.mask
	var s uint64
	k := from
	if nb != nil && k == 1 && k < to {
		// The bucket before epoch, recorded as the check reads it.
		ep := epoch - 1
		i := int(ep&mask)*stride + m
		w := words[i].Load()
		nb.prevI, nb.prev, nb.valid = i, w, true
		if w>>valueBits == uint64(ep)&epochMask {
			s += w & valueMask
		}
		k++
	}
	s += sumSpan(words, stride, mask, m, epoch-int64(k), epoch-int64(to))
	next := epoch + 1
	i := int(next&mask)*stride + m
	w := words[i].Load()
	if nb != nil {
		nb.nextI, nb.next = i, w
	}
	if w>>valueBits == uint64(next)&epochMask {
		s += w & valueMask
	}
	return s
}

// sumSpan is sum's loop: metric m over buckets newest down to oldest+1.
//
//go:noinline
func sumSpan(words []atomic.Uint64, stride int, mask int64, m int, newest, oldest int64) uint64 {
	var s uint64
	for ep := newest; ep > oldest; ep-- {
		w := words[int(ep&mask)*stride+m].Load()
		if w>>valueBits == uint64(ep)&epochMask {
			s += w & valueMask
		}
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

// retireFunc receives the value oldValue of a stale counter of bucket
// oldEpoch (truncated) that a check-and-add reset.
type retireFunc func(oldEpoch, oldValue uint64)

// tryAdd adds n to Sum metric m in bucket epoch only if the window's total
// plus n stays at or below limit, and reports whether it added and the
// total it saw before adding; see LeapArray.TryAdd. retire is called for a
// stale counter the add reset.
func (v *view) tryAdd(epoch int64, m int, n uint64, limit float64, retire retireFunc) (bool, uint64) {
	if n > MaxAdd {
		n = MaxAdd
	}
	w := v.word(epoch, m)
	e := uint64(epoch) & epochMask
	for {
		old := w.Load()
		// Everything but the current slot; the neighbours' words as read.
		nb := neighbours{words: v.words}
		others := v.sum(epoch, m, 1, v.buckets, &nb)
		if ok, total, done := tryAddStep(w, old, e, n, others, limit, &nb, retire); done {
			return ok, total
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
//
// It records indexes into words rather than pointers, so that the summing
// routine stores no pointers (which would cost write-barrier checks).
type neighbours struct {
	words        []atomic.Uint64
	prevI, nextI int
	prev, next   uint64
	valid        bool // false: nothing to validate
}

func (nb *neighbours) changed() bool {
	return nb.valid && (nb.words[nb.prevI].Load() != nb.prev || nb.words[nb.nextI].Load() != nb.next)
}

// tryAddStep is one attempt of a check-and-add of n on counter w, read as
// old, for bucket e (truncated), where the other buckets of the window sum
// to others: whether it added, the total it saw, and done=false when a concurrent change to w or to a
// neighbour made the attempt fail; the caller then reads again and retries.
// retire, if not nil, is called when the attempt reset a stale counter.
func tryAddStep(w *atomic.Uint64, old, e, n, others uint64, limit float64, nb *neighbours, retire retireFunc) (ok bool, total uint64, done bool) {
	oe := old >> valueBits
	stale := oe != e && (e-oe)&epochMask < epochHalf
	cur := uint64(0)
	if !stale {
		cur = old & valueMask
	}
	total = others + cur
	if float64(total+n) > limit {
		return false, total, true
	}
	switch {
	case stale:
		if !w.CompareAndSwap(old, e<<valueBits|n) {
			return false, total, false
		}
		if retire != nil {
			retire(oe, old&valueMask)
		}
	case cur+n > valueMask-valueHeadroom:
		return false, total, true
	default:
		if !w.CompareAndSwap(old, old+n) {
			return false, total, false
		}
	}
	if nb.changed() {
		subWord(w, e, n)
		return false, total, false
	}
	return true, total, true
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
