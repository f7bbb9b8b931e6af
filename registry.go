package sluice

import (
	"hash/maphash"
	"sync"

	"go.uber.org/atomic"
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

func (r *registry) init() {
	r.seed = maphash.MakeSeed()
	r.all = map[string]*resource{}
	r.read.Store(newTable(r.seed, r.all))
}

// load returns the named resource if the read table has it (see
// table.get for now).
func (r *registry) load(name string, now int64) *resource {
	return r.read.Load().get(name, now)
}

// lookup returns the resource, creating it with mk when absent and allowed.
// It returns nil when mk does.
func (r *registry) lookup(name string, mk func() *resource) *resource {
	r.mu.Lock()
	defer r.mu.Unlock()
	if x, ok := r.all[name]; ok {
		r.miss()
		return x
	}
	x := mk()
	if x == nil {
		return nil
	}
	r.all[x.name] = x
	r.miss()
	return x
}

// miss records a read-table miss and promotes the full map once misses
// reach an eighth of its size, so the copy costs at most eight entries per
// miss. Must hold mu.
func (r *registry) miss() {
	r.misses++
	if r.misses < len(r.all)/8+1 {
		return
	}
	r.promote()
}

// promote replaces the read table with one of all resources. Must hold mu.
func (r *registry) promote() {
	r.read.Store(newTable(r.seed, r.all))
	r.misses = 0
}

func (r *registry) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.all)
}

// get returns the named resource, or nil; it does not create one.
func (r *registry) get(name string) *resource {
	if x := r.load(name, 0); x != nil {
		return x
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.all[name]
}

// rebind puts rules(x) in force on every resource.
func (r *registry) rebind(rules func(x *resource) *ruleSet) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.all {
		x.setRules(rules(x))
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
	for name, x := range all {
		h := maphash.String(seed, name)
		i := h >> 32
		for t.tags[i&t.mask] != 0 {
			i++
		}
		t.tags[i&t.mask] = uint32(h) | 1
		t.res[i&t.mask] = x
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
			x := t.res[j]
			x.node.Prefetch(now)
			if x.named(name) {
				return x
			}
		case 0:
			return nil
		}
	}
}
