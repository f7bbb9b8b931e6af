package window

import (
	"math"
	"runtime"
	"sync/atomic"
	"time"
)

// countMetrics is the number of metrics the minute window always keeps:
// the counts Pass, Block, Complete and Error, which Snapshot, Total and the
// exporters read, and the RT sum, without which a second's AvgRT in a later
// History would divide a partial sum by a whole count. The other kept
// metrics (MinRT, MaxConcurrency) are the minute window's extras, made when
// a reader first needs them.
const countMetrics = int(RT) + 1

// minuteWindow is a node's minute window: the last minuteRing seconds that
// left the second-level window, as compact counts (see
// docs/design/architecture.md, "Memory per resource").
//
// It keeps one epoch for the whole window, not one per counter: head, the
// newest second it holds. Slot i holds the second congruent to i modulo
// minuteRing in (head-minuteRing, head]; a second that arrives beyond head
// first moves the seconds it pushes out (the slots between head and it) on,
// through retire, to the history window or the totals. A count is then a
// 32-bit word, not a 64-bit one of which 28 bits were the epoch: 1.25 KiB
// for the four counts and the RT sum of 64 seconds, where the seven packed
// words of the LeapArray before took 3.5 KiB (4 KiB in its size class).
//
// A count never wraps: the word's upper half is in hi, made the first time
// a count of the window passes 2^32 (a second-level bucket may carry up to
// 2^36 and a batch up to 2^30, see WithBatch), and a count that would pass
// 2^64 saturates.
//
// Writers are the node's retire hooks, which already run outside the hot
// path proper (once per second-level counter and 100 ms bucket). They take
// seq as a lock: odd while one writes. Readers take no lock: they read what
// they need and read it again when seq moved meanwhile (a sequence lock),
// so a reader never makes the request path wait, and a write waits only for
// another write (a few loads and stores; a move of up to 64 seconds on when
// a resource comes back from a long idle).
type minuteWindow struct {
	seq    atomic.Uint64
	head   atomic.Int64 // the newest second held
	retire RetireFunc[Metric]
	ext    atomic.Pointer[minuteExtras]
	hi     atomic.Pointer[[minuteRing * countMetrics]atomic.Uint32]
	lo     [minuteRing * countMetrics]atomic.Uint32 // by slot, then metric
}

// minuteExtras are the minute window's MinRT and MaxConcurrency, by slot:
// what History and the engine's inbound node read, and Snapshot does not.
// A MinRT is kept plus one (zero: none); MinRT and MaxConcurrency values
// are at most MaxAdd, so 32 bits hold them.
type minuteExtras [minuteRing]struct {
	minRT  atomic.Uint32
	maxCon atomic.Uint32
}

// newMinuteWindow returns an empty minute window whose seconds, when they
// leave it, go to retire.
func newMinuteWindow(retire RetireFunc[Metric]) *minuteWindow {
	return &minuteWindow{retire: retire}
}

// armExtras makes the extras when they do not exist yet. Until then a
// second's RT, MinRT and MaxConcurrency pass the minute window by.
func (w *minuteWindow) armExtras() {
	if w.ext.Load() == nil {
		w.ext.CompareAndSwap(nil, new(minuteExtras))
	}
}

// hasExtras reports whether the extras exist.
func (w *minuteWindow) hasExtras() bool { return w.ext.Load() != nil }

func (w *minuteWindow) lock() {
	for spins := 0; ; spins++ {
		if s := w.seq.Load(); s&1 == 0 && w.seq.CompareAndSwap(s, s+1) {
			return
		}
		if spins >= 16 {
			runtime.Gosched()
		}
	}
}

func (w *minuteWindow) unlock() { w.seq.Add(1) }

// add counts v of metric m (a kept metric) for the second that contains
// start, and reports false when it counts nothing: m is an extra and the
// extras do not exist, or the second is older than the window holds (its
// slot has moved on to a later second). The caller passes v on then.
func (w *minuteWindow) add(m Metric, start int64, v uint64) bool {
	s := start / int64(time.Second)
	w.lock()
	ok := w.addLocked(m, s, v)
	w.unlock()
	return ok
}

func (w *minuteWindow) addLocked(m Metric, s int64, v uint64) bool {
	var ext *minuteExtras
	if int(m) >= countMetrics {
		if ext = w.ext.Load(); ext == nil {
			return false
		}
	}
	head := w.head.Load()
	if s <= head-minuteRing {
		return false
	}
	if s > head {
		w.advance(head, s)
		w.head.Store(s)
	}
	i := int(s & (minuteRing - 1))
	switch m {
	case MinRT:
		x := &ext[i].minRT
		if c, v1 := x.Load(), uint32(min(v, MaxAdd)+1); c == 0 || v1 < c {
			x.Store(v1)
		}
	case MaxConcurrency:
		x := &ext[i].maxCon
		if v1 := uint32(min(v, MaxAdd)); v1 > x.Load() {
			x.Store(v1)
		}
	default:
		k := i*countMetrics + int(m)
		w.setCount(k, satAdd(w.count(k), v))
	}
	return true
}

// satAdd returns a+b, or the largest uint64 when that overflows.
func satAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

