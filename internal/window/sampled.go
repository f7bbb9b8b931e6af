package window

import "sync/atomic"

// RT sampling for readers. A resource's exits are timed (the clock read,
// RT and MinRT written) when something consumes their RT. A rule that does
// (see TimeExits, and the engine's exitNeedsClock) gets every exit timed.
// What only readers consume (AvgRT and MinRT in snapshots, History's AvgRT,
// MinRT and MeanConcurrency, TotalRT for the exporters) comes from a sample
// of the exits instead, so that a reader does not make every later exit of
// the resource dearer:
//
//   - the first SampleFirst requests to exit in each 100 ms bucket are
//     timed, each for itself;
//   - beyond them, the requests are numbered in the order their exits are
//     counted in the bucket, and up to number SampleWide those whose number
//     is a multiple of SampleEvery are timed, each standing for SampleEvery
//     requests: its RT is added to the RT sum SampleEvery times (a
//     Horvitz-Thompson estimate of the sum);
//   - beyond SampleWide, those whose number is a multiple of SampleSparse
//     are timed, each standing for SampleSparse requests.
//
// Counts (Complete, Error, with Pass and Block) stay exact: every exit is
// counted. The RT sum is exact up to SampleFirst requests a bucket and an
// unbiased estimate of the sum beyond, so AvgRT (RT sum over Complete) and
// MeanConcurrency are estimates whose error shrinks with the square root
// of the sample; MinRT is the smallest of the timed requests (exact up to
// SampleFirst a bucket, otherwise at least the true minimum). The sample is
// systematic, so it is unbiased unless response times repeat with the
// period SampleEvery in exit order.
const (
	// SampleFirst is the number of requests of each second-level bucket
	// (100 ms) whose exits are all timed for a reader: 160 a second.
	SampleFirst = 16
	// SampleEvery is one over the fraction of the requests beyond
	// SampleFirst and up to SampleWide a bucket that are timed for a reader.
	SampleEvery = 16
	// SampleWide is the request number in a bucket beyond which one in
	// SampleSparse requests is timed (10,240 exits a second); a multiple of
	// SampleSparse.
	SampleWide = 1024
	// SampleSparse is one over the fraction of the requests beyond
	// SampleWide a bucket that are timed for a reader.
	SampleSparse = 64
)

// AddCompleteSampled records batch requests that exited at now (an estimate
// no older than the entry's start will do, as for AddCompleteUntimed) among
// the exits whose RT the node's RT sum stands for, failed when they
// recorded an error, and lowers concurrency by batch. It returns the weight
// of the exit's RT in the sample (see SampleFirst): zero when the exit is
// not timed, else the number of requests the caller's AddSampledRT counts
// its RT for.
func (n *Node) AddCompleteSampled(now, batch int64, failed bool) int64 {
	ep := now / int64(BucketWidth)
	b := clampAdd(batch)
	var after uint64
	if st := n.stripes.Load(); st != nil {
		after = n.sampledStriped(st.pick(), ep, b, batch, failed)
	} else {
		slot := n.slot(ep)
		after = n.sec.addSumAfter(&slot[Complete], Complete, ep, b)
		if failed {
			n.sec.AddSumAt(slot, ep, Error, b)
		}
		n.concurrency.Add(-batch)
	}
	return sampleWeight(after-min(after, b), after, b)
}

// sampleWeight is the weight in the sample of the batch b of requests
// numbered before+1 to after in their bucket: b while the first of them is
// among the first SampleFirst, else SampleEvery for each multiple of
// SampleEvery they hold up to SampleWide and SampleSparse for each multiple
// of SampleSparse beyond. Each request number is represented once: by
// itself, or by the next multiple of the period of its range.
func sampleWeight(before, after, b uint64) int64 {
	if before < SampleFirst {
		return int64(b)
	}
	var w uint64
	if before < SampleWide {
		w = (min(after, SampleWide)/SampleEvery - before/SampleEvery) * SampleEvery
	}
	if after > SampleWide {
		w += (after/SampleSparse - max(before, SampleWide)/SampleSparse) * SampleSparse
	}
	return int64(w)
}

// AddSampledRT adds the RT of an exit that AddCompleteSampled at now gave
// weight w: rt nanoseconds for w requests to the RT sum, and rt to MinRT.
func (n *Node) AddSampledRT(now, rt, w int64) {
	ep := now / int64(BucketWidth)
	us := min(max(rt/1000, 0), maxRTMicros)
	if st := n.stripes.Load(); st != nil {
		s := st.pick()
		n.stripeAdd(s, RT, ep, clampAdd(us*w))
		n.stripeLower(s, MinRT, ep, uint64(us))
		return
	}
	slot := n.slot(ep)
	n.sec.AddSumAt(slot, ep, RT, clampAdd(us*w))
	n.sec.AddMinAt(slot, ep, MinRT, uint64(us))
}

// addSumAfter is addSum that returns the counter's value for the bucket
// after the add.
func (a *LeapArray[M]) addSumAfter(w *atomic.Uint64, m M, epoch int64, n uint64) uint64 {
	e := uint64(epoch) & epochMask
	for {
		old := w.Load()
		oe := old >> valueBits
		if isStale(old, e) {
			if w.CompareAndSwap(old, e<<valueBits|n) {
				a.retired(m, epoch, e, oe, old&valueMask)
				return n
			}
			continue
		}
		if old&valueMask+n > valueMask-valueHeadroom {
			if w.CompareAndSwap(old, oe<<valueBits|(valueMask-valueHeadroom)) {
				return valueMask - valueHeadroom
			}
			continue
		}
		return w.Add(n) & valueMask
	}
}
