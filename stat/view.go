package stat

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

// sumRange sums metric m over buckets epoch-from .. epoch-(to-1) and the
// bucket after epoch (a writer one bucket ahead, so a reader that lags a
// writer never under-counts). It visits exactly those slots and counts a
// word only when its epoch is the expected one.
func (v *view) sumRange(epoch int64, m, from, to int) uint64 {
	// Locals, not v's fields: the compiler would otherwise copy v for each
	// inlined call to word, which costs more than the loads themselves.
	words, stride, mask := v.words, v.stride, v.mask
	var s uint64
	for k := from; k < to; k++ {
		ep := epoch - int64(k)
		w := words[int(ep&mask)*stride+m].Load()
		if w>>valueBits == uint64(ep)&epochMask {
			s += w & valueMask
		}
	}
	next := epoch + 1
	if w := words[int(next&mask)*stride+m].Load(); w>>valueBits == uint64(next)&epochMask {
		s += w & valueMask
	}
	return s
}

// tryAddResult is what tryAdd did. When reset is set, the caller won the
// reset of a stale counter that held oldValue for bucket oldEpoch (truncated)
// and must retire it.
type tryAddResult struct {
	ok       bool
	reset    bool
	total    uint64
	oldEpoch uint64
	oldValue uint64
}

// tryAdd adds n to Sum metric m in bucket epoch only if the window's total
// plus n stays at or below limit; see LeapArray.TryAdd.
func (v *view) tryAdd(epoch int64, m int, n uint64, limit float64) tryAddResult {
	if n > MaxAdd {
		n = MaxAdd
	}
	w := v.word(epoch, m)
	e := uint64(epoch) & epochMask
	for {
		old := w.Load()
		// Everything but the current slot: buckets only the past writes to.
		var others uint64
		if v.mask != 0 {
			others = v.sumRange(epoch, m, 1, v.buckets)
		}
		if r, done := tryAddStep(w, old, e, n, others, limit); done {
			return r
		}
	}
}

// tryAddStep is one attempt of a check-and-add of n on counter w, read as
// old, for bucket e (truncated), where the other buckets of the window sum
// to others. It reports done=false when a concurrent change to w made the
// attempt fail; the caller then reads again and retries.
func tryAddStep(w *atomic.Uint64, old, e, n, others uint64, limit float64) (r tryAddResult, done bool) {
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
	if stale {
		if !w.CompareAndSwap(old, e<<valueBits|n) {
			return r, false
		}
		r.ok, r.reset, r.oldEpoch, r.oldValue = true, true, oe, old&valueMask
		return r, true
	}
	if cur+n > valueMask-valueHeadroom {
		return r, true
	}
	if !w.CompareAndSwap(old, old+n) {
		return r, false
	}
	r.ok = true
	return r, true
}

// sub takes back n from Sum metric m in bucket epoch; see LeapArray.Sub.
func (v *view) sub(epoch int64, m int, n uint64) bool {
	if n > MaxAdd {
		n = MaxAdd
	}
	w := v.word(epoch, m)
	e := uint64(epoch) & epochMask
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
