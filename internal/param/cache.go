package param

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"sync"

	"github.com/sluice-go/sluice/internal/entry"
	"sync/atomic"
)

// entry is the state of one tracked value. Its fields other than the key,
// shard and inflight are guarded by shard.mu. An entry is also the
// entry.Ticket its admitted requests hold: the release goes to this object,
// whether or not it is still in the cache.
//
// The layout serves a check on a value nobody has touched for a while,
// where every cache line read is a main-memory read: an entry is 128 bytes
// (a size class whose objects are 128-byte aligned, so exactly two cache
// lines), and the first line holds everything a check reads or writes —
// the shard, the bucket or schedule, the in-flight count, the use counter,
// the key's length and its first bytes. The key lives in the entry — its
// bytes when it has at most maxKeyLen of them, else its fingerprint — so
// the comparison that confirms a hash match reads memory the check needs
// anyway, and an entry never holds more than its 128 bytes whatever the
// value's length. TestEntryLayout pins this down.
type keyState struct {
	shard *shard

	// QPS reject: tokens and part are the bucket's content (tokens +
	// part/window), last the instant it was last refilled.
	// Throttle: the value's schedule ends at last + part/threshold ns (part
	// < threshold, the fraction of a nanosecond carried).
	tokens int64
	part   uint64
	last   int64

	// inflight counts requests in flight (concurrency rules). It is raised
	// only under shard.mu and lowered without it.
	inflight atomic.Int64

	freq uint8 // S3-FIFO access counter, 0..maxFreq

	// klen is the length of the key whose bytes are kbuf[:klen], or
	// fingerprinted when kbuf[:16] holds the fingerprint of a longer one.
	klen   uint8
	kbuf   [maxKeyLen]byte
	inMain bool // in the main queue (else the small one)
}

// maxKeyLen is the longest value the cache identifies by its bytes, kept
// inside its entry (the first 22 of them share the entry's first cache
// line). A longer value is identified by its fingerprint: two 64-bit
// maphash hashes of it under independent random seeds, the cache's seed
// (which also picks the shard and the table slot) and a second one, so the
// cache keeps 16 bytes of it however long it is. Two distinct long values
// share a fingerprint with probability 2^-128 (if maphash under independent
// seeds behaves as independent random functions, which is its design goal;
// it is not a cryptographic hash); see docs/design/param.md.
const maxKeyLen = 85

// fingerprinted is keyState.klen for a value identified by its fingerprint.
const fingerprinted = 0xff

// ref is a value as the cache looks it up: by its bytes when it has at
// most maxKeyLen of them, else by its fingerprint (h, h2). It refers to the
// caller's string, which the cache copies only when it keeps it.
type ref struct {
	key string // the value
	h   uint64 // maphash of the value with the cache's seed
	h2  uint64 // maphash of a long value with the cache's second seed
}

// long reports whether r's value is identified by its fingerprint.
func (r *ref) long() bool { return len(r.key) > maxKeyLen }

func newEntry(s *shard, r *ref, tokens, last int64) *keyState {
	e := &keyState{shard: s, tokens: tokens, last: last}
	if r.long() {
		e.klen = fingerprinted
		binary.LittleEndian.PutUint64(e.kbuf[0:], r.h)
		binary.LittleEndian.PutUint64(e.kbuf[8:], r.h2)
	} else {
		e.klen = uint8(len(r.key))
		copy(e.kbuf[:], r.key)
	}
	return e
}

// is reports whether e is the state of r.
func (e *keyState) is(r *ref) bool {
	if r.long() {
		return e.klen == fingerprinted && binary.LittleEndian.Uint64(e.kbuf[0:]) == r.h &&
			binary.LittleEndian.Uint64(e.kbuf[8:]) == r.h2
	}
	return int(e.klen) == len(r.key) && string(e.kbuf[:len(r.key)]) == r.key
}

// hash returns the hash of e's key with seed, the cache's.
func (e *keyState) hash(seed maphash.Seed) uint64 {
	if e.klen == fingerprinted {
		return binary.LittleEndian.Uint64(e.kbuf[0:])
	}
	return maphash.Bytes(seed, e.kbuf[:e.klen])
}

var _ entry.Ticket = (*keyState)(nil)

// Release gives back what an admitted request holds: its in-flight count,
// or, when a later check refused the entry, the tokens it took.
func (e *keyState) Release(x entry.ExitInfo) {
	s := e.shard
	switch s.mode {
	case modeConcurrency:
		e.inflight.Add(-x.Batch)
	case modeReject:
		if x.Blocked {
			s.mu.Lock()
			e.tokens += x.Batch // clamped to the bucket size at the next refill
			s.mu.Unlock()
		}
	}
}

const maxFreq = 3

