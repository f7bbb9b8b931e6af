package rls

import (
	"context"
	"hash/maphash"
	"sync"
)

// hit is one descriptor's count to add in one request: Addend more hits on
// the counter Key, whose window ends at Expires (Unix seconds).
type hit struct {
	Key     string
	Addend  uint64
	Expires int64
	Limit   uint64 // the limit's requests per unit (leases grant up to it)
}

// counters keeps fixed-window counts. Add adds each hit's Addend to its
// counter (creating it at zero) and writes the count after the addition to
// after[i]; an Addend of 0 reads the count.
type counters interface {
	Add(ctx context.Context, now int64, hits []hit, after []uint64) error
}

const localShards = 64

// localCounters counts in this process: a counter per key, forgotten once its
// window has ended. At most maxKeys live counters are kept; when they are
// all live, a new key is counted on its shard's overflow counter, shared by
// every such key, which can only refuse early, never admit more.
type localCounters struct {
	seed    maphash.Seed
	shards  [localShards]localShard
	maxKeys int // per shard
}

type localShard struct {
	mu        sync.Mutex
	m         map[string]*localCount
	nextSweep int
	lastSweep int64 // the second of the last sweep
	overflow  localCount
}

type localCount struct {
	n       uint64
	expires int64
}

func newLocalCounters(maxKeys int) *localCounters {
	if maxKeys <= 0 {
		maxKeys = 1 << 20
	}
	c := &localCounters{seed: maphash.MakeSeed(), maxKeys: max(1, maxKeys/localShards)}
	for i := range c.shards {
		c.shards[i].m = map[string]*localCount{}
		c.shards[i].nextSweep = 1024
	}
	return c
}

func (c *localCounters) Add(_ context.Context, now int64, hits []hit, after []uint64) error {
	for i, h := range hits {
		s := &c.shards[maphash.String(c.seed, h.Key)%localShards]
		s.mu.Lock()
		after[i] = s.add(now, h, c.maxKeys)
		s.mu.Unlock()
	}
	return nil
}

func (s *localShard) add(now int64, h hit, maxKeys int) uint64 {
	cnt := s.m[h.Key]
	if cnt == nil || cnt.expires <= now {
		if cnt == nil && len(s.m) >= s.nextSweep && now != s.lastSweep {
			s.sweep(now, maxKeys)
		}
		if cnt == nil && len(s.m) >= maxKeys {
			if s.overflow.expires <= now {
				s.overflow = localCount{expires: h.Expires}
			}
			s.overflow.n = satAdd(s.overflow.n, h.Addend)
			return s.overflow.n
		}
		if cnt == nil {
			cnt = &localCount{}
			s.m[h.Key] = cnt
		}
		*cnt = localCount{expires: h.Expires}
	}
	cnt.n = satAdd(cnt.n, h.Addend)
	return cnt.n
}

// satAdd is a+b, or the largest uint64 when that overflows.
func satAdd(a, b uint64) uint64 {
	if a+b < a {
		return ^uint64(0)
	}
	return a + b
}

// sweep forgets counters whose window has ended; the next sweep comes when
// the map has doubled since (amortised constant time per new key), and at
// most once a second when the live counters fill the shard.
func (s *localShard) sweep(now int64, maxKeys int) {
	s.lastSweep = now
	for k, v := range s.m {
		if v.expires <= now {
			delete(s.m, k)
		}
	}
	s.nextSweep = min(max(1024, 2*len(s.m)), maxKeys)
}

// Raise sets each hit's counter to at least floor[i] (in the hit's window),
// without counting: the Redis counters seed the fallback with the fleet's
// use so far.
func (c *localCounters) Raise(now int64, hits []hit, floor []uint64) {
	for i, h := range hits {
		s := &c.shards[maphash.String(c.seed, h.Key)%localShards]
		s.mu.Lock()
		if n := s.add(now, hit{Key: h.Key, Expires: h.Expires}, c.maxKeys); n < floor[i] {
			if cnt := s.m[h.Key]; cnt != nil {
				cnt.n = floor[i]
			}
		}
		s.mu.Unlock()
	}
}
