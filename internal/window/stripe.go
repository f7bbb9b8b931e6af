package window

import (
	"runtime"
	"sync/atomic"
	_ "unsafe" // go:linkname
)

// Striped counters: a node that several cores write at once spreads the
// counters every call writes over stripes, so that the cores stop passing
// the same cache lines back and forth (see docs/design/architecture.md,
// "Striped hot counters").
//
// A node starts with none: a call writes the concurrency word and the
// bucket slot of the second-level window, as it always did, and a node
// that no two cores write at once never pays for stripes. A pass loads its
// bucket's pass count before it adds to it, and an add that finds another
// value than the load (another core wrote the word in between) is
// contention; when stripeAfter of them fall in one 100 ms bucket, the node
// makes its stripes (LongAdder's cells, made on contention, as Java's
// Striped64 and Sentinel's metric buckets do). From then on a call writes the stripe of
// the processor (P) it runs on: its share of the concurrency and, for each
// metric a pass or an exit writes, one packed word holding the newest
// bucket the stripe wrote (epoch and value, as a LeapArray counter).
//
// When a stripe's word moves to a later bucket, the one caller that wins
// its compare-and-swap moves the old bucket's value into the second-level
// window's slot for it (flush), or, when that slot holds a newer bucket
// already, on into the minute window or the totals (retireSecond). Every
// count is thus in exactly one place at a time: a stripe word, a slot of
// the second-level window, or a later window. Readers add the stripes'
// words to the slots' by bucket, reading the slots first: a flush racing
// a reader can hide its value from that reader (as a retire racing Total
// always could), never count it twice.
//
// What changes on a striped node:
//
//   - Concurrency is the node's word plus every stripe's share: exact when
//     no call races the reader.
//   - MaxConcurrency: a pass does not know the node's concurrency without
//     reading every stripe, so a striped pass records no maximum of its
//     own. A stripe's first pass of a bucket, and one in maxEvery after,
//     raises the bucket's maximum to the concurrency it reads then (every
//     stripe's share), and History adds the concurrency at each second's
//     start, as before: the maximum of a second is then the highest of
//     those samples, which can miss a peak between two of them, where an
//     unstriped node's is exact. (A sample reads the stripes one after
//     another, so like every figure read while calls race it, it may be
//     off by what raced.)
//   - RT sampling for readers (SampleFirst) numbers the exits of a bucket
//     per stripe: the first SampleFirst exits of each stripe in a bucket
//     are timed, then one in SampleEvery. Each stripe's sample is the
//     same systematic sample, so the RT sum stays an unbiased estimate.
//
// Refusals (Block) are not striped: the refusal path writes its own
// counters by type anyway.

// stripeAfter is the number of contended pass counts (see addPass) in one
// 100 ms bucket after which a node makes its stripes. Cores that share a
// resource at full speed contend thousands of times a bucket; resources
// that two cores meet on by chance (round-robin over many) almost never do
// this often in one bucket, so they stay unstriped and pay no memory.
const stripeAfter = 64

// maxStripes caps the stripes of a node: their memory (128 bytes each),
// and what a reader of a striped node pays, one line a stripe.
// Concurrency is read on every entry by a system rule on inbound
// concurrency and by a concurrency rule on another resource, so on a host
// with more Ps than stripes, Ps share stripes (P mod stripes) rather than
// make those checks read a line per P.
const maxStripes = 16

// stripe is one processor's share of a node's hot counters: one line of
// words, and a line of padding so that no line of it is shared with a
// neighbour stripe (nor fetched with one, by processors that fetch lines in
// pairs). A node's stripes are one allocation of a power of two of them, in
// a size class whose objects start on a multiple of their size, so each
// stripe's words sit on one line: a reader of a figure reads one line a
// stripe.
type stripe struct {
	// words holds, by metric, a packed (epoch, value) word for each metric
	// a pass or an exit writes: Pass, Complete, Untimed, RT, MinRT and
	// Error. Block stays in the second-level window (its word here stays
	// zero), and so does MaxConcurrency, whose word here (concWord) holds
	// the stripe's share of the concurrency instead: passes less exits
	// through the stripe, as an int64.
	words [metricCount]atomic.Uint64
	_     [2*CacheLine - 8*int(metricCount)]byte
}

