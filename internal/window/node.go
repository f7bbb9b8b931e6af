package window

import (
	"sync"
	"time"
	"unsafe"

	"sync/atomic"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/stat"
)

// Metric names a counter of a resource node.
type Metric uint8

const (
	// Pass counts entries (by batch) that passed every check.
	Pass Metric = iota
	// Block counts entries (by batch) that a rule refused.
	Block
	// Complete counts entries (by batch) that exited. In the second-level
	// window it is kept in two words, the timed exits (AddComplete) under
	// Complete and the untimed ones under Untimed, so that an exit writes
	// one of them; every reader of Complete adds the two up, and the two
	// retire into the one Complete of the later windows and the totals.
	Complete
	// Error counts exited entries (by batch) that recorded an error.
	Error
	// RT is the sum of response times of exited entries, in microseconds,
	// weighted by batch.
	RT
	// MinRT is the smallest response time of an exited entry, in
	// microseconds.
	MinRT
	// MaxConcurrency is the highest number of requests in flight right
	// after a pass in the bucket (see AddPass and History).
	MaxConcurrency
	// Untimed counts exited entries (by batch, among Complete) whose RT was
	// not measured (AddCompleteUntimed): RT and MinRT cover Complete less
	// Untimed. It exists in the second-level window only.
	Untimed
	metricCount
)

// nodeKinds are the kinds of the second-level window's metrics; the minute
// and history windows keep the first keptMetrics of them. Untimed stays in
// the second-level window: exits go untimed only until a reader makes the
// minute window (see the engine's exitNeedsClock), so an untimed count
// reaches a later window only in the seconds around a resource's first read,
// and there it joins Complete (the AvgRT of those seconds then counts their
// untimed exits as taking no time), not kept apart in every second of an
// hour.
var nodeKinds = []Kind{Sum, Sum, Sum, Sum, Sum, Min, Max, Sum}

// keptMetrics is the number of metrics the minute and history windows keep.
const keptMetrics = Untimed

// The node's windows. The second-level window backs rule checks; the minute
// window backs reporting. Both are fixed so that the hot path divides by
// constants.
const (
	// SecondBuckets is the number of buckets of the second-level window.
	SecondBuckets = 10
	// BucketWidth is the width of one second-level bucket.
	BucketWidth = time.Second / SecondBuckets
	// MinuteBuckets is the number of one-second buckets of the minute window.
	MinuteBuckets = 60
	// secRing is RingSize(SecondBuckets).
	secRing = 16
)

// maxRTMicros caps one entry's contribution to RT sums (about 17.9 minutes),
// so a few very long entries cannot saturate a bucket.
const maxRTMicros = int64(MaxAdd)