// cache holds the per-value state of one rule: a fixed number of shards,
// each a hash table (see table) and an S3-FIFO eviction policy (Yang et al.,
// SOSP 2023) under one short mutex. New values enter a small FIFO queue (a
// tenth of the shard); values seen again before they reach its end move to
// the main queue, the others are forgotten and remembered in a ghost set of
// hashes, so a value that comes back soon goes straight to main. The main queue is a
// CLOCK: a value reaching its end is kept (with its counter lowered) while
// it has been used since. A scan of values seen once only churns the small
// queue, so frequently used values survive it, and a hit costs a counter
// increment rather than a list move.
//
// Values with requests in flight are never evicted (they are kept as if
// used): the cache then holds more than its capacity, by at most the number
// of such values, and shrinks back as they finish.
type cache struct {
	seed   maphash.Seed
	seed2  maphash.Seed // second half of long values' fingerprints
	mask   uint64
	shards []shard
	mode   mode
	cap    int
}

type shard struct {
	mu       sync.Mutex
	tab      table
	n        int // number of entries
	small    fifo
	main     fifo
	ghost    ghost
	cap      int
	smallCap int
	mode     mode
	seed     maphash.Seed
	_        [64]byte // keep neighbouring shards' mutexes off this cache line
}

// minShardSize is the fewest values a shard is sized for: smaller caches
// use fewer shards, so tiny capacities are exact and keep S3-FIFO's queues
// meaningful.
const minShardSize = 64

// maxShards is the most shards a cache uses.
const maxShards = 64

func newCache(capacity int, m mode) *cache {
	n := 1
	for n < maxShards && capacity/(2*n) >= minShardSize {
		n *= 2
	}
	c := &cache{seed: maphash.MakeSeed(), seed2: maphash.MakeSeed(), mask: uint64(n - 1), shards: make([]shard, n), mode: m, cap: capacity}
	for i := range c.shards {
		s := &c.shards[i]
		s.cap = capacity / n
		if i < capacity%n {
			s.cap++
		}
		s.smallCap = max(1, s.cap/10)
		s.ghost.init(max(1, s.cap-s.smallCap))
		s.mode = m
		s.seed = c.seed
	}
	return c
}

// locate returns the shard of key and how to look key up there. The ref
// refers to key, which must stay unchanged while it is used.
func (c *cache) locate(key string) (*shard, ref) {
	s, h, h2 := c.hashes(key)
	return s, ref{key: key, h: h, h2: h2}
}

// hashes returns the shard of key, its hash with the cache's seed and, for
// a key longer than maxKeyLen, its hash with the second seed (else 0). It
// is apart from locate so that locate is small enough to inline: a ref
// returned by a call that is not inlined is copied through memory, which
// made the check of a hot value about 15 ns slower (BenchmarkCheckHot).
func (c *cache) hashes(key string) (*shard, uint64, uint64) {
	h := maphash.String(c.seed, key)
	var h2 uint64
	if len(key) > maxKeyLen {
		h2 = maphash.String(c.seed2, key)
	}
	return &c.shards[h&c.mask], h, h2
}

// get returns the entry of r, inserting one with the given initial tokens
// and last instant when absent. The caller must hold s.mu; the value is
// copied (or fingerprinted) before it is kept.
func (s *shard) get(r *ref, tokens, last int64) *keyState {
	if e := s.find(r); e != nil {
		if e.freq < maxFreq {
			e.freq++
		}
		return e
	}
	for s.n >= s.cap {
		if !s.evict() {
			break
		}
	}
	e := newEntry(s, r, tokens, last)
	s.tab.insert(r.h, e, s.n+1)
	s.n++
	if s.ghost.take(r.h) {
		e.inMain = true
		s.main.push(e)
	} else {
		s.small.push(e)
	}
	return e
}

// evict forgets one value and reports true, or reports false when every
// value has requests in flight. Must hold s.mu.
func (s *shard) evict() bool {
	for budget := 4*(s.small.n+s.main.n) + 8; budget > 0; budget-- {
		if s.small.n > 0 && (s.small.n >= s.smallCap || s.main.n == 0) {
			e := s.small.pop()
			if e.freq > 0 || e.inflight.Load() > 0 {
				e.freq = 0
				e.inMain = true
				s.main.push(e)
				continue
			}
			h := e.hash(s.seed)
			s.remove(e, h)
			s.ghost.add(h)
			return true
		}
		if s.main.n == 0 {
			return false
		}
		e := s.main.pop()
		if e.freq > 0 {
			e.freq--
			s.main.push(e)
			continue
		}
		if e.inflight.Load() > 0 {
			s.main.push(e)
			continue
		}
		s.remove(e, e.hash(s.seed))
		return true
	}
	return false
}

// find returns the entry of r, or nil. Must hold s.mu.
func (s *shard) find(r *ref) *keyState {
	return s.tab.find(r)
}

// remove takes e, whose key's hash is h, out of the table. Must hold s.mu.
func (s *shard) remove(e *keyState, h uint64) {
	s.tab.remove(h, e)
	s.n--
}

// len returns the number of values tracked.
func (c *cache) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += s.n
		s.mu.Unlock()
	}
	return n
}

