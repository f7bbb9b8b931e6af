package param

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"sync"
	"unsafe"

	"github.com/sluice-go/sluice/internal/entry"
)

// keyState is the state of one tracked value, and a slot of its shard's
// table: the value's state lives inside the table, so the check of a value
// nobody has touched for a while reads one cache line of main memory where
// a table of pointers to separate entries read two, one after the other.
// A slot is 64 bytes and the table's array is 64-byte aligned (see table),
// so a slot is exactly one cache line: the shard, the key's hash, the
// bucket or schedule or in-flight count, the use counter, the key's length
// and the key itself. TestEntryLayout pins this down.
//
// Its fields are guarded by shard.mu. A pointer to a slot is also the
// entry.Ticket its admitted requests hold. Slots never move within a table
// and never change value: a slot goes from empty to live to dead (a
// tombstone) and is reused only when the table is rebuilt into a new array.
// So a ticket finds its value again under the lock: in the slot it points
// to while that slot is in the current array (nothing, once dead: the value
// was forgotten), else by the key the old array's slot still holds (see
// shard.resolve).
type keyState struct {
	shard *shard
	h     uint64 // maphash of the key with the cache's seed

	// QPS reject: tokens and part are the bucket's content (tokens +
	// part/window), last the instant it was last refilled.
	// Throttle: the value's schedule ends at last + part/threshold ns (part
	// < threshold, the fraction of a nanosecond carried).
	// Concurrency: tokens counts the requests in flight.
	tokens int64
	part   uint64
	last   int64

	freq  uint8 // S3-FIFO access counter, 0..maxFreq
	flags uint8 // slotLive, slotDead, slotMain

	// klen is the length of the key whose bytes are kbuf[:klen], or
	// fingerprinted when kbuf[:8] holds the second half of the fingerprint
	// of a longer one (h is its first).
	klen uint8
	kbuf [maxKeyLen]byte
}

const (
	slotLive = 1 << iota // holds a tracked value
	slotDead             // held a value since forgotten (a tombstone)
	slotMain             // in the main queue (else the small one)
)

// inMain reports whether e is in its shard's main queue.
func (e *keyState) inMain() bool { return e.flags&slotMain != 0 }

// inflight returns the requests in flight for e (concurrency rules).
func (e *keyState) inflight() int64 {
	if e.shard.mode == modeConcurrency {
		return e.tokens
	}
	return 0
}

// maxKeyLen is the longest value the cache identifies by its bytes, kept
// inside its slot. A longer value is identified by its fingerprint: two
// 64-bit maphash hashes of it under independent random seeds, the cache's
// seed (which also picks the shard and the table slot) and a second one, so
// the cache keeps 16 bytes of it however long it is. Two distinct long
// values share a fingerprint with probability 2^-128 (if maphash under
// independent seeds behaves as independent random functions, which is its
// design goal; it is not a cryptographic hash); see docs/design/param.md.
const maxKeyLen = 21

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

// fill makes the empty slot e the live state of r in shard s.
func (e *keyState) fill(s *shard, r *ref, tokens, last int64) {
	*e = keyState{shard: s, h: r.h, tokens: tokens, last: last, flags: slotLive}
	if r.long() {
		e.klen = fingerprinted
		binary.LittleEndian.PutUint64(e.kbuf[0:], r.h2)
	} else {
		e.klen = uint8(len(r.key))
		copy(e.kbuf[:], r.key)
	}
}

// is reports whether e holds the key of r (whether or not it is live).
func (e *keyState) is(r *ref) bool {
	if e.h != r.h {
		return false
	}
	if r.long() {
		return e.klen == fingerprinted && binary.LittleEndian.Uint64(e.kbuf[0:]) == r.h2
	}
	return int(e.klen) == len(r.key) && string(e.kbuf[:len(r.key)]) == r.key
}

// sameKey reports whether e and o hold the same key.
func (e *keyState) sameKey(o *keyState) bool {
	return e.h == o.h && e.klen == o.klen && e.kbuf == o.kbuf
}

var _ entry.Ticket = (*keyState)(nil)