// concWord is the word of a stripe that holds its share of the concurrency.
const concWord = MaxConcurrency

// addConc adds d to the stripe's share of the concurrency.
func (s *stripe) addConc(d int64) { s.words[concWord].Add(uint64(d)) }

// stripeSet is a node's stripes: a power of two of them, indexed by P.
type stripeSet struct {
	mask   int
	stripe []stripe
}

//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// pick returns the stripe of the processor the caller runs on. A goroutine
// that moves to another P right after writes another P's stripe: correct,
// only slower.
func (st *stripeSet) pick() *stripe {
	p := procPin()
	procUnpin()
	return &st.stripe[p&st.mask]
}

func newStripeSet() *stripeSet {
	k := min(max(RingSize(runtime.GOMAXPROCS(0)), 2), maxStripes)
	return &stripeSet{mask: k - 1, stripe: make([]stripe, k)}
}

// stripe makes the node's stripes if it has none, and returns them.
func (n *Node) stripe() *stripeSet {
	if st := n.stripes.Load(); st != nil {
		return st
	}
	n.stripes.CompareAndSwap(nil, newStripeSet())
	return n.stripes.Load()
}

// Striped reports whether the node has made stripes (see stripeAfter).
func (n *Node) Striped() bool { return n.stripes.Load() != nil }

// Stripe makes the node's stripes now, as contention would (for tests of
// the engine on a striped node).
func (n *Node) Stripe() { n.stripe() }

// addPass adds v to the Pass word w of the bucket slot of ep, as addSum
// does, and notes contention when another caller changed the word between
// this one's load and its add: the add's result tells, so an uncontended
// pass pays nothing for the watch.
func (n *Node) addPass(w *atomic.Uint64, ep int64, v uint64) {
	e := uint64(ep) & epochMask
	old := w.Load()
	if isStale(old, e) || old&valueMask+v > valueMask-valueHeadroom {
		n.sec.addSum(w, Pass, ep, e, v) // a reset or saturation: rare
		return
	}
	if w.Add(v)-v != old {
		n.contention(ep)
	}
}

// contention notes a contended pass at bucket ep and makes the stripes at
// the stripeAfter-th of a bucket. The count is a heuristic: a
// racing reset may drop a few.
func (n *Node) contention(ep int64) {
	e := uint64(ep) & epochMask
	old := n.contended.Load()
	if old>>valueBits != e {
		n.contended.CompareAndSwap(old, e<<valueBits|1)
		return
	}
	if n.contended.Add(1)&valueMask == stripeAfter {
		n.stripe()
	}
}

// stripeAdd adds v to Sum metric m of stripe s at bucket ep and returns
// the stripe's value for the bucket after the add.
func (n *Node) stripeAdd(s *stripe, m Metric, ep int64, v uint64) uint64 {
	w := &s.words[m]
	e := uint64(ep) & epochMask
	for {
		old := w.Load()
		if isStale(old, e) {
			if w.CompareAndSwap(old, e<<valueBits|v) {
				n.flush(m, ep, e, old)
				return v
			}
			continue
		}
		if old>>valueBits != e {
			// The stripe holds a later bucket (a caller on this P read
			// the clock after this one): the slot of ep takes the add,
			// so that every count stays in its own bucket.
			return n.sec.addSumAfter(&n.slot(ep)[m], m, ep, v)
		}
		if old&valueMask+v > valueMask-valueHeadroom {
			if w.CompareAndSwap(old, old>>valueBits<<valueBits|(valueMask-valueHeadroom)) {
				return valueMask - valueHeadroom
			}
			continue
		}
		return w.Add(v) & valueMask
	}
}

