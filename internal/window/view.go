package window

import "sync/atomic"

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

// sumSpan is the summing loop of every window: it adds up metric m over
// buckets newest down to oldest+1, counting a word only when it holds the
// bucket expected in its slot (a slot still holding an older bucket adds
// nothing). It is small enough to inline, so a caller whose shape is
// constant (Window) gets it specialised.
func sumSpan(words []atomic.Uint64, stride int, mask int64, m int, newest, oldest int64) uint64 {
	var s uint64
	for ep := newest; ep > oldest; ep-- {
		s += count(words[int(ep&mask)*stride+m].Load(), ep)
	}
	return s
}

// count returns the value of counter word w if it holds bucket epoch, and
// zero otherwise.
func count(w uint64, epoch int64) uint64 {
	if w>>valueBits != uint64(epoch)&epochMask {
		return 0
	}
	return w & valueMask
}

// sum returns metric m summed over buckets epoch-from .. epoch-(to-1) and
// the bucket after epoch, which a writer with a slightly later clock
// reading may have started (so a reader that lags a writer never
// under-counts). With from = 1 it leaves out epoch's own slot; a one-slot
// ring then has nothing else.
func (v *view) sum(epoch int64, m, from, to int) uint64 {
	if from > 0 && v.mask == 0 {
		return 0
	}
	return sumSpan(v.words, v.stride, v.mask, m, epoch-int64(from), epoch-int64(to)) + v.value(epoch+1, m)
}

// value returns metric m of the single bucket epoch: its word's value when
// the word holds that bucket, else zero.
func (v *view) value(epoch int64, m int) uint64 {
	return count(v.word(epoch, m).Load(), epoch)
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
