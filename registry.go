package sluice

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/internal/window"
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
//
// Resources come and go. Traffic creates them, up to max; beyond that,
// entries of further names count under the overflow resource, and the read
// table, complete whenever the registry is full, answers such an entry by
// itself: no lock, no allocation. Resources that rules need are created
// whatever the limit. A sweep (see sweep) forgets resources that no rule
// needs and that have been idle for reclaimAfter, which makes room again.
type registry struct {
	read atomic.Pointer[table]
	// nextSweep is the clock reading before which entries of names the
	// registry has no room for go to the overflow resource without trying
	// to make room (a sweep sets it, sweepEvery ahead).
	nextSweep atomic.Int64
	seed      maphash.Seed
	max       int
	history   time.Duration // each resource's history (WithHistory)

	mu       sync.Mutex // guards the fields below
	all      map[string]*resource
	overflow *resource // nil until an entry first overflows
	misses   int
	stale    bool // resources were created for rules since the last promote
	// marks holds, for every resource but the overflow one, when a sweep
	// is next to look at it and what it saw then (see sweep).
	marks map[*resource]idleMark
}

// How long a resource must stay idle before a sweep forgets it, and how
// often, at most, entries that find the registry full try to make room. A
// resource that no rule needs must go reclaimAfter without new entries
// (and with none in flight) before the engine may forget it, statistics
// included; a later entry of its name starts afresh. The engine looks for
// such resources at rule loads, and when a new resource needs room in a
// full engine (at most once per sweepEvery of its clock); it looks at each
// resource once per reclaimAfter, so one is forgotten between one and two
// timeouts after its last entry, given sweeps. It starts no goroutine for
// this.
const (
	reclaimAfter = 2 * time.Minute
	sweepEvery   = reclaimAfter / 4
)

// idleMark is what the registry last saw of a resource.
type idleMark struct {
	since   int64  // clock reading of the look, ns
	entries uint64 // entries (passed and blocked) the resource had counted then, or unseen
	// forRules is set on a resource made for rules (not by an entry): one
	// that never counted an entry is forgotten as soon as no rule needs
	// it, so that removing rules gives their memory back at once.
	forRules bool
}

// unseen marks a look that did not count the entries (the resource was in
// use then).
const unseen = ^uint64(0)

func (reg *registry) init(max int, history time.Duration) {
	reg.history = history
	reg.seed = maphash.MakeSeed()
	reg.max = max
	reg.all = map[string]*resource{}
	reg.marks = map[*resource]idleMark{}
	reg.promote()
}

// lookup returns the named resource, creating it at now when the registry
// has room for it or force is set (for rules, which must rebind to make the
// read table know it: see rebind); otherwise it returns nil. Must hold mu.
func (reg *registry) lookup(name string, now int64, force bool) *resource {
	if r := reg.all[name]; r != nil {
		if !force {
			reg.miss()
		}
		return r
	}
	if !force && len(reg.all) >= reg.max {
		return nil
	}
	r := newResourceHistory(name, reg.history)
	reg.all[r.name] = r
	reg.marks[r] = idleMark{since: now, forRules: force} // no entries yet
	switch {
	case force:
		reg.stale = true
	case len(reg.all) >= reg.max:
		reg.promote() // full: the table must know every resource
	default:
		reg.miss()
	}
	return r
}

// overflowResource returns the overflow resource, creating it (whatever the
// limit) the first time, and makes sure the read table answers overflowing
// names with it. Must hold mu, with the registry full.
func (reg *registry) overflowResource() *resource {
	if reg.overflow == nil {
		reg.overflow = reg.lookup(overflowResource, 0, true)
		delete(reg.marks, reg.overflow) // never forgotten
	}
	if reg.read.Load().overflow != reg.overflow {
		reg.promote()
	}
	return reg.overflow
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
	t := newTable(reg.seed, reg.all)
	if len(reg.all) >= reg.max {
		t.overflow = reg.overflow
	}
	reg.read.Store(t)
	reg.misses = 0
	reg.stale = false
}

// len returns the number of resources tracked.
func (reg *registry) len() int {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	return len(reg.all)
}

// get returns the named resource, or nil; it does not create one.
func (reg *registry) get(name string) *resource {
	if r := reg.read.Load().get(name, 0); r != nil {
		return r
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	return reg.all[name]
}

// rebind puts rules(r) in force on every resource, and makes the read table
// know the resources created for rules.
func (reg *registry) rebind(rules func(r *resource) *ruleSet) {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	for _, r := range reg.all {
		r.setRules(rules(r))
	}
	if reg.stale {
		reg.promote()
	}
}

// sweep forgets the resources that have been idle for reclaimAfter, at now
// (a reading of the engine's clock), and lets entries sweep again
// sweepEvery later. Must hold mu.
//
// It looks at a resource once per reclaimAfter, at the first sweep after
// its mark comes due: one that keep claims (the engine keeps the ones rules
// need) or that has an entry in flight is marked again, unseen; one whose
// count of entries is the one marked reclaimAfter ago or more is
// forgotten; any other is marked again with its count. A resource is
// therefore forgotten between reclaimAfter and twice that after its last
// entry (later if sweeps are rarer), and a sweep costs a map iteration plus,
// for the few resources due, one count of their windows. A resource made
// for rules that never counted an entry is forgotten at the first sweep
// after no rule needs it (a rule load sweeps), whatever its mark: it holds
// no statistics, only memory (about 6 KiB plus its history).
//
// A forgotten resource is gone for good: it is out of the map and of the
// read table, so a later entry of its name makes a new one, which starts
// with empty statistics. An entry that found it in the read table just
// before it was forgotten (it was idle, so only one racing with the sweep)
// counts into it, and its Pass keeps it until Exit; those counts are lost
// with it. Nothing else is: it had no rules to enforce.
func (reg *registry) sweep(now int64, keep func(*resource) bool) {
	reg.nextSweep.Store(now + int64(sweepEvery))
	forgot := false
	for r, m := range reg.marks {
		unused := m.forRules && !keep(r) && r.node.Concurrency() == 0 &&
			r.node.Total(now, window.Pass)+r.node.Total(now, window.Block) == 0
		if now-m.since < int64(reclaimAfter) && !unused {
			continue
		}
		if !unused && (keep(r) || r.node.Concurrency() != 0) {
			reg.marks[r] = idleMark{since: now, entries: unseen, forRules: m.forRules}
			continue
		}
		n := r.node.Total(now, window.Pass) + r.node.Total(now, window.Block)
		if !unused && n != m.entries {
			reg.marks[r] = idleMark{since: now, entries: n, forRules: m.forRules}
			continue
		}
		delete(reg.all, r.name)
		delete(reg.marks, r)
		forgot = true
	}
	if forgot || reg.stale { // stale: a load made resources, then failed
		reg.promote()
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
	// overflow is set when the registry was full as the table was made:
	// the table then holds every resource, and a name it lacks is counted
	// under overflow.
	overflow *resource
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