// Release gives back what an admitted request holds: its in-flight count,
// or, when a later check refused the entry, the tokens it took. It goes to
// the value's state if the value is still tracked (in-flight values always
// are).
func (e *keyState) Release(x entry.ExitInfo) {
	s := e.shard
	switch s.mode {
	case modeConcurrency:
		s.mu.Lock()
		if c := s.resolve(e); c != nil {
			c.tokens -= x.Batch
		}
		s.mu.Unlock()
	case modeReject:
		if x.Blocked {
			s.mu.Lock()
			if c := s.resolve(e); c != nil {
				c.tokens += x.Batch // clamped to the bucket size at the next refill
			}
			s.mu.Unlock()
		}
	case modeWindow:
		if x.Blocked {
			s.mu.Lock()
			if c := s.resolve(e); c != nil {
				unwindow(c, x.Start, x.Batch, s.window)
			}
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
	n        int // number of live values
	small    fifo
	main     fifo
	ghost    ghost
	cap      int
	smallCap int
	mode     mode
	window   int64    // the rule's Duration in ns (modeWindow: see unwindow)
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

// get returns the live state of r, filling a slot with the given initial
// tokens and last instant when r is not tracked. The caller must hold s.mu;
// the pointer stays the value's (see keyState) but is valid to use only
// under s.mu. The value is copied (or fingerprinted) before it is kept.
func (s *shard) get(r *ref, tokens, last int64) *keyState {
	if e := s.tab.find(r); e != nil {
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
	if 4*(s.tab.used+1) > 3*len(s.tab.slots) {
		s.rebuild()
	}
	i := s.tab.free(r.h)
	e := &s.tab.slots[i]
	e.fill(s, r, tokens, last)
	s.tab.used++
	s.n++
	if s.ghost.take(r.h) {
		e.flags |= slotMain
		s.main.push(i)
	} else {
		s.small.push(i)
	}
	return e
}

// busy reports whether e has requests in flight.
func (s *shard) busy(e *keyState) bool { return s.mode == modeConcurrency && e.tokens > 0 }

// evict forgets one value and reports true, or reports false when every
// value has requests in flight. Must hold s.mu.
func (s *shard) evict() bool {
	for budget := 4*(s.small.n+s.main.n) + 8; budget > 0; budget-- {
		if s.small.n > 0 && (s.small.n >= s.smallCap || s.main.n == 0) {
			i := s.small.pop()
			e := &s.tab.slots[i]
			if e.freq > 0 || s.busy(e) {
				e.freq = 0
				e.flags |= slotMain
				s.main.push(i)
				continue
			}
			s.remove(e)
			s.ghost.add(e.h)
			return true
		}
		if s.main.n == 0 {
			return false
		}
		i := s.main.pop()
		e := &s.tab.slots[i]
		if e.freq > 0 {
			e.freq--
			s.main.push(i)
			continue
		}
		if s.busy(e) {
			s.main.push(i)
			continue
		}
		s.remove(e)
		return true
	}
	return false
}

// find returns the live state of r, or nil. Must hold s.mu.
func (s *shard) find(r *ref) *keyState {
	return s.tab.find(r)
}

// remove forgets the value of the live slot e, which stays a tombstone
// until the table is rebuilt. Must hold s.mu.
func (s *shard) remove(e *keyState) {
	e.flags = slotDead
	s.n--
}

// resolve returns the live state of the value whose slot (in the current
// table or in one it was rebuilt from) is e, or nil when the value is no
// longer tracked. Must hold s.mu.
func (s *shard) resolve(e *keyState) *keyState {
	if s.tab.holds(e) {
		if e.flags&slotLive != 0 {
			return e
		}
		return nil
	}
	return s.tab.findSame(e)
}

// rebuild moves the live values into a new array, dropping the tombstones,
// twice as large while the values would fill more than five eighths of it
// (so at least an eighth of it is free for inserts before the next
// rebuild), and renumbers the queues. The old array keeps its contents for
// the tickets that point into it (see resolve). Must hold s.mu.
func (s *shard) rebuild() {
	old := s.tab.slots
	size := max(minTable, len(old))
	for 8*(s.n+1) > 5*size {
		size *= 2
	}
	s.tab.slots = make([]keyState, size)
	s.tab.shift = uint(64 - bits.TrailingZeros(uint(size)))
	s.tab.used = 0
	to := make([]uint32, len(old))
	for i := range old {
		if old[i].flags&slotLive != 0 {
			j := s.tab.free(old[i].h)
			s.tab.slots[j] = old[i]
			s.tab.used++
			to[i] = j
		}
	}
	s.small.renumber(to)
	s.main.renumber(to)
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

// lookup returns a copy of the state of key without inserting or touching
// it, and false when key is not tracked.
func (c *cache) lookup(key string) (keyState, bool) {
	s, r := c.locate(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.find(&r); e != nil {
		return *e, true
	}
	return keyState{}, false
}

// table holds a shard's values: open addressing with linear probing in a
// power-of-two array of 64-byte slots, each the whole state of one value
// (keyState). A slot is indexed by the top bits of its key's hash (the
// shard was chosen by its bottom bits). A lookup stops at the first empty
// slot and passes over tombstones; an insert takes the first empty slot
// (never a tombstone, so that a slot never changes value). The table is
// rebuilt when live slots and tombstones would fill more than three
// quarters of it (see shard.rebuild), so a lookup that finds its value
// probes (1 + 1/(1-load))/2 slots on average, at most 2.5 and 1.5 at half
// load: usually one cache line, the one the value's state is on, where a
// table of pointers to separate entries read a line of the table and then
// the entry's. Keys with the same 64-bit hash take separate slots and are
// told apart by the key (the second half of the fingerprint, for long
// values).
//
// The array's length is a power of two of at least minTable slots, so its
// size (1 KiB and up) is a size class of the Go allocator whose objects
// are aligned to it (or a page-aligned large object): every slot is one
// aligned cache line. TestEntryLayout checks it.
type table struct {
	slots []keyState
	shift uint // 64 - log2(len(slots))
	used  int  // live slots and tombstones
}

// minTable is the length of a new table.
const minTable = 16

func (t *table) find(r *ref) *keyState {
	if len(t.slots) == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := r.h >> t.shift; ; i = (i + 1) & mask {
		e := &t.slots[i]
		if e.flags == 0 {
			return nil
		}
		if e.flags&slotLive != 0 && e.is(r) {
			return e
		}
	}
}

// findSame returns the live slot holding the same key as o, a slot of
// another array, or nil.
func (t *table) findSame(o *keyState) *keyState {
	if len(t.slots) == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := o.h >> t.shift; ; i = (i + 1) & mask {
		e := &t.slots[i]
		if e.flags == 0 {
			return nil
		}
		if e.flags&slotLive != 0 && e.sameKey(o) {
			return e
		}
	}
}

// holds reports whether e is a slot of t's array.
func (t *table) holds(e *keyState) bool {
	if len(t.slots) == 0 {
		return false
	}
	off := uintptr(unsafe.Pointer(e)) - uintptr(unsafe.Pointer(&t.slots[0]))
	return off < uintptr(len(t.slots))*unsafe.Sizeof(keyState{})
}

// free returns the first empty slot from h's home on. The table must have
// one.
func (t *table) free(h uint64) uint32 {
	mask := uint64(len(t.slots) - 1)
	i := h >> t.shift
	for t.slots[i].flags != 0 {
		i = (i + 1) & mask
	}
	return uint32(i)
}

// fifo is a growable ring of slot numbers.
type fifo struct {
	buf     []uint32
	head, n int
}

func (q *fifo) push(e uint32) {
	if q.n == len(q.buf) {
		nb := make([]uint32, max(8, 2*len(q.buf)))
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

func (q *fifo) pop() uint32 {
	e := q.buf[q.head]
	q.head++
	if q.head == len(q.buf) {
		q.head = 0
	}
	q.n--
	return e
}

// renumber replaces each slot number i in the queue by to[i].
func (q *fifo) renumber(to []uint32) {
	for k := 0; k < q.n; k++ {
		i := (q.head + k) % len(q.buf)
		q.buf[i] = to[q.buf[i]]
	}
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