// Node holds the statistics of one resource (or of all inbound traffic): a
// one-second sliding window of ten 100 ms buckets for rule checks, a
// one-minute window of sixty one-second buckets for reporting, totals since
// creation, and the current concurrency.
//
// Only the second-level window is written on the request path. When one of
// its counters is reset for a new bucket, the old value moves, once, into the
// minute window; minute counters move into the totals the same way. Every
// event therefore sits in exactly one place, which is what makes Totals exact.
//
// A Node is safe for concurrent use; its methods never block or allocate.
//
// The second-level window's counters live inside the Node, so a resource
// that embeds its Node keeps everything the request path touches in one
// allocation (this matters with many resources: fewer cache and TLB misses).
type Node struct {
	// The layout keeps what different calls write on lines of their own,
	// separated by full-line pads (Pad), so it holds wherever the
	// allocator puts the node:
	//
	//   read-only after Init: the minute window, the second window's
	//             header and the claim flag (rule loads only). The node's
	//             address is here, on lines no call writes: Go checks a
	//             pointer for nil by reading at its address, and when that
	//             was the concurrency counter's line, every call read a
	//             line the other cores keep writing (Entry+Exit in parallel
	//             115 -> 150-220 ns).
	//   concurrency, written by every call. It does not share a line with
	//             the window: there it made both of them written on every
	//             call, and two cores on one hot resource then missed on
	//             both (116 -> 153 ns).
	//   admitted: the admission window of the flow rule that claims it
	//             (ClaimWindow), so a call on a resource that is not in
	//             cache finds it in lines it loads anyway (Prefetch).
	//   secWords: one line's worth of words per bucket slot, of which
	//             metricCount are used, so a call writes one or two lines.
	//   total: the cold totals, written when minute buckets retire.
	//   blockedBy: refusals by block type, written when byType's counters
	//             retire (a refusal writes byType only).
	//   hist, keep: the history window beyond the minute (see History).
	minute  atomic.Pointer[minuteWindow] // nil until a reader first asks (armMinute)
	sec     LeapArray[Metric]
	claimed atomic.Bool
	_       Pad
	// concurrency is the number of requests in flight (on a striped
	// node, with the stripes' shares: see stripe.go).
	concurrency atomic.Int64
	// stripes are the node's striped hot counters, nil until calls on
	// several cores at once contend for the node (contended counts the
	// contended passes of a bucket, see addPass). Once they exist,
	// concurrency's line is only read, like the header.
	stripes   atomic.Pointer[stripeSet]
	contended atomic.Uint64
	// read is set when the minute window is made (armMinute): a reader
	// asked for the node's figures. It shares concurrency's line, which
	// every call writes anyway, so Exit learns whether anything reads RT
	// without loading a line more (read from the node's header, it cost a
	// cold resource one more miss: Entry+Exit over 100,000 resources
	// round-robin 498 -> 650 ns).
	read atomic.Bool
	// timed is set by TimeExits: a rule consumes the exits' RT, so every
	// exit is timed, not a sample for readers (see SampleFirst).
	timed atomic.Bool
	// The rest of concurrency's line: admitted starts on the next line
	// wherever the node sits, and on a line start when concurrency does,
	// which it does in a resource (see the layout test of the sluice
	// package): the window then spans two lines, not three, and each slot
	// of secWords one.
	_         [CacheLine - 2*unsafe.Sizeof(atomic.Int64{}) - unsafe.Sizeof(atomic.Pointer[stripeSet]{}) - 2*unsafe.Sizeof(atomic.Bool{})]byte
	admitted  Window
	_         Pad
	secWords  [secRing * slotWords]atomic.Uint64
	total     [metricCount]atomic.Uint64
	blockedBy [len(stat.Snapshot{}.BlockedBy)]atomic.Uint64
	// The history, cold like the totals: read by History, written when
	// minute buckets retire. (Held in the read-only header above, these
	// two words pushed the second window's header onto one more line, and
	// Entry+Exit round-robin over 10,000 resources, where every line is a
	// memory read, went from about 500 to 620 ns.)
	hist atomic.Pointer[LeapArray[Metric]] // nil until History first reaches past the minute window
	keep int64                             // seconds History serves; 0 for none
	// byType counts refusals by block type in each of the last two whole
	// seconds (BlockedInSecond), so that a reader after a second's end
	// finds the second's refusals by type over the same second as the
	// second-level window's Block sum. Made at the first refusal: a
	// resource that never refuses pays one word.
	byType atomic.Pointer[LeapArray[core.BlockType]]
	// shadow counts the would-be refusals of rules in shadow mode
	// (AddShadowBlock). Made at the first one: a resource without shadow
	// rules pays one word, and its windows carry no counter for them.
	shadow atomic.Pointer[shadowCounts]
	// limits is the history of the resource's adaptive concurrency limit
	// (RecordLimit). Made at the first record on a node that keeps
	// history: a resource without adaptive rules pays one word.
	limits atomic.Pointer[limitSeconds]
}

// shadowCounts are a node's would-be refusals of rules in shadow mode.
type shadowCounts struct {
	by [blockTypes]atomic.Uint64 // since the node was made, by block type
	// sec counts them per second of the history (keep seconds and two),
	// for History; nil on a node that keeps none.
	sec *LeapArray[Metric]
}

// shadowKinds: one sum per second.
var shadowKinds = []Kind{Sum}

// byTypeKinds: every block type is a sum.
var byTypeKinds = func() []Kind {
	k := make([]Kind, len(stat.Snapshot{}.BlockedBy))
	for i := range k {
		k[i] = Sum
	}
	return k
}()

// slotWords is the stride of the second-level window: a cache line's
// worth of words.
const slotWords = CacheLine / 8

// NewNode returns an empty node.
func NewNode() *Node {
	n := new(Node)
	n.Init()
	n.armMinute()
	n.minute.Load().armExtras()
	return n
}

// Init prepares a zero Node for use (for Nodes embedded by value; NewNode
// does it for you), without history. It must be called once, before any
// other method.
func (n *Node) Init() { n.InitHistory(0) }

// MaxHistory is the longest history a Node keeps.
const MaxHistory = time.Hour

// minuteRing is the number of slots of the minute window: a second stays in
// it until at least minuteRing seconds later.
const minuteRing = 64

