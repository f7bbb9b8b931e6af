package window

import (
	"fmt"
	"time"

	"sync/atomic"
)

// Word layout: every counter is one 64-bit word holding the (truncated) epoch
// of the bucket it belongs to in its top epochBits bits and the value in the
// low valueBits bits. Resetting a stale counter and adding the first event of
// the new bucket is then a single compare-and-swap: exactly one caller wins
// the reset, it learns the exact old value (which it hands to the retire
// hook), and no add is lost or counted twice across the reset.
const (
	epochBits = 28
	valueBits = 64 - epochBits
	valueMask = uint64(1)<<valueBits - 1
	epochMask = uint64(1)<<epochBits - 1
	// half of the epoch space: readers that place a stored epoch relative
	// to theirs (Unretired) take one less than this far behind as older,
	// anything else as newer.
	epochHalf = uint64(1) << (epochBits - 1)
	// maxAhead is the furthest, in buckets, a stored epoch may be ahead of
	// a writer's and still count as a newer bucket (written by a caller
	// with a later clock reading) that the writer must not reset. Only a
	// writer whose reading is that stale (over 17 minutes at the narrowest
	// bucket, 1 ms) could see a newer bucket so far ahead; any other epoch
	// is an older one, however long ago it was written. (Taking half the
	// epoch space as "newer", as before, misread buckets written more
	// than 2^27 buckets before, and the zero epoch of a counter never
	// written, once the clock passed 2^27 buckets: 37 hours of uptime for
	// 1 ms buckets, 155 days for 100 ms ones. Adds then went to a word no
	// sum counts.)
	maxAhead = uint64(1) << 20
	// headroom kept free below valueMask so that racing adders can never
	// carry into the epoch bits.
	valueHeadroom = uint64(1) << 32
	// MaxAdd is the largest amount one Add may carry; larger amounts are
	// clamped.
	MaxAdd = uint64(1) << 30
)

// Kind says how a metric's bucket combines values.
type Kind uint8

const (
	// Sum adds values (counts, RT sums).
	Sum Kind = iota
	// Min keeps the smallest value (minimum RT).
	Min
	// Max keeps the largest value (maximum concurrency); zero means none.
	Max
)

// RetireFunc receives the value of a counter whose bucket went stale, with
// the start time (nanoseconds) of the bucket it belonged to. It is called by
// exactly one goroutine per retired counter, outside any lock.
type RetireFunc[M ~uint8] func(m M, bucketStart int64, v uint64)

// LeapArray is a lock-free sliding window of fixed-width time buckets, each
// holding one counter per metric M. Buckets are reused in place as time
// moves: the slot of bucket b is b mod Buckets.
//
// Time is passed in by the caller as nanoseconds from a monotonic clock and
// must not be negative. Add and Read are safe for concurrent use and never
// block or allocate.
//
// An add that races a reset lands either in the new bucket (when the reset
// happened first) or in the old one just before it is retired; it is never
// lost and never counted twice. A caller whose clock reading is older than
// the bucket now in its slot counts into that newer bucket.
type LeapArray[M ~uint8] struct {
	// The counters, their shape (words per slot = metrics; mask = ring - 1,
	// so the slot of epoch e is e & mask, no division) and the number of
	// buckets in the window.
	view
	width   int64
	ring    int    // slots in storage: the power of two >= buckets
	minMask uint64 // bit m set: metric m is a Min metric
	maxMask uint64 // bit m set: metric m is a Max metric
	kinds   []Kind
	retire  RetireFunc[M]
}

// NewLeapArray returns a window of the given interval split into buckets
// buckets, counting len(kinds) metrics (metric i combines with kinds[i]).
// retire, if not nil, receives each stale counter's value. It returns an
// error when the interval is not a positive multiple of buckets nanoseconds.
func NewLeapArray[M ~uint8](interval time.Duration, buckets int, kinds []Kind, retire RetireFunc[M]) (*LeapArray[M], error) {
	a := &LeapArray[M]{}
	if err := a.init(interval, buckets, kinds, retire, nil, 0); err != nil {
		return nil, err
	}
	return a, nil
}

// RingSize returns the number of slots a window of buckets buckets keeps:
// the smallest power of two at least buckets. Storage is a ring of that
// many slots, so finding a bucket's slot is a mask rather than a division;
// slots beyond the window's buckets hold older buckets, which the epochs
// exclude from every sum.
func RingSize(buckets int) int {
	r := 1
	for r < buckets {
		r <<= 1
	}
	return r
}

