package stat

import "go.uber.org/atomic"

// SumBefore returns metric m summed over the one-second window ending at
// now, leaving out the bucket that contains now: the part of the window that
// no longer changes (short of a racing caller whose clock reading is a
// little older).
func (n *Node) SumBefore(now int64, m Metric) uint64 {
	return n.sec.sumOthers(now/int64(BucketWidth), m)
}

// WindowCache reads a node's one-second pass count, completion count and RT
// sum cheaply enough for every request: it caches the sums of the window's
// closed buckets once per 100 ms bucket and adds the current bucket's
// counters, three atomic loads, to them. A full scan of the window is paid
// once per bucket by one caller (and by callers whose clock reading is
// older than the cached bucket).
//
// The figures are those of Node.Sum except for entries that race a bucket
// boundary: an entry counted into the previous bucket after the cache for
// the new one was filled is missed until that bucket leaves the window.
//
// A WindowCache is safe for concurrent use and never blocks or allocates.
type WindowCache struct {
	node *Node
	// seq is a sequence lock: the bucket index + 1 of the cached sums, 0
	// before the first fill, -1 while one caller writes them.
	seq                atomic.Int64
	pass, complete, rt atomic.Uint64
}

// NewWindowCache returns a cache over n.
func NewWindowCache(n *Node) *WindowCache { return &WindowCache{node: n} }

// Sums returns, for the one-second window ending at now, the passed count,
// the completed count and the RT sum in microseconds (all by batch).
func (w *WindowCache) Sums(now int64) (pass, complete, rtMicros uint64) {
	ep := now / int64(BucketWidth)
	seq := ep + 1
	if w.seq.Load() == seq {
		pass, complete, rtMicros = w.pass.Load(), w.complete.Load(), w.rt.Load()
		if w.seq.Load() != seq {
			pass, complete, rtMicros = w.fill(now, seq)
		}
	} else {
		pass, complete, rtMicros = w.fill(now, seq)
	}
	// The current bucket: one slot of the window, three words.
	a := w.node.sec
	base := int(ep%SecondBuckets) * a.metrics
	e := uint64(ep) & epochMask
	if v := a.words[base+int(Pass)].Load(); v>>valueBits == e {
		pass += v & valueMask
	}
	if v := a.words[base+int(Complete)].Load(); v>>valueBits == e {
		complete += v & valueMask
	}
	if v := a.words[base+int(RT)].Load(); v>>valueBits == e {
		rtMicros += v & valueMask
	}
	return pass, complete, rtMicros
}

// fill sums the closed buckets and publishes them, unless a later bucket's
// sums are cached or another caller is writing.
func (w *WindowCache) fill(now, seq int64) (pass, complete, rt uint64) {
	pass = w.node.SumBefore(now, Pass)
	complete = w.node.SumBefore(now, Complete)
	rt = w.node.SumBefore(now, RT)
	if cur := w.seq.Load(); cur >= 0 && cur < seq && w.seq.CompareAndSwap(cur, -1) {
		w.pass.Store(pass)
		w.complete.Store(complete)
		w.rt.Store(rt)
		w.seq.Store(seq)
	}
	return pass, complete, rt
}