// stripeLower lowers Min metric m of stripe s at bucket ep to v.
func (n *Node) stripeLower(s *stripe, m Metric, ep int64, v uint64) {
	w := &s.words[m]
	e := uint64(ep) & epochMask
	v1 := v + 1 // stored plus one: zero is "no value"
	for {
		old := w.Load()
		if isStale(old, e) {
			if w.CompareAndSwap(old, e<<valueBits|v1) {
				n.flush(m, ep, e, old)
				return
			}
			continue
		}
		if old>>valueBits != e { // a later bucket: as in stripeAdd
			n.sec.AddMinAt(n.slot(ep), ep, m, v)
			return
		}
		if cur := old & valueMask; cur != 0 && cur <= v1 {
			return
		}
		if w.CompareAndSwap(old, old>>valueBits<<valueBits|v1) {
			return
		}
	}
}

// flush moves old, the word of metric m a stripe held before a caller at
// bucket ep (truncated e) reset it, into the second-level window's slot
// for its bucket, or on to the later windows when that slot holds a newer
// bucket.
func (n *Node) flush(m Metric, ep int64, e, old uint64) {
	v := old & valueMask
	if v == 0 {
		return
	}
	oe := old >> valueBits
	oep := ep - int64((e-oe)&epochMask) // the stripe's bucket
	w := &n.slot(oep)[m]
	for {
		cur := w.Load()
		ce := cur >> valueBits
		switch {
		case ce == oe:
			nv := cur
			switch x := cur & valueMask; {
			case nodeKinds[m] == Min:
				if x != 0 && x <= v {
					return
				}
				nv = oe<<valueBits | v
			case x+v > valueMask-valueHeadroom:
				nv = oe<<valueBits | (valueMask - valueHeadroom)
			default:
				nv = cur + v
			}
			if w.CompareAndSwap(cur, nv) {
				return
			}
		case isStale(cur, oe):
			if w.CompareAndSwap(cur, oe<<valueBits|v) {
				n.sec.retired(m, oep, oe, ce, cur&valueMask)
				return
			}
		default: // the slot moved on: its bucket has left the window
			if nodeKinds[m] == Min {
				v--
			}
			n.retireSecond(m, oep*int64(BucketWidth), v)
			return
		}
	}
}

// stripesCount returns metric m of bucket ep summed over the stripes (for
// MinRT: the smallest, plus one, 0 for none).
func (st *stripeSet) count(ep int64, m Metric) uint64 {
	var s uint64
	if m == concWord {
		return 0
	}
	for i := range st.stripe {
		x := count(st.stripe[i].words[m].Load(), ep)
		if nodeKinds[m] != Min {
			s += x
		} else if x != 0 && (s == 0 || x < s) {
			s = x
		}
	}
	return s
}

// sum returns Sum metric m over the stripes' words that hold a bucket of
// the window epoch-from .. epoch-(to-1), or the bucket after epoch (as
// view.sum counts it).
func (st *stripeSet) sum(epoch int64, m Metric, from, to int) uint64 {
	e := uint64(epoch) & epochMask
	var s uint64
	if m == concWord {
		return 0
	}
	for i := range st.stripe {
		w := st.stripe[i].words[m].Load()
		if d := (e - w>>valueBits) & epochMask; d >= uint64(from) && d < uint64(to) || d == epochMask {
			s += w & valueMask
		}
	}
	return s
}

// minOf is LeapArray.MinOf over the stripes' words of Min metric m: the
// smallest value plus one, 0 for none.
func (st *stripeSet) minOf(epoch int64, m Metric) uint64 {
	e := uint64(epoch) & epochMask
	var best uint64
	if m == concWord {
		return 0
	}
	for i := range st.stripe {
		w := st.stripe[i].words[m].Load()
		d := (e - w>>valueBits) & epochMask
		if x := w & valueMask; x != 0 && (d < SecondBuckets || d == epochMask) && (best == 0 || x < best) {
			best = x
		}
	}
	return best
}

// conc returns the stripes' share of the concurrency.
func (st *stripeSet) conc() int64 {
	var c int64
	for i := range st.stripe {
		c += int64(st.stripe[i].words[concWord].Load())
	}
	return c
}