// lookup returns the entry of key without inserting or touching it, or nil.
func (c *cache) lookup(key string) *keyState {
	s, r := c.locate(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.find(&r)
}

// table maps key hashes to entries: open addressing with linear probing in a
// power-of-two array of (hash, entry) pairs, at most seven eighths full,
// growing by doubling (it never shrinks, as Go maps don't). The high bound
// keeps the table small, so more of it stays in cache (in a same-run
// benchmark with 100,000 cold values it beat three quarters). A lookup that
// finds its key probes (1 + 1/(1-load))/2 slots on average: 4.5 at the
// bound, about two cache lines; only inserts, which allocate anyway, probe
// far. A slot is 16
// bytes, four to a cache line, so a lookup usually reads one line of the
// table and then the entry, where a Go map reads its group's control word, the
// slot (often on another line) and then the entry. Keys with the same 64-bit
// hash take separate slots and are told apart by the entry's key (the second
// half of the fingerprint, for long values). A slot is indexed by the hash's
// top bits; the shard was chosen by its bottom bits.
type table struct {
	slots []slot
	shift uint // 64 - log2(len(slots))
}

type slot struct {
	h uint64
	e *keyState // nil: empty
}

// minTable is the length of a new table.
const minTable = 16

func (t *table) find(r *ref) *keyState {
	if len(t.slots) == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := r.h >> t.shift; ; i = (i + 1) & mask {
		sl := &t.slots[i]
		if sl.e == nil {
			return nil
		}
		if sl.h == r.h && sl.e.is(r) {
			return sl.e
		}
	}
}

// insert adds e, whose key's hash is h, to a table that will then hold n
// entries.
func (t *table) insert(h uint64, e *keyState, n int) {
	if 8*n > 7*len(t.slots) {
		t.grow(max(minTable, 2*len(t.slots)))
	}
	t.put(h, e)
}

func (t *table) put(h uint64, e *keyState) {
	mask := uint64(len(t.slots) - 1)
	i := h >> t.shift
	for t.slots[i].e != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = slot{h, e}
}

func (t *table) grow(size int) {
	old := t.slots
	t.slots = make([]slot, size)
	t.shift = uint(64 - bits.TrailingZeros(uint(size)))
	for _, sl := range old {
		if sl.e != nil {
			t.put(sl.h, sl.e)
		}
	}
}

// remove takes e, whose key's hash is h, out of the table, which must hold
// it. Entries after it in its run move back to keep every entry reachable
// from its home slot without gaps (backward-shift deletion, no tombstones).
func (t *table) remove(h uint64, e *keyState) {
	mask := uint64(len(t.slots) - 1)
	i := h >> t.shift
	for t.slots[i].e != e {
		i = (i + 1) & mask
	}
	for j := i; ; {
		j = (j + 1) & mask
		sl := t.slots[j]
		if sl.e == nil {
			break
		}
		// sl may fill the hole at i unless its home lies cyclically in (i, j].
		home := sl.h >> t.shift
		if (i < j && (home <= i || home > j)) || (i > j && home <= i && home > j) {
			t.slots[i] = sl
			i = j
		}
	}
	t.slots[i] = slot{}
}

// fifo is a growable ring of entries.
type fifo struct {
	buf     []*keyState
	head, n int
}

func (q *fifo) push(e *keyState) {
	if q.n == len(q.buf) {
		nb := make([]*keyState, max(8, 2*len(q.buf)))
		for i := 0; i < q.n; i++ {
			nb[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = nb, 0
	}
	i := q.head + q.n
	if i >= len(q.buf) {
		i -= len(q.buf)
	}
	q.buf[i] = e
	q.n++
}

func (q *fifo) pop() *keyState {
	e := q.buf[q.head]
	q.buf[q.head] = nil
	q.head++
	if q.head == len(q.buf) {
		q.head = 0
	}
	q.n--
	return e
}

// ghost remembers the hashes of the last values evicted from the small
// queue, at most size of them; its ring grows as it fills. It is a
// heuristic: a hash taken out of the set stays in the ring, and overwriting
// it later may forget a newer copy early.
type ghost struct {
	ring []uint64
	size int
	next int
	set  map[uint64]struct{}
}

func (g *ghost) init(size int) {
	g.size = size
	g.set = make(map[uint64]struct{})
}

func (g *ghost) add(h uint64) {
	if _, ok := g.set[h]; ok {
		return
	}
	if len(g.ring) < g.size {
		g.ring = append(g.ring, h)
	} else {
		delete(g.set, g.ring[g.next])
		g.ring[g.next] = h
		g.next++
		if g.next == len(g.ring) {
			g.next = 0
		}
	}
	g.set[h] = struct{}{}
}

// take reports whether h is remembered, and forgets it.
func (g *ghost) take(h uint64) bool {
	if _, ok := g.set[h]; !ok {
		return false
	}
	delete(g.set, h)
	return true
}