// init sets up a, using words for the counters when it has exactly
// RingSize(buckets)*stride of them (so an owner can keep them inline), or
// fresh storage otherwise. stride is the number of words per slot: at least
// len(kinds) (zero means len(kinds)); a larger stride pads each slot, so an
// owner can give every slot a cache line of its own.
func (a *LeapArray[M]) init(interval time.Duration, buckets int, kinds []Kind, retire RetireFunc[M], words []atomic.Uint64, stride int) error {
	if buckets <= 0 || buckets > 1<<16 {
		return fmt.Errorf("sluice: bucket count %d out of range [1, 65536]", buckets)
	}
	if interval <= 0 || int64(interval)%int64(buckets) != 0 {
		return fmt.Errorf("sluice: interval %v is not a positive multiple of %d buckets", interval, buckets)
	}
	if len(kinds) == 0 || len(kinds) > 64 {
		return fmt.Errorf("sluice: metric count %d out of range [1, 64]", len(kinds))
	}
	if stride < len(kinds) {
		stride = len(kinds)
	}
	ring := RingSize(buckets)
	if len(words) != ring*stride {
		words = make([]atomic.Uint64, ring*stride)
	}
	*a = LeapArray[M]{
		view:   view{words: words, stride: stride, mask: int64(ring - 1), buckets: buckets},
		width:  int64(interval) / int64(buckets),
		ring:   ring,
		kinds:  append([]Kind(nil), kinds...),
		retire: retire,
	}
	for i, k := range kinds {
		switch k {
		case Min:
			a.minMask |= 1 << uint(i)
		case Max:
			a.maxMask |= 1 << uint(i)
		}
	}
	return nil
}

// MustLeapArray is NewLeapArray for arguments known to be valid; it panics on
// an error.
func MustLeapArray[M ~uint8](interval time.Duration, buckets int, kinds []Kind, retire RetireFunc[M]) *LeapArray[M] {
	a, err := NewLeapArray(interval, buckets, kinds, retire)
	if err != nil {
		panic(err)
	}
	return a
}

// BucketWidth returns the length of one bucket in nanoseconds.
func (a *LeapArray[M]) BucketWidth() int64 { return a.width }

// Buckets returns the number of buckets.
func (a *LeapArray[M]) Buckets() int { return a.buckets }

// Interval returns the window's length in nanoseconds.
func (a *LeapArray[M]) Interval() int64 { return a.width * int64(a.buckets) }

// Epoch returns the index of the bucket that contains now.
func (a *LeapArray[M]) Epoch(now int64) int64 { return now / a.width }

func (a *LeapArray[M]) word(epoch int64, m M) *atomic.Uint64 {
	return &a.words[a.slotOf(epoch)*a.stride+int(m)]
}

// slotOf returns the storage slot of bucket epoch.
func (a *LeapArray[M]) slotOf(epoch int64) int {
	return int(epoch & a.mask)
}

// Add adds n to metric m in the bucket that contains now (for a Min metric it
// lowers the bucket's minimum to n, for a Max metric it raises the bucket's
// maximum to n). Amounts above MaxAdd are clamped.
func (a *LeapArray[M]) Add(now int64, m M, n uint64) {
	a.AddEpoch(now/a.width, m, n)
}

// AddEpoch is Add for a precomputed bucket index (see Epoch).
func (a *LeapArray[M]) AddEpoch(epoch int64, m M, n uint64) {
	if n > MaxAdd {
		n = MaxAdd
	}
	w := a.word(epoch, m)
	e := uint64(epoch) & epochMask
	if a.minMask&(1<<uint(m)) != 0 {
		a.lower(w, m, epoch, e, n+1) // +1: zero means "no value"
		return
	}
	if a.maxMask&(1<<uint(m)) != 0 {
		a.raise(w, m, epoch, e, n)
		return
	}
	a.addSum(w, m, epoch, e, n)
}

// addUnlessBehind is Add, except that when the bucket's slot holds a newer
// bucket it adds nothing and reports false (Add would count n into the
// newer bucket): for a retire hook that places a count which stayed
// elsewhere for longer than this window holds its bucket.
func (a *LeapArray[M]) addUnlessBehind(now int64, m M, n uint64) bool {
	epoch := now / a.width
	e := uint64(epoch) & epochMask
	if old := a.word(epoch, m).Load(); old>>valueBits != e && !isStale(old, e) {
		return false
	}
	a.AddEpoch(epoch, m, n)
	return true
}