// InitHistory is Init for a node whose History serves the last keep
// (rounded up to whole seconds, at most MaxHistory; zero or less for none).
//
// The windows that serve reports are made when a reader first asks for
// them, not here (see docs/design/architecture.md, "Memory per resource"):
//
//   - The minute window's counts (Pass, Block, Complete, Error and the RT
//     sum of 64 one-second slots, 1,408 bytes with its header; see
//     minuteWindow) are made by the first MinuteSum, Snapshot or History
//     (armMinute); its MinRT and MaxConcurrency (512 bytes) by the first
//     History, or MinuteSum of them, which read them.
//   - The history window beyond the minute (RingSize(keep-64s) slots of
//     seven words: 14 KiB for five minutes) is made by the first
//     History call that asks for more than the minute window holds
//     (armHistory).
//
// Until a window exists, the seconds that would have moved into it move on
// into the next one, or into the totals: Total is exact either way, and a
// window that is made serves every second that reaches it afterwards (the
// first Snapshot of a resource counts, in its minute figures, only what
// the second-level window still holds). The request path allocates
// nothing and never writes the history window.
//
// NewNode makes the minute window at once (the engine's inbound node, whose
// recent minimum RT a BBR system rule reads).
func (n *Node) InitHistory(keep time.Duration) {
	if keep > MaxHistory {
		keep = MaxHistory
	}
	if keep > 0 {
		n.keep = int64((keep + time.Second - 1) / time.Second)
	}
	if err := n.sec.init(time.Second, SecondBuckets, nodeKinds, n.retireSecond, n.secWords[:], slotWords); err != nil {
		panic(err)
	}
	if &n.sec.words[0] != &n.secWords[0] {
		// slot indexes secWords with constants; they must be the window's.
		panic("sluice: node window does not use its inline counters")
	}
}

// armMinute makes the minute window when it does not exist yet (one of
// racing callers' windows wins; the others are dropped unused).
func (n *Node) armMinute() {
	if n.minute.Load() == nil {
		n.minute.CompareAndSwap(nil, newMinuteWindow(n.retireMinute))
	}
	if !n.read.Load() {
		n.read.Store(true)
	}
}

// TimeExits makes every exit of the node timed from now on, not a sample
// as for a reader (see Read and SampleFirst): for a consumer of its RT
// other than a reader, such as a tiered rule on the average RT.
func (n *Node) TimeExits() {
	if !n.timed.Load() {
		n.timed.Store(true)
	}
	if !n.read.Load() {
		n.read.Store(true)
	}
}

// ExitsTimed reports whether a consumer of the node's RT other than a
// reader asked for every exit to be timed (TimeExits).
func (n *Node) ExitsTimed() bool { return n.timed.Load() }

// Read reports whether a reader has asked for the node's figures (see
// HasMinuteWindow), from a word on a line every call writes.
func (n *Node) Read() bool { return n.read.Load() }

// HasMinuteWindow reports whether the node has made its minute window (see
// InitHistory): whether a reader asked for it.
func (n *Node) HasMinuteWindow() bool { return n.minute.Load() != nil }

// armHistory makes the history window beyond the minute when the node keeps
// more history than the minute window holds and it does not exist yet.
func (n *Node) armHistory() {
	b := int(n.keep) - minuteRing
	if b <= 0 || n.hist.Load() != nil {
		return
	}
	n.armMinute() // first: a second reaches the history window through it
	n.minute.Load().armExtras()
	n.hist.CompareAndSwap(nil, MustLeapArray(time.Duration(b)*time.Second, b, nodeKinds[:keptMetrics], n.retireHist))
}

func (n *Node) retireSecond(m Metric, start int64, v uint64) {
	if m == Untimed {
		m = Complete // the later windows keep all exits under Complete
	}
	if mw := n.minute.Load(); mw != nil {
		// A count that stayed in the second-level window until its second's
		// minute slot moved on (an exit word that no exit wrote for over a
		// minute: the timed ones while every exit went untimed, or the
		// other way round) goes on to the window beyond, not into a later
		// second; so does an RT, MinRT or MaxConcurrency while the minute
		// window has no extras (no History asked for them).
		if !mw.add(m, start, v) {
			n.retireMinute(m, start, v)
		}
		return
	}
	n.retireHist(m, start, v) // no reader yet: into the totals
}

func (n *Node) retireMinute(m Metric, start int64, v uint64) {
	if h := n.hist.Load(); h != nil {
		// Whole: a second's sum may be larger than one Add carries (ten
		// second-level buckets), and than a counter of the history window
		// holds (the minute window keeps 64-bit counts); what does not fit
		// goes into the totals, so Total stays exact where the second's
		// figure in History saturates. A second whose slot of the history
		// window has moved on goes into the totals (see retireSecond).
		if nodeKinds[m] == Sum {
			if rest, ok := h.addWhole(start, m, v); ok {
				if rest == 0 {
					return
				}
				v = rest
			}
		} else if h.addUnlessBehind(start, m, v) {
			return
		}
	}
	n.retireHist(m, start, v)
}

func (n *Node) retireHist(m Metric, _ int64, v uint64) {
	if nodeKinds[m] == Sum {
		n.total[m].Add(v)
	}
}

// slot returns the counters of the second-level bucket slot that holds
// epoch. It is Slot of the second window computed from constants: the write
// path reads no window header, only the counters it writes (one cache miss
// fewer per call on a resource that is not in cache).
func (n *Node) slot(epoch int64) []atomic.Uint64 {
	i := int(epoch&(secRing-1)) * slotWords
	return n.secWords[i : i+int(metricCount) : i+int(metricCount)]
}

