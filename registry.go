package sluice

import (
	"hash/maphash"
	"sync"

	"sync/atomic"
)

// registry maps names to resources. Reads are lock-free: an immutable hash
// table behind an atomic pointer. Misses fall back to a locked map of all
// resources, which is copied into a new table once misses have paid for the
// copy.
//
// The table holds only pointers (and a tag of each name's hash), so it is
// small enough to stay in a core's private cache with tens of thousands of
// resources; a probe then costs one read of the resource's first cache
// line, which holds the name's bytes (when short) beside the rules in force
// and everything a check of the commonest rule needs (see resource).
type registry struct {
	read   atomic.Pointer[table]
	seed   maphash.Seed
	mu     sync.Mutex
	all    map[string]*resource
	misses int
}

func (reg *registry) init() {
	reg.seed = maphash.MakeSeed()
	reg.all = map[string]*resource{}
	reg.read.Store(newTable(reg.seed, reg.all))
}

// load returns the named resource if the read table has it (see
// table.get for now).
func (reg *registry) load(name string, now int64) *resource {
	return reg.read.Load().get(name, now)
}

// lookup returns the resource, creating it with mk when absent and allowed.
// It returns nil when mk does.
func (reg *registry) lookup(name string, mk func() *resource) *resource {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if r, ok := reg.all[name]; ok {
		reg.miss()
		return r
	}
	r := mk()
	if r == nil {
		return nil
	}
	reg.all[r.name] = r
	reg.miss()
	return r
}

// miss records a read-table miss and promotes the full map once misses
// reach an eighth of its size, so the copy costs at most eight entries per
// miss. Must hold mu.
func (reg *registry) miss() {
	reg.misses++
	if reg.misses < len(reg.all)/8+1 {
		return
	}
	reg.promote()
}

// promote replaces the read table with one of all resources. Must hold mu.
func (reg *registry) promote() {
	reg.read.Store(newTable(reg.seed, reg.all))
	reg.misses = 0
}

func (reg *registry) len() int {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	return len(reg.all)
}

// get returns the named resource, or nil; it does not create one.
func (reg *registry) get(name string) *resource {
	if r := reg.load(name, 0); r != nil {
		return r
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	return reg.all[name]
}

// rebind puts rules(r) in force on every resource.
func (reg *registry) rebind(rules func(r *resource) *ruleSet) {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	for _, r := range reg.all {
		r.setRules(rules(r))
	}
}

// table is an immutable open-addressing hash table (linear probing, at most
// half full) from resource names to resources. It replaces a Go map on the
// read path: a probe reads a 32-bit tag from a dense array and a pointer
// from another, both small enough to stay cached (10,000 resources take
// 384 KiB in all), and then the resource's first line, which the call needs
// anyway. A Go map probe touches its control word, its slot and the key's
// separately allocated bytes.
type table struct {
	seed maphash.Seed
	mask uint64
	tags []uint32    // the low half of the name's hash, with the low bit set; 0 marks an empty slot
	res  []*resource // the resource in each slot
}

func newTable(seed maphash.Seed, all map[string]*resource) *table {
	// At least 16 slots: the tags then fill a cache line of their own
	// rather than share one with another allocation that may be written.
	size := 16
	for size < 2*len(all) {
		size <<= 1
	}
	t := &table{seed: seed, mask: uint64(size - 1), tags: make([]uint32, size), res: make([]*resource, size)}
	for name, r := range all {
		h := maphash.String(seed, name)
		i := h >> 32
		for t.tags[i&t.mask] != 0 {
			i++
		}
		t.tags[i&t.mask] = uint32(h) | 1
		t.res[i&t.mask] = r
	}
	return t
}

// get returns the resource named name, or nil. now is the time of the call
// the resource is for: as soon as a probe has a candidate's address, it
// starts loading the counters that call will use (stat.Node.Prefetch), so
// that when they are not in cache, the misses overlap the one on the
// candidate's first line (which the name comparison reads) instead of
// following it.
func (t *table) get(name string, now int64) *resource {
	h := maphash.String(t.seed, name)
	tag := uint32(h) | 1
	for i := h >> 32; ; i++ {
		j := i & t.mask
		switch t.tags[j] {
		case tag:
			r := t.res[j]
			r.node.Prefetch(now)
			if r.named(name) {
				return r
			}
		case 0:
			return nil
		}
	}
}
