package param

import (
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/sluice-go/sluice/internal/entry"
)

// Prefetch starts loading, without taking the shard's lock, the table line
// and the state of the value that args carry for the rule, so that a Check
// soon after finds them in cache: the engine calls it before its own work
// (the clock read, the flow checks), which then overlaps the two dependent
// memory reads a check on a cold value otherwise waits for (the slot, then
// the entry it points to). It reads the table racily and only to load
// lines: nothing it reads is used. It is a no-op under the race detector,
// which would report those reads (see prefetchOn).
func (c *Controller) Prefetch(args entry.Args) {
	if !prefetchOn || c.cl != nil {
		return
	}
	var buf keyBuf
	key, ok := c.key(args, &buf)
	if !ok {
		return
	}
	s, h, _ := c.cache.hashes(key)
	s.tab.prefetch(h)
}

// key is the value of the rule's argument in args, as Check reads it.
func (c *Controller) key(args entry.Args, buf *keyBuf) (string, bool) {
	if c.rule.Key != "" {
		return keyOf(args.Named(c.rule.Key), buf)
	}
	v, x := args.At(c.rule.Index)
	if v != nil {
		return keyOf(v, buf)
	}
	return anyKey(x, buf)
}

// prefetch loads the slots of h's home line up to h's own, and the first
// line of the entry found there. The slots are read through the table's
// published array (pub), whose length and contents always agree, so every
// address is in bounds whatever a writer does meanwhile.
func (t *table) prefetch(h uint64) {
	p := t.pub.Load()
	if p == nil {
		return
	}
	sl := *p
	if len(sl) == 0 {
		return
	}
	mask := uint64(len(sl) - 1)
	i := h >> (64 - bits.TrailingZeros(uint(len(sl))))
	for k := 0; k < slotsPerLine; k++ {
		s := &sl[(i+uint64(k))&mask]
		e := (*atomic.Pointer[keyState])(unsafe.Pointer(&s.e)).Load()
		if e == nil {
			return
		}
		if (*atomic.Uint64)(unsafe.Pointer(&s.h)).Load() == h {
			(*atomic.Int64)(unsafe.Pointer(&e.tokens)).Load()
			return
		}
	}
}

// slotsPerLine is how many table slots share a cache line.
const slotsPerLine = 64 / int(unsafe.Sizeof(slot{}))
