package window

// addWhole adds n to Sum metric m of the bucket that contains now, as much
// of it as the bucket's counter holds, unless the bucket's slot holds a
// newer bucket: then it adds nothing and reports false (see
// addUnlessBehind). It returns the part of n that did not fit: a counter
// saturates at 2^36 - 2^32, and a second of the history window can be
// larger (the minute window keeps 64-bit counts), so a retire hook passes
// the rest on to the totals rather than lose it. Unlike Add, it does not
// clamp n to MaxAdd.
func (a *LeapArray[M]) addWhole(now int64, m M, n uint64) (rest uint64, ok bool) {
	const most = valueMask - valueHeadroom
	epoch := now / a.width
	e := uint64(epoch) & epochMask
	w := a.word(epoch, m)
	for {
		old := w.Load()
		oe := old >> valueBits
		if isStale(old, e) {
			put := min(n, most)
			if w.CompareAndSwap(old, e<<valueBits|put) {
				a.retired(m, epoch, e, oe, old&valueMask)
				return n - put, true
			}
			continue
		}
		if oe != e {
			return n, false // a newer bucket
		}
		put := min(n, most-min(old&valueMask, most))
		if w.CompareAndSwap(old, old+put) {
			return n - put, true
		}
	}
}
