package window

import (
	"math"
	"time"

	"sync/atomic"
)

// SumBefore returns metric m summed over the one-second window ending at
// now, leaving out the bucket that contains now: the part of the window that
// no longer changes (short of a racing caller whose clock reading is a
// little older).
func (n *Node) SumBefore(now int64, m Metric) uint64 {
	ep := now / int64(BucketWidth)
	s := n.sec.view.sum(ep, int(m), 1, SecondBuckets)
	if m == Complete {
		s += n.sec.view.sum(ep, int(Untimed), 1, SecondBuckets)
	}
	if st := n.stripes.Load(); st != nil {
		s += st.sum(ep, m, 1, SecondBuckets)
		if m == Complete {
			s += st.sum(ep, Untimed, 1, SecondBuckets)
		}
	}
	return s
}

// WindowCache reads a node's one-second pass count, completion count and RT
// sum (Sums), and the figures BBR weighs (Best), cheaply enough for every
// request: it caches the figures of the window's closed buckets once per
// 100 ms bucket and combines the current bucket's counters, a few atomic
// loads, with them. A full scan of the window is paid
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
	// bseq is the sequence lock of Best's figures, as seq is of the sums.
	// minRT holds the smallest closed RT + 1, 0 when there is none.
	bseq               atomic.Int64
	maxComplete, minRT atomic.Uint64
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
	// The current bucket: one slot of the window, four words.
	a := &w.node.sec
	base := a.slotOf(ep) * a.stride
	e := uint64(ep) & epochMask
	if v := a.words[base+int(Pass)].Load(); v>>valueBits == e {
		pass += v & valueMask
	}
	if v := a.words[base+int(Complete)].Load(); v>>valueBits == e {
		complete += v & valueMask
	}
	if v := a.words[base+int(Untimed)].Load(); v>>valueBits == e {
		complete += v & valueMask
	}
	if v := a.words[base+int(RT)].Load(); v>>valueBits == e {
		rtMicros += v & valueMask
	}
	if st := w.node.stripes.Load(); st != nil {
		pass += st.count(ep, Pass)
		complete += st.count(ep, Complete) + st.count(ep, Untimed)
		rtMicros += st.count(ep, RT)
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

// MinRTMemory is how far back Node.RecentMinRT and WindowCache.Best look for
// the shortest response time: the one-second span that contains the instant
// asked about and the nine before it. BBR (after TCP BBR, which keeps the
// minimum round trip of the last ten seconds) needs a minimum RT that an
// overload does not inflate: under sustained overload every request waits
// behind the others, so the shortest RT of the last second alone grows with
// the queue and stops measuring the service time.
const MinRTMemory = 10 * time.Second

// RecentMinRT returns the smallest response time, in microseconds, of an
// entry that completed within MinRTMemory of now (in the ten whole seconds
// up to and including the one that contains now), and false when none did.
// It reads the one-second window and the minute window: about seventy words.
func (n *Node) RecentMinRT(now int64) (int64, bool) {
	v, ok := n.minRTSince(now, memoryStart(now), math.MaxInt64)
	return int64(v), ok
}

// memoryStart is the start of the MinRTMemory span that ends in the second
// containing now.
func memoryStart(now int64) int64 {
	sec := int64(time.Second)
	return (now/sec+1)*sec - int64(MinRTMemory)
}

// minRTSince returns the smallest MinRT of buckets that start at or after
// from and, for the one-second window's buckets, before until.
func (n *Node) minRTSince(now, from, until int64) (uint64, bool) {
	best, ok := uint64(0), false
	take := func(v uint64) {
		if !ok || v < best {
			best, ok = v, true
		}
	}
	if mw := n.minute.Load(); mw != nil {
		mw.Unretired(now, MinRT, func(start int64, v uint64) {
			if start >= from {
				take(v)
			}
		})
	}
	n.unretiredSec(now, MinRT, func(start int64, v uint64) {
		if start >= from && start < until {
			take(v)
		}
	})
	return best, ok
}

// maxCompleteBefore returns the largest Complete count of a single bucket of
// the one-second window ending at bucket epoch, leaving out that bucket.
func (n *Node) maxCompleteBefore(epoch int64) uint64 {
	return n.maxCompleteOf(epoch, n.sec.slotOf(epoch))
}

// Best returns the two figures BBR weighs at now: the highest completion
// count (by batch) of a single 100 ms bucket of the one-second window, and
// the smallest response time in microseconds of an entry that completed
// within MinRTMemory, with ok false when none did. They are those of
// Node.Bucket/MaxCompletePerSecond and Node.RecentMinRT.
//
// Like Sums, it caches the figures of the closed buckets once per 100 ms
// bucket (a scan of about eighty words by one caller) and combines them with
// the current bucket's two counters: a few atomic loads per call.
func (w *WindowCache) Best(now int64) (maxComplete, minRT uint64, ok bool) {
	ep := now / int64(BucketWidth)
	seq := ep + 1
	var closedMin uint64 // the smallest closed RT + 1; 0 when none
	if w.bseq.Load() == seq {
		maxComplete, closedMin = w.maxComplete.Load(), w.minRT.Load()
		if w.bseq.Load() != seq {
			maxComplete, closedMin = w.fillBest(now, seq)
		}
	} else {
		maxComplete, closedMin = w.fillBest(now, seq)
	}
	a := &w.node.sec
	base := a.slotOf(ep) * a.stride
	e := uint64(ep) & epochMask
	var cur uint64
	if v := a.words[base+int(Complete)].Load(); v>>valueBits == e {
		cur = v & valueMask
	}
	if v := a.words[base+int(Untimed)].Load(); v>>valueBits == e {
		cur += v & valueMask
	}
	if st := w.node.stripes.Load(); st != nil {
		cur += st.count(ep, Complete) + st.count(ep, Untimed)
		if x := st.count(ep, MinRT); x != 0 && (closedMin == 0 || x < closedMin) {
			closedMin = x
		}
	}
	maxComplete = max(maxComplete, cur)
	if v := a.words[base+int(MinRT)].Load(); v>>valueBits == e && v&valueMask != 0 {
		if closedMin == 0 || v&valueMask < closedMin {
			closedMin = v & valueMask
		}
	}
	if closedMin == 0 {
		return maxComplete, 0, false
	}
	return maxComplete, closedMin - 1, true
}

// fillBest computes Best's figures for the closed buckets and publishes
// them, unless a later bucket's are cached or another caller is writing.
func (w *WindowCache) fillBest(now, seq int64) (maxComplete, minRT uint64) {
	ep := seq - 1
	maxComplete = w.node.maxCompleteBefore(ep)
	if v, ok := w.node.minRTSince(now, memoryStart(now), ep*int64(BucketWidth)); ok {
		minRT = v + 1
	}
	if cur := w.bseq.Load(); cur >= 0 && cur < seq && w.bseq.CompareAndSwap(cur, -1) {
		w.maxComplete.Store(maxComplete)
		w.minRT.Store(minRT)
		w.bseq.Store(seq)
	}
	return maxComplete, minRT
}
