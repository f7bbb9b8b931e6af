package param

import (
	"hash/maphash"
	"strings"
	"sync"

	"go.uber.org/atomic"

	"github.com/sluice-go/sluice/core"
)

// entry is the state of one tracked value. Its fields other than key,
// shard and inflight are guarded by shard.mu. An entry is also the
// core.Ticket its admitted requests hold: the release goes to this object,
// whether or not it is still in the cache.
type entry struct {
	key   string // owned copy of the value's string form
	shard *shard
	next  *entry // next entry whose key has the same 64-bit hash

	freq   uint8 // S3-FIFO access counter, 0..maxFreq
	inMain bool  // in the main queue (else the small one)

	// QPS reject: tokens and part are the bucket's content (tokens +
	// part/window), last the instant it was last refilled.
	// Throttle: last is the latest scheduled pass, part the fraction of a
	// nanosecond beyond it, in units of 1/threshold.
	tokens int64
	part   uint64
	last   int64

	// inflight counts requests in flight (concurrency rules). It is raised
	// only under shard.mu and lowered without it.
	inflight atomic.Int64
}

var _ core.Ticket = (*entry)(nil)

// Release gives back what an admitted request holds: its in-flight count,
// or, when a later check refused the entry, the tokens it took.
func (e *entry) Release(x core.ExitInfo) {
	s := e.shard
	switch s.mode {
	case modeConcurrency:
		e.inflight.Sub(x.Batch)
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
// each a map and an S3-FIFO eviction policy (Yang et al., SOSP 2023) under
// one short mutex. New values enter a small FIFO queue (a tenth of the
// shard); values seen again before they reach its end move to the main queue,
// the others are forgotten and remembered in a ghost set of hashes, so a
// value that comes back soon goes straight to main. The main queue is a
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
	mask   uint64
	shards []shard
	mode   mode
	cap    int
}

type shard struct {
	mu       sync.Mutex
	m        map[uint64]*entry // by the key's hash, colliding keys chained
	n        int               // number of entries
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
	c := &cache{seed: maphash.MakeSeed(), mask: uint64(n - 1), shards: make([]shard, n), mode: m, cap: capacity}
	for i := range c.shards {
		s := &c.shards[i]
		s.cap = capacity / n
		if i < capacity%n {
			s.cap++
		}
		s.smallCap = max(1, s.cap/10)
		s.m = make(map[uint64]*entry)
		s.ghost.init(max(1, s.cap-s.smallCap))
		s.mode = m
		s.seed = c.seed
	}
	return c
}

// shardOf returns the shard of key and key's hash.
func (c *cache) shardOf(key string) (*shard, uint64) {
	h := maphash.String(c.seed, key)
	return &c.shards[h&c.mask], h
}

// get returns the entry of key, inserting one with the given initial tokens
// and last instant when absent. The caller must hold s.mu; key is cloned
// before it is kept.
func (s *shard) get(key string, h uint64, tokens, last int64) *entry {
	if e := s.find(key, h); e != nil {
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
	e := &entry{key: strings.Clone(key), shard: s, tokens: tokens, last: last}
	e.next = s.m[h]
	s.m[h] = e
	s.n++
	if s.ghost.take(h) {
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
			s.ghost.add(s.remove(e))
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
		s.remove(e)
		return true
	}
	return false
}

// find returns the entry of key, whose hash is h, or nil. Must hold s.mu.
func (s *shard) find(key string, h uint64) *entry {
	for e := s.m[h]; e != nil; e = e.next {
		if e.key == key {
			return e
		}
	}
	return nil
}

// remove takes e out of the map and returns its key's hash. Must hold s.mu.
func (s *shard) remove(e *entry) uint64 {
	h := maphash.String(s.seed, e.key)
	if p := s.m[h]; p == e {
		if e.next == nil {
			delete(s.m, h)
		} else {
			s.m[h] = e.next
		}
	} else {
		for ; p.next != e; p = p.next {
		}
		p.next = e.next
	}
	e.next = nil
	s.n--
	return h
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
func (c *cache) lookup(key string) *entry {
	s, h := c.shardOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.find(key, h)
}

// fifo is a growable ring of entries.
type fifo struct {
	buf     []*entry
	head, n int
}

func (q *fifo) push(e *entry) {
	if q.n == len(q.buf) {
		nb := make([]*entry, max(8, 2*len(q.buf)))
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

func (q *fifo) pop() *entry {
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