// Prefetch reads the admission window, the bucket slot that a call at now
// will use, and the concurrency counter. A caller that has other work to
// do first (comparing the resource's name, checking its rules) calls it
// early, so that when the node is not in cache its misses overlap that
// work instead of following it. The concurrency counter matters most: it
// is written with an atomic add, which waits for its line, and was the one
// line of a cold resource no prefetch covered (Entry+Exit round-robin over
// 10,000 resources, as a ratio to one resource: 2.37x -> 1.56x, medians
// of six interleaved rounds). Reading a line that other cores keep writing
// before writing it can cost a second transfer of the line when the
// resource is hot on several cores; an earlier layout measured that
// (110 -> 175 ns), this one does not (Entry+Exit in parallel on one
// resource 223 -> 210 ns, p = 0.98, twelve interleaved rounds; again in
// 200 rounds: median ratio 1.00, faster in 100), while over 100,000
// resources round-robin it takes the ratio from 3.63-4.17x to 2.58-3.04x.
func (n *Node) Prefetch(now int64) {
	ep := now / int64(BucketWidth)
	// The window's first, middle and last words: every line it spans,
	// however it sits on lines.
	Prefetch(&n.admitted.words[0])
	Prefetch(&n.admitted.words[windowRing/2])
	Prefetch(&n.admitted.words[windowRing-1])
	Prefetch(&n.secWords[int(ep&(secRing-1))*slotWords])
	n.concurrency.Load() // as Prefetch: a load the compiler keeps
}

// ClaimWindow returns the node's own admission window, empty, when it is
// free, and nil when it is not: the window then belongs to the caller (a
// flow rule and the rules that inherit its state) until ReleaseWindow.
// Prefetch loads it with the node's counters.
func (n *Node) ClaimWindow() *Window {
	if !n.claimed.CompareAndSwap(false, true) {
		return nil
	}
	// Empty, as a new window would be: a window released by a former
	// owner may hold its counts.
	for i := range n.admitted.words {
		n.admitted.words[i].Store(0)
	}
	return &n.admitted
}

// ReleaseWindow gives the window ClaimWindow handed out back, for the next
// claim. Its owner must be out of use: an entry that still counts in it
// after the next claim counts toward the new owner (at a rule reload, the
// few entries in flight).
func (n *Node) ReleaseWindow() { n.claimed.Store(false) }

// OwnWindow returns the window ClaimWindow hands out, claimed or not, so
// that its owner's engine can tell a rule that counts in it (by pointer)
// and check that rule against it directly. Only the claimer may add to it.
func (n *Node) OwnWindow() *Window { return &n.admitted }

// AddPass records batch passed requests at now and raises concurrency by
// batch, and the bucket's maximum concurrency to the result.
//
// The maximum costs a load of a word on the line the pass count was just
// added to, and a compare-and-swap only when the concurrency is above the
// bucket's maximum so far (the first pass of a bucket, and a rising
// concurrency). Exits write no maximum: concurrency only falls there, and
// what it was at the start of a second, the one value that the passes of
// the second do not show, History works out from the counts (see History).
func (n *Node) AddPass(now, batch int64) {
	ep := now / int64(BucketWidth)
	if st := n.stripes.Load(); st != nil {
		n.passStriped(st, st.pick(), ep, clampAdd(batch), batch)
		return
	}
	slot := n.slot(ep)
	n.addPass(&slot[Pass], ep, clampAdd(batch))
	c := n.concurrency.Add(batch)
	if w := slot[MaxConcurrency].Load(); w>>valueBits != uint64(ep)&epochMask || int64(w&valueMask) < c {
		n.sec.RaiseAt(slot, ep, MaxConcurrency, c)
	}
}

func clampAdd(v int64) uint64 {
	if v < 0 {
		return 0
	}
	if uint64(v) > MaxAdd {
		return MaxAdd
	}
	return uint64(v)
}

// AddBlock records batch requests refused at now by a rule of type by. A
// type beyond the built-in ones counts under index 0 of BlockedBy.
func (n *Node) AddBlock(now, batch int64, by core.BlockType) {
	ep := now / int64(BucketWidth)
	b := clampAdd(batch)
	n.sec.AddSumAt(n.slot(ep), ep, Block, b)
	i := int(by)
	if i >= len(n.blockedBy) {
		i = 0
	}
	a := n.byType.Load()
	if a == nil {
		n.byType.CompareAndSwap(nil, MustLeapArray(2*time.Second, 2, byTypeKinds, n.retireByType))
		a = n.byType.Load()
	}
	// a.Add, with the bucket width (a second) a constant.
	sec := now / int64(time.Second)
	a.AddSumAt(a.Slot(sec), sec, core.BlockType(i), b)
}