// count returns count word k (under the lock, or in a reader's sequence).
func (w *minuteWindow) count(k int) uint64 {
	v := uint64(w.lo[k].Load())
	if hi := w.hi.Load(); hi != nil {
		v |= uint64(hi[k].Load()) << 32
	}
	return v
}

// setCount sets count word k to v, making the upper halves when v needs
// one (under the lock).
func (w *minuteWindow) setCount(k int, v uint64) {
	w.lo[k].Store(uint32(v))
	hi := w.hi.Load()
	if hi == nil {
		if v>>32 == 0 {
			return
		}
		hi = new([minuteRing * countMetrics]atomic.Uint32)
		w.hi.Store(hi)
	}
	hi[k].Store(uint32(v >> 32))
}

// advance moves on the seconds that a head at s pushes out of the window,
// which had its head at old < s (under the lock).
func (w *minuteWindow) advance(old, s int64) {
	for t := max(old+1, s-minuteRing+1); t <= s; t++ {
		i := int(t & (minuteRing - 1))
		w.evict(i, secondIn(i, old))
	}
}

// secondIn returns the second that slot i holds with the window's head at
// head: the latest second up to head congruent to i modulo minuteRing.
func secondIn(i int, head int64) int64 {
	return head - (head-int64(i))&(minuteRing-1)
}

// evict empties slot i, which holds second sec, passing its values on to
// retire (under the lock).
func (w *minuteWindow) evict(i int, sec int64) {
	start := sec * int64(time.Second)
	for m := 0; m < countMetrics; m++ {
		k := i*countMetrics + m
		if v := w.count(k); v != 0 {
			w.setCount(k, 0)
			w.retire(Metric(m), start, v)
		}
	}
	ext := w.ext.Load()
	if ext == nil {
		return
	}
	x := &ext[i]
	if v := x.minRT.Swap(0); v != 0 {
		w.retire(MinRT, start, uint64(v-1))
	}
	if v := x.maxCon.Swap(0); v != 0 {
		w.retire(MaxConcurrency, start, uint64(v))
	}
}

// column copies metric m of every slot into col (a MinRT plus one, zero for
// none; zeros for an extra when the extras do not exist) and returns the
// head they go with: a consistent copy, read again while a writer moved
// the window meanwhile.
func (w *minuteWindow) column(m Metric, col *[minuteRing]uint64) (head int64) {
	for spins := 0; ; spins++ {
		if s := w.seq.Load(); s&1 == 0 {
			head = w.head.Load()
			w.load(m, col)
			if w.seq.Load() == s {
				return head
			}
		}
		if spins >= 16 {
			runtime.Gosched()
		}
	}
}

// load is column's copy, not checked against writers.
func (w *minuteWindow) load(m Metric, col *[minuteRing]uint64) {
	if int(m) < countMetrics {
		hi := w.hi.Load()
		for i := range col {
			k := i*countMetrics + int(m)
			col[i] = uint64(w.lo[k].Load())
			if hi != nil {
				col[i] |= uint64(hi[k].Load()) << 32
			}
		}
		return
	}
	ext := w.ext.Load()
	for i := range col {
		switch {
		case ext == nil:
			col[i] = 0
		case m == MinRT:
			col[i] = uint64(ext[i].minRT.Load())
		default:
			col[i] = uint64(ext[i].maxCon.Load())
		}
	}
}

// at returns second sec's value in col (from column, with head), and false
// when the window does not hold the second or holds no value for it; a
// MinRT without its plus one.
func at(col *[minuteRing]uint64, head, sec int64, m Metric) (uint64, bool) {
	if sec > head || sec <= head-minuteRing {
		return 0, false
	}
	v := col[sec&(minuteRing-1)]
	if v == 0 {
		return 0, false
	}
	if m == MinRT {
		v--
	}
	return v, true
}

// valueOK returns metric m of second sec, and false when the window does
// not hold it (or, for a MinRT, holds no value).
func (w *minuteWindow) valueOK(sec int64, m Metric) (uint64, bool) {
	var col [minuteRing]uint64
	head := w.column(m, &col)
	return at(&col, head, sec, m)
}

// Sum returns Sum metric m over the seconds of the minute ending with the
// second that contains now, and the second after it (as LeapArray.Sum).
func (w *minuteWindow) Sum(now int64, m Metric) uint64 {
	var col [minuteRing]uint64
	head := w.column(m, &col)
	ep := now / int64(time.Second)
	var s uint64
	for sec := ep - MinuteBuckets + 1; sec <= ep+1; sec++ {
		v, _ := at(&col, head, sec, m)
		s += v
	}
	return s
}

// Unretired calls f with every second of the window that holds a value of
// metric m (a MinRT without its plus one), with the second's start. now
// is not needed (the window keeps whole seconds); it is there to read as
// LeapArray.Unretired does.
func (w *minuteWindow) Unretired(_ int64, m Metric, f func(bucketStart int64, v uint64)) {
	var col [minuteRing]uint64
	head := w.column(m, &col)
	for i, v := range col {
		if v == 0 {
			continue
		}
		if m == MinRT {
			v--
		}
		f(secondIn(i, head)*int64(time.Second), v)
	}
}