// unretired is LeapArray.Unretired over the stripes' words of metric m.
func (st *stripeSet) unretired(now int64, m Metric, f func(bucketStart int64, v uint64)) {
	if m == concWord {
		return
	}
	epoch := now / int64(BucketWidth)
	e := uint64(epoch) & epochMask
	for i := range st.stripe {
		w := st.stripe[i].words[m].Load()
		val := w & valueMask
		if val == 0 {
			continue
		}
		if nodeKinds[m] == Min {
			val--
		}
		d := (e - w>>valueBits) & epochMask
		back := int64(d)
		if d >= epochHalf {
			back = -int64(epochMask + 1 - d)
		}
		f((epoch-back)*int64(BucketWidth), val)
	}
}

// unretiredSec is sec.Unretired for metric m with the stripes' words.
func (n *Node) unretiredSec(now int64, m Metric, f func(bucketStart int64, v uint64)) {
	n.sec.Unretired(now, m, f)
	if st := n.stripes.Load(); st != nil {
		st.unretired(now, m, f)
	}
}

// bucketValue is sec.Value with the stripes' share of bucket ep.
func (n *Node) bucketValue(ep int64, m Metric) uint64 {
	v := n.sec.Value(ep, m)
	if st := n.stripes.Load(); st != nil {
		v += st.count(ep, m)
	}
	return v
}

// freeAtStriped is view.freeAt for Sum metric m over the slots and the
// stripes (Node.FreeAt on a striped node).
func (n *Node) freeAtStriped(epoch int64, m Metric, limit float64) int64 {
	s := n.bucketValue(epoch+1, m)
	if float64(s) > limit {
		return epoch + 1 + SecondBuckets
	}
	for k := int64(0); k < SecondBuckets; k++ {
		s += n.bucketValue(epoch-k, m)
		if float64(s) > limit {
			return epoch + SecondBuckets - k
		}
	}
	return epoch + 1
}

// maxCompleteStriped is maxCompleteOf on a striped node: the largest
// Complete count (timed and untimed) of a bucket of the window ending at
// epoch and the bucket after it, leaving out bucket skip.
func (n *Node) maxCompleteStriped(epoch, skip int64) uint64 {
	var best uint64
	for ep := epoch + 1; ep > epoch-SecondBuckets; ep-- {
		if ep != skip {
			best = max(best, n.bucketValue(ep, Complete)+n.bucketValue(ep, Untimed))
		}
	}
	return best
}

// passStriped is AddPass on a striped node.
func (n *Node) passStriped(st *stripeSet, s *stripe, ep int64, b uint64, batch int64) {
	s.addConc(batch)
	if after := n.stripeAdd(s, Pass, ep, b); after == b || after/maxEvery != (after-b)/maxEvery {
		// The stripe's first pass of the bucket, or one in maxEvery:
		// the bucket's maximum concurrency, sampled.
		n.sec.RaiseAt(n.slot(ep), ep, MaxConcurrency, n.concurrency.Load()+st.conc())
	}
}

// maxEvery is how many passes of a stripe in a bucket, beyond the first,
// pass between two samples of a striped node's concurrency for the
// bucket's maximum: each sample reads every stripe's line.
const maxEvery = 64

// completeStriped is AddComplete on a striped node.
func (n *Node) completeStriped(s *stripe, ep int64, us, batch int64, failed bool) {
	n.stripeAdd(s, Complete, ep, clampAdd(batch))
	n.stripeAdd(s, RT, ep, clampAdd(us*batch))
	n.stripeLower(s, MinRT, ep, uint64(us))
	if failed {
		n.stripeAdd(s, Error, ep, clampAdd(batch))
	}
	s.addConc(-batch)
}

// untimedStriped is AddCompleteUntimed on a striped node.
func (n *Node) untimedStriped(s *stripe, ep int64, b uint64, batch int64, failed bool) {
	n.stripeAdd(s, Untimed, ep, b)
	if failed {
		n.stripeAdd(s, Error, ep, b)
	}
	s.addConc(-batch)
}

// sampledStriped is AddCompleteSampled's count on a striped node: it
// returns the stripe's Complete count of the bucket after the add (the
// exits are numbered per stripe, see above).
func (n *Node) sampledStriped(s *stripe, ep int64, b uint64, batch int64, failed bool) uint64 {
	after := n.stripeAdd(s, Complete, ep, b)
	if failed {
		n.stripeAdd(s, Error, ep, b)
	}
	s.addConc(-batch)
	return after
}