// Slot returns the counters of the bucket slot that holds epoch, one per
// metric, for callers that write several metrics of one bucket (see
// AddSumAt and AddMinAt).
func (a *LeapArray[M]) Slot(epoch int64) []atomic.Uint64 {
	i, n := a.slotOf(epoch)*a.stride, len(a.kinds)
	return a.words[i : i+n : i+n]
}

// AddSumAt adds n to Sum metric m of slot (from Slot(epoch)). n must not
// exceed MaxAdd.
func (a *LeapArray[M]) AddSumAt(slot []atomic.Uint64, epoch int64, m M, n uint64) {
	a.addSum(&slot[m], m, epoch, uint64(epoch)&epochMask, n)
}

// AddMinAt lowers Min metric m of slot (from Slot(epoch)) to v. v must not
// exceed MaxAdd.
func (a *LeapArray[M]) AddMinAt(slot []atomic.Uint64, epoch int64, m M, v uint64) {
	a.lower(&slot[m], m, epoch, uint64(epoch)&epochMask, v+1)
}

// RaiseAt raises Max metric m of slot (from Slot(epoch)) to v, which is
// clamped to MaxAdd; a v of zero or less does nothing. It is the slow part
// of a maximum: callers compare with the counter first (a load), and call
// it only when v may be a new maximum or the counter holds an older bucket.
func (a *LeapArray[M]) RaiseAt(slot []atomic.Uint64, epoch int64, m M, v int64) {
	if v <= 0 {
		return
	}
	a.raise(&slot[m], m, epoch, uint64(epoch)&epochMask, clampMax(v))
}

func clampMax(v int64) uint64 {
	if uint64(v) > MaxAdd {
		return MaxAdd
	}
	return uint64(v)
}

// isStale reports whether counter word w, about to be written for the
// bucket of truncated epoch e, holds an older bucket, which the writer
// resets: a bucket other than e holding nothing, or any other bucket not at
// most maxAhead buckets ahead of e. A word ahead by at most that much holds
// a newer bucket, which the writer adds to instead (see LeapArray).
func isStale(w, e uint64) bool {
	oe := w >> valueBits
	if oe == e {
		return false
	}
	return w&valueMask == 0 || (oe-e)&epochMask > maxAhead
}

func (a *LeapArray[M]) addSum(w *atomic.Uint64, m M, epoch int64, e, n uint64) {
	for {
		old := w.Load()
		oe := old >> valueBits
		if isStale(old, e) {
			// Stale: reset it with our value in one step; the winner retires
			// the old value.
			if w.CompareAndSwap(old, e<<valueBits|n) {
				a.retired(m, epoch, e, oe, old&valueMask)
				return
			}
			continue
		}
		if old&valueMask+n > valueMask-valueHeadroom {
			// Saturate rather than carry into the epoch bits.
			if w.CompareAndSwap(old, oe<<valueBits|(valueMask-valueHeadroom)) {
				return
			}
			continue
		}
		w.Add(n)
		return
	}
}

// lower lowers Min counter w (of metric m, bucket epoch, truncated to e) to
// v, which is stored plus one; a stale counter is reset to v.
func (a *LeapArray[M]) lower(w *atomic.Uint64, m M, epoch int64, e, v uint64) {
	for {
		old := w.Load()
		oe := old >> valueBits
		if isStale(old, e) {
			if w.CompareAndSwap(old, e<<valueBits|v) {
				a.retired(m, epoch, e, oe, old&valueMask)
				return
			}
			continue
		}
		if cur := old & valueMask; cur != 0 && cur <= v {
			return
		}
		if w.CompareAndSwap(old, oe<<valueBits|v) {
			return
		}
	}
}

// raise raises Max counter w (of metric m, bucket epoch, truncated to e) to
// v; a stale counter is reset to v. A compare-and-swap only when v is above
// the bucket's maximum.
func (a *LeapArray[M]) raise(w *atomic.Uint64, m M, epoch int64, e, v uint64) {
	if v == 0 {
		return
	}
	for {
		old := w.Load()
		oe := old >> valueBits
		if isStale(old, e) {
			if w.CompareAndSwap(old, e<<valueBits|v) {
				a.retired(m, epoch, e, oe, old&valueMask)
				return
			}
			continue
		}
		if old&valueMask >= v {
			return
		}
		if w.CompareAndSwap(old, oe<<valueBits|v) {
			return
		}
	}
}

