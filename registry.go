package sluice

import (
	"hash/maphash"
	"sync"

	"go.uber.org/atomic"
)

// registry maps names to resources. Reads are lock-free: an immutable hash
// table behind an atomic pointer. Misses fall back to a locked map of all
// resources, which is copied into a new table once misses have paid for the
// copy, and whenever rules change.
//
// The table holds, beside each resource, the rule set in force on it (a
// binding), so one probe gives both pointers at once: a call on a resource
// that is not in cache waits for the resource's counters and for its rules
// in parallel, rather than reading the rules pointer out of the resource
// first. The authoritative rule set is resource.rules; bindings are refreshed
// from it by every promotion, and publish promotes after storing.
type registry struct {
	read   atomic.Pointer[table]
	seed   maphash.Seed
	mu     sync.Mutex
	all    map[string]*resource
	misses int
}

// binding is a resource and the rule set in force on it (nil for none).
type binding struct {
	res   *resource
	rules *ruleSet
}

func (r *registry) init() {
	r.seed = maphash.MakeSeed()
	r.all = map[string]*resource{}
	r.read.Store(newTable(r.seed, r.all))
}

func (r *registry) load(name string) binding {
	return r.read.Load().get(name)
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

// promote replaces the read table with one of all resources, bound to the
// rule sets now in force. Must hold mu.
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
	if b := r.load(name); b.res != nil {
		return b.res
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.all[name]
}

// rebind stores rules(x) as the rule set of every resource and promotes, so
// the read table binds the new sets.
func (r *registry) rebind(rules func(x *resource) *ruleSet) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.all {
		x.rules.Store(rules(x))
	}
	r.promote()
}

// table is an immutable open-addressing hash table (linear probing, at most
// half full) from resource names to bindings. It replaces a Go map on the
// read path because a probe then touches exactly one cache line: the slot
// holds the name's bytes (when short) beside the binding, where a Go map
// probe touches its control word, its slot and the key's separately
// allocated bytes, and a table of pointers would need the resource's line to
// compare names.
type table struct {
	seed  maphash.Seed
	mask  uint64
	slots []tableSlot
}

// tableSlot is one cache line: never split across two, since the slots'
// array is page-aligned and the size is 64.
type tableSlot struct {
	hash uint64 // the name's hash with the low bit set; 0 marks an empty slot
	b    binding
	n    uint8 // the name's length, or longName
	name [slotName]byte
}

const (
	// slotName is the longest name held in a table slot.
	slotName = 39
	// longName marks a slot whose name is longer than slotName: the
	// comparison then reads the resource's name.
	longName = 255
)

func newTable(seed maphash.Seed, all map[string]*resource) *table {
	size := 8
	for size < 2*len(all) {
		size <<= 1
	}
	t := &table{seed: seed, mask: uint64(size - 1), slots: make([]tableSlot, size)}
	for name, x := range all {
		h := t.hash(name)
		i := h
		for t.slots[i&t.mask].hash != 0 {
			i++
		}
		s := &t.slots[i&t.mask]
		*s = tableSlot{hash: h, b: binding{res: x, rules: x.rules.Load()}, n: longName}
		if len(name) <= slotName {
			s.n = uint8(len(name))
			copy(s.name[:], name)
		}
	}
	return t
}

func (t *table) hash(name string) uint64 {
	return maphash.String(t.seed, name) | 1
}

// get returns the binding of name, or a zero binding.
func (t *table) get(name string) binding {
	h := t.hash(name)
	for i := h; ; i++ {
		s := &t.slots[i&t.mask]
		if s.hash == h && s.matches(name) {
			return s.b
		}
		if s.hash == 0 {
			return binding{}
		}
	}
}

func (s *tableSlot) matches(name string) bool {
	if s.n == longName {
		return s.b.res.name == name
	}
	return int(s.n) == len(name) && string(s.name[:s.n]) == name
}