// retireByType moves a second's refusals of one block type into the totals
// by type when their counter of byType is reset: a refusal writes one
// counter by type, not two (see BlockedBy).
func (n *Node) retireByType(by core.BlockType, _ int64, v uint64) {
	n.blockedBy[by].Add(v)
}

// AddShadowBlock records batch requests that a rule in shadow mode of type
// by would have refused at now (they were not refused). A type beyond the
// built-in ones counts under index 0.
func (n *Node) AddShadowBlock(now, batch int64, by core.BlockType) {
	i := int(by)
	if i >= blockTypes {
		i = 0
	}
	sc := n.shadow.Load()
	if sc == nil {
		sc = &shadowCounts{}
		if n.keep > 0 {
			secs := int(n.keep) + 2
			sc.sec = MustLeapArray[Metric](time.Duration(secs)*time.Second, secs, shadowKinds, nil)
		}
		if !n.shadow.CompareAndSwap(nil, sc) {
			sc = n.shadow.Load()
		}
	}
	sc.by[i].Add(clampAdd(batch))
	if sc.sec != nil {
		sc.sec.Add(now, 0, clampAdd(batch))
	}
}

// limitSeconds is a node's history of its adaptive concurrency limit: the
// limit in force at the end of each of the last seconds. The limit changes
// at an adaptive rule's window decisions and at rule loads, not per entry,
// so it is written there (RecordLimit), under a lock no request takes.
type limitSeconds struct {
	mu  sync.Mutex
	val []int64 // by second modulo len: the limit at the second's end
	sec []int64 // the second each slot of val is for
	has bool    // a limit was recorded
	// last is the newest second recorded, cur the limit recorded in it:
	// the limit in force since, up to now.
	last, cur int64
}

// put sets the limit at the end of second s.
func (h *limitSeconds) put(s, v int64) {
	i := s % int64(len(h.val))
	h.val[i], h.sec[i] = v, s
}

// at returns the limit in force at the end of second s: 0 before the first
// record or when s has left the ring.
func (h *limitSeconds) at(s int64) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case !h.has:
		return 0
	case s >= h.last:
		return h.cur
	}
	if i := s % int64(len(h.val)); s >= 0 && h.sec[i] == s {
		return h.val[i]
	}
	return 0
}

// RecordLimit records that the resource's adaptive concurrency limit is
// limit from now on (0: the resource has no adaptive rule any more), for
// History (stat.Second.AdaptiveLimit, the limit in force at the end of each
// second). A node that keeps no history records nothing; the first record
// makes the ring (HistoryLen and two seconds). A record older than the
// newest counts in the newest second.
func (n *Node) RecordLimit(now, limit int64) {
	if n.keep <= 0 {
		return
	}
	h := n.limits.Load()
	if h == nil {
		secs := n.keep + 2
		h = &limitSeconds{val: make([]int64, secs), sec: make([]int64, secs)}
		for i := range h.sec {
			h.sec[i] = -1
		}
		if !n.limits.CompareAndSwap(nil, h) {
			h = n.limits.Load()
		}
	}
	s := max(now/int64(time.Second), 0)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.has {
		s = max(s, h.last)
		// The seconds since the last record ended under its limit.
		for t := max(h.last+1, s-int64(len(h.val))+1); t < s; t++ {
			h.put(t, h.cur)
		}
	}
	h.put(s, limit)
	h.has, h.last, h.cur = true, s, limit
}

// HasLimitHistory reports whether the node has made its history of
// adaptive limits (RecordLimit).
func (n *Node) HasLimitHistory() bool { return n.limits.Load() != nil }

// ShadowBlockedBy returns the requests (by batch) that rules in shadow mode
// of block type by would have refused since the node was made.
func (n *Node) ShadowBlockedBy(by core.BlockType) uint64 {
	if int(by) >= blockTypes {
		by = 0
	}
	if sc := n.shadow.Load(); sc != nil {
		return sc.by[by].Load()
	}
	return 0
}

// BlockedInSecond returns the requests (by batch) refused by rules of block
// type by in the whole second that starts at sec seconds of the clock. It
// is exact, like the Block sum of Sum(end of that second), until the second
// after it ends; later it returns zero.
func (n *Node) BlockedInSecond(sec int64, by core.BlockType) uint64 {
	if int(by) >= len(n.blockedBy) {
		by = 0
	}
	a := n.byType.Load()
	if a == nil {
		return 0
	}
	return a.Value(sec, by)
}

// BlockedBy returns the requests (by batch) refused by rules of block type
// by since the node was made; index 0 of the types counts the types beyond
// the built-in ones. Like Total, it is exact when no adds race it: every
// refusal is in exactly one of the counters by type of the last two seconds
// and the totals by type, into which those retire.
func (n *Node) BlockedBy(by core.BlockType) uint64 {
	if int(by) >= len(n.blockedBy) {
		by = 0
	}
	s := n.blockedBy[by].Load()
	if a := n.byType.Load(); a != nil {
		a.Unretired(0, by, func(_ int64, v uint64) { s += v })
	}
	return s
}