func (a *LeapArray[M]) retired(m M, epoch int64, e, oe, v uint64) {
	if a.retire == nil || v == 0 {
		return
	}
	back := int64((e - oe) & epochMask)
	start := (epoch - back) * a.width
	if a.minMask&(1<<uint(m)) != 0 {
		v-- // stored with +1
	}
	a.retire(m, start, v)
}

// Sum returns the total of Sum metric m over the buckets of the window that
// ends with the bucket containing now.
func (a *LeapArray[M]) Sum(now int64, m M) uint64 {
	return a.SumEpoch(now/a.width, m, a.buckets)
}

// SumEpoch returns the total of metric m over the last n buckets up to and
// including bucket epoch (n is capped at Buckets). The bucket after epoch is
// included too when a caller with a slightly later clock reading has already
// started it, so a reader that lags a writer never under-counts.
func (a *LeapArray[M]) SumEpoch(epoch int64, m M, n int) uint64 {
	if n > a.buckets {
		n = a.buckets
	}
	return a.view.sum(epoch, int(m), 0, n)
}

// FreeAt returns the first bucket after epoch from whose start the window's
// sum of Sum metric m plus n is within limit, if nothing were added or taken
// back meanwhile, and false when n alone exceeds limit (see Window.FreeAt).
func (a *LeapArray[M]) FreeAt(epoch int64, m M, n uint64, limit float64) (int64, bool) {
	return a.view.freeAt(epoch, int(m), n, limit)
}

// Value returns metric m in the single bucket epoch, or zero when the slot
// holds another bucket.
func (a *LeapArray[M]) Value(epoch int64, m M) uint64 {
	v := a.view.value(epoch, int(m))
	if a.kinds[m] == Min && v != 0 {
		return v - 1 // stored plus one: zero means "no value"
	}
	return v
}

// valueOK returns metric m in the single bucket epoch, and false when the
// slot holds another bucket or (for a Min metric) no value.
func (a *LeapArray[M]) valueOK(epoch int64, m M) (uint64, bool) {
	w := a.word(epoch, m).Load()
	if w>>valueBits != uint64(epoch)&epochMask || w&valueMask == 0 {
		return 0, false
	}
	v := w & valueMask
	if a.kinds[m] == Min {
		v--
	}
	return v, true
}

// MinOf returns the smallest value of Min metric m over the window ending
// with the bucket containing now, and false when no bucket holds a value.
func (a *LeapArray[M]) MinOf(now int64, m M) (uint64, bool) {
	e := uint64(now/a.width) & epochMask
	best, ok := uint64(0), false
	for i := 0; i < a.ring; i++ {
		v := a.words[i*a.stride+int(m)].Load()
		d := (e - v>>valueBits) & epochMask
		if (d < uint64(a.buckets) || d == epochMask) && v&valueMask != 0 {
			if x := v&valueMask - 1; !ok || x < best {
				best, ok = x, true
			}
		}
	}
	return best, ok
}

// MaxBucket returns the largest single-bucket value of Sum metric m over the
// window ending with the bucket containing now.
func (a *LeapArray[M]) MaxBucket(now int64, m M) uint64 {
	e := uint64(now/a.width) & epochMask
	var best uint64
	for i := 0; i < a.ring; i++ {
		v := a.words[i*a.stride+int(m)].Load()
		d := (e - v>>valueBits) & epochMask
		if d < uint64(a.buckets) || d == epochMask {
			if x := v & valueMask; x > best {
				best = x
			}
		}
	}
	return best
}

// Unretired calls f with every counter of metric m that still holds a value,
// whatever its age, with the start time of its bucket computed relative to
// now. It is how readers account for values that no add has retired yet.
func (a *LeapArray[M]) Unretired(now int64, m M, f func(bucketStart int64, v uint64)) {
	epoch := now / a.width
	e := uint64(epoch) & epochMask
	for i := 0; i < a.ring; i++ {
		v := a.words[i*a.stride+int(m)].Load()
		val := v & valueMask
		if val == 0 {
			continue
		}
		if a.kinds[m] == Min {
			val--
		}
		d := (e - v>>valueBits) & epochMask
		var back int64
		if d < epochHalf {
			back = int64(d)
		} else {
			back = -int64(epochMask + 1 - d)
		}
		f((epoch-back)*a.width, val)
	}
}