// AddComplete records batch requests that exited at now after rt
// nanoseconds, failed when they recorded an error, and lowers concurrency by
// batch.
func (n *Node) AddComplete(now, rt, batch int64, failed bool) {
	ep := now / int64(BucketWidth)
	us := rt / 1000
	if us < 0 {
		us = 0
	} else if us > maxRTMicros {
		us = maxRTMicros
	}
	if st := n.stripes.Load(); st != nil {
		n.completeStriped(st.pick(), ep, us, batch, failed)
		return
	}
	slot := n.slot(ep)
	n.sec.AddSumAt(slot, ep, Complete, clampAdd(batch))
	n.sec.AddSumAt(slot, ep, RT, clampAdd(us*batch))
	n.sec.AddMinAt(slot, ep, MinRT, uint64(us))
	if failed {
		n.sec.AddSumAt(slot, ep, Error, clampAdd(batch))
	}
	n.concurrency.Add(-batch)
}

// AddCompleteUntimed is AddComplete for an exit whose response time was
// not measured: it counts the exit under Untimed (which readers count as
// Complete too) and Error, and adds nothing to RT and MinRT, so that AvgRT
// stays the mean of the exits that were timed. One counter for the exit, not
// two: the timed exits' counter (Complete's word) is the one AvgRT divides
// by. now need only be a reading no older than the entry's
// start (an add into an older bucket than the newest one written goes into
// the newer one: see LeapArray), so a caller may give an estimate instead of
// reading the clock.
func (n *Node) AddCompleteUntimed(now, batch int64, failed bool) {
	ep := now / int64(BucketWidth)
	b := clampAdd(batch)
	if st := n.stripes.Load(); st != nil {
		n.untimedStriped(st.pick(), ep, b, batch, failed)
		return
	}
	slot := n.slot(ep)
	n.sec.AddSumAt(slot, ep, Untimed, b)
	if failed {
		n.sec.AddSumAt(slot, ep, Error, b)
	}
	n.concurrency.Add(-batch)
}

// Concurrency returns the number of requests in flight.
func (n *Node) Concurrency() int64 {
	c := n.concurrency.Load()
	if st := n.stripes.Load(); st != nil {
		c += st.conc()
	}
	return c
}

// Sum returns metric m summed over the one-second window ending at now.
func (n *Node) Sum(now int64, m Metric) uint64 {
	ep := now / int64(BucketWidth)
	s := n.sec.SumEpoch(ep, m, SecondBuckets)
	if m == Complete {
		s += n.sec.SumEpoch(ep, Untimed, SecondBuckets)
	}
	if st := n.stripes.Load(); st != nil {
		s += st.sum(ep, m, 0, SecondBuckets)
		if m == Complete {
			s += st.sum(ep, Untimed, 0, SecondBuckets)
		}
	}
	return s
}

// secUnretired is sec.Unretired for metric m as readers see it: Complete
// is the timed exits' word and the untimed ones'.
func (n *Node) secUnretired(now int64, m Metric, f func(bucketStart int64, v uint64)) {
	n.unretiredSec(now, m, f)
	if m == Complete {
		n.unretiredSec(now, Untimed, f)
	}
}

// FreeAt returns the first instant after now (the start of a bucket) at
// which Sum metric m over the one-second window, given no more adds, is at
// most limit (see Window.FreeAt), in nanoseconds. m is a metric of one
// counter: not Complete.
func (n *Node) FreeAt(now int64, m Metric, limit float64) int64 {
	if n.stripes.Load() != nil {
		return n.freeAtStriped(now/int64(BucketWidth), m, limit) * int64(BucketWidth)
	}
	at, _ := n.sec.FreeAt(now/int64(BucketWidth), m, 0, limit)
	return at * int64(BucketWidth)
}

// QPS returns metric m per second over the one-second window ending at now.
func (n *Node) QPS(now int64, m Metric) float64 { return float64(n.Sum(now, m)) }

// AvgRT returns the mean response time over the one-second window, in
// microseconds, or zero when nothing completed.
func (n *Node) AvgRT(now int64) float64 {
	c := n.sec.SumEpoch(now/int64(BucketWidth), Complete, SecondBuckets) // the timed exits
	if st := n.stripes.Load(); st != nil {
		c += st.sum(now/int64(BucketWidth), Complete, 0, SecondBuckets)
	}
	if int64(c) <= 0 {
		return 0
	}
	return float64(n.Sum(now, RT)) / float64(c)
}

// MinRT returns the smallest response time in the one-second window in
// microseconds, and false when nothing completed.
func (n *Node) MinRT(now int64) (int64, bool) {
	v, ok := n.sec.MinOf(now, MinRT)
	if st := n.stripes.Load(); st != nil {
		if x := st.minOf(now/int64(BucketWidth), MinRT); x != 0 && (!ok || x-1 < v) {
			v, ok = x-1, true
		}
	}
	return int64(v), ok
}

// MaxCompletePerSecond returns the highest completion rate of any single
// bucket of the one-second window, scaled to per second. BBR uses it as the
// best throughput the resource has shown.
func (n *Node) MaxCompletePerSecond(now int64) float64 {
	return float64(n.maxCompleteOf(now/int64(BucketWidth), -1)) * SecondBuckets
}

// maxCompleteOf returns the largest Complete count (timed and untimed) of a
// single bucket of the one-second window ending at bucket epoch, and the
// bucket after it, leaving out slot skip (-1: none).
func (n *Node) maxCompleteOf(epoch int64, skip int) uint64 {
	if n.stripes.Load() != nil {
		sk := int64(-1 << 62)
		if skip >= 0 {
			sk = epoch // the one slot callers leave out is epoch's own
		}
		return n.maxCompleteStriped(epoch, sk)
	}
	e := uint64(epoch) & epochMask
	var best uint64
	for i := 0; i < secRing; i++ {
		if i == skip {
			continue
		}
		// The two words of a slot that are in the window hold the same
		// bucket: the window's eleven buckets are in eleven slots.
		var c uint64
		for _, m := range [2]Metric{Complete, Untimed} {
			v := n.secWords[i*slotWords+int(m)].Load()
			if d := (e - v>>valueBits) & epochMask; d < SecondBuckets || d == epochMask {
				c += v & valueMask
			}
		}
		best = max(best, c)
	}
	return best
}

// Bucket returns metric m of the single 100 ms bucket that contains t.
func (n *Node) Bucket(t int64, m Metric) uint64 {
	ep := t / int64(BucketWidth)
	v := n.bucketValue(ep, m)
	if m == Complete {
		v += n.bucketValue(ep, Untimed)
	}
	return v
}

// MinuteSum returns metric m summed over the one-minute window ending at now
// (for MinRT, use MinuteMinRT). It is exact when no adds race it, for the
// seconds since the minute window was made: the first call makes it (see
// InitHistory).
func (n *Node) MinuteSum(now int64, m Metric) uint64 {
	n.armMinute()
	mw := n.minute.Load()
	if int(m) >= countMetrics {
		mw.armExtras()
	}
	s := mw.Sum(now, m)
	from := (now/int64(time.Second) - MinuteBuckets + 1) * int64(time.Second)
	n.secUnretired(now, m, func(start int64, v uint64) {
		if start >= from && start <= now {
			s += v
		}
	})
	return s
}

// Total returns metric m since the node was made (Sum metrics only). It is
// exact when no adds race it: every event is in exactly one of the second
// window, the minute window and the totals.
func (n *Node) Total(now int64, m Metric) uint64 {
	s := n.total[m].Load()
	add := func(_ int64, v uint64) { s += v }
	if m < keptMetrics {
		if h := n.hist.Load(); h != nil {
			h.Unretired(now, m, add)
		}
		if mw := n.minute.Load(); mw != nil {
			mw.Unretired(now, m, add)
		}
	}
	n.secUnretired(now, m, add)
	return s
}

// HistoryLen returns the number of seconds History serves (see
// InitHistory).
func (n *Node) HistoryLen() int { return int(n.keep) }

// History returns the figures of the completed seconds of the last since
// before now (at most HistoryLen of them), oldest first, one per second
// whether or not anything happened in it. It reads the three windows a
// second's counts move through (the second-level window, the minute window,
// the history window), so it is exact when no adds race it; an add racing
// it may be missed, or, when it moves a bucket from one window to the
// next, counted twice in that one result. It allocates the result only.
//
// A second's MaxConcurrency is the larger of the highest concurrency a pass
// of the second left (kept by AddPass; sampled on a striped node, see
// stripe.go) and the concurrency at the second's start, which is not kept
// but follows from the counts: the concurrency now, less the passes since,
// plus the exits since.
//
// complexity: reads the ring of seconds in one pass and rebuilds each second's concurrency from the counts; the hot counters stay in one place
func (n *Node) History(now int64, since time.Duration) []stat.Second {
	k := int64(since / time.Second)
	if k > n.keep {
		k = n.keep
	}
	if k <= 0 {
		return nil
	}
	n.armMinute()
	n.minute.Load().armExtras() // History reads RT, MinRT and MaxConcurrency
	if k > minuteRing {
		n.armHistory()
	}
	minute, hist := n.minute.Load(), n.hist.Load()
	var sh *LeapArray[Metric]
	if sc := n.shadow.Load(); sc != nil {
		sh = sc.sec
	}
	lh := n.limits.Load()
	last := now/int64(time.Second) - 1 // the newest completed second
	first := last - k + 1
	if first < 0 {
		first = 0
	}
	if last < first {
		return nil
	}
	out := make([]stat.Second, last-first+1)
	var vals [metricCount][]uint64
	var mins []uint64 // MinRT plus one, zero for none
	buf := make([]uint64, int(metricCount)*len(out))
	for m := range vals {
		vals[m] = buf[m*len(out) : (m+1)*len(out)]
	}
	mins = vals[MinRT]
	inFlight := n.Concurrency()
	var later [metricCount]uint64 // counted after the newest completed second
	put := func(m Metric, start int64, v uint64) {
		i := start/int64(time.Second) - first
		if i >= int64(len(out)) && nodeKinds[m] == Sum {
			later[m] += v
			return
		}
		if start < 0 || i < 0 || i >= int64(len(out)) {
			return
		}
		switch nodeKinds[m] {
		case Min:
			if mins[i] == 0 || v+1 < mins[i] {
				mins[i] = v + 1
			}
		case Max:
			vals[m][i] = max(vals[m][i], v)
		default:
			vals[m][i] += v
		}
	}
	var col [minuteRing]uint64
	for m := Metric(0); m < metricCount; m++ {
		var head int64
		if m < keptMetrics {
			head = minute.column(m, &col)
		}
		for i := range out {
			ep := first + int64(i)
			start := ep * int64(time.Second)
			if m >= keptMetrics {
				break
			}
			if v, ok := at(&col, head, ep, m); ok {
				put(m, start, v)
			}
			if hist != nil {
				if v, ok := hist.valueOK(ep, m); ok {
					put(m, start, v)
				}
			}
		}
		n.unretiredSec(now, m, func(start int64, v uint64) {
			put(m, start, v)
			if m == Untimed {
				put(Complete, start, v) // untimed exits are exits too
			}
		})
	}
	// The concurrency at the start of each second: what is in flight now,
	// less what passed since, plus what exited since. A second's maximum is
	// the larger of that and the highest value a pass of the second left
	// (concurrency rises only at passes).
	conc := inFlight - int64(later[Pass]) + int64(later[Complete])
	for i := len(out) - 1; i >= 0; i-- {
		conc += int64(vals[Complete][i]) - int64(vals[Pass][i])
		if conc > 0 && uint64(conc) > vals[MaxConcurrency][i] {
			vals[MaxConcurrency][i] = uint64(conc)
		}
	}
	for i := range out {
		s := &out[i]
		s.Start = (first + int64(i)) * int64(time.Second)
		s.MaxConcurrency = int64(vals[MaxConcurrency][i])
		s.Pass, s.Block = vals[Pass][i], vals[Block][i]
		s.Complete, s.Error = vals[Complete][i], vals[Error][i]
		if sh != nil {
			s.ShadowBlock, _ = sh.valueOK(first+int64(i), 0)
		}
		if lh != nil {
			s.AdaptiveLimit = lh.at(first + int64(i))
		}
		if timed := int64(s.Complete) - int64(vals[Untimed][i]); timed > 0 {
			s.AvgRT = time.Duration(float64(vals[RT][i]) / float64(timed) * 1000)
		}
		s.MeanConcurrency = float64(vals[RT][i]) / 1e6 // µs per second
		if mins[i] != 0 {
			s.MinRT = time.Duration(mins[i]-1) * time.Microsecond
		}
	}
	return out
}

// Snapshot returns the node's figures at now.
func (n *Node) Snapshot(now int64) stat.Snapshot {
	s := stat.Snapshot{
		PassQPS:        n.QPS(now, Pass),
		BlockQPS:       n.QPS(now, Block),
		CompleteQPS:    n.QPS(now, Complete),
		ErrorQPS:       n.QPS(now, Error),
		AvgRT:          time.Duration(n.AvgRT(now) * 1000),
		Concurrency:    n.Concurrency(),
		MinutePass:     n.MinuteSum(now, Pass),
		MinuteBlock:    n.MinuteSum(now, Block),
		MinuteComplete: n.MinuteSum(now, Complete),
		MinuteError:    n.MinuteSum(now, Error),
		TotalPass:      n.Total(now, Pass),
		TotalBlock:     n.Total(now, Block),
		TotalComplete:  n.Total(now, Complete),
		TotalError:     n.Total(now, Error),
		TotalRT:        time.Duration(n.Total(now, RT)) * time.Microsecond,
	}
	for i := range n.blockedBy {
		s.BlockedBy[i] = n.BlockedBy(core.BlockType(i))
	}
	if sc := n.shadow.Load(); sc != nil {
		for i := range sc.by {
			s.ShadowBlockedBy[i] = sc.by[i].Load()
		}
	}
	if v, ok := n.MinRT(now); ok {
		s.MinRT = time.Duration(v) * time.Microsecond
	}
	return s
}

// blockTypes is the number of block types a node counts apart (index 0:
// those beyond the built-in ones), as stat.Snapshot.BlockedBy holds them.
const blockTypes = len(stat.Snapshot{}.BlockedBy)
