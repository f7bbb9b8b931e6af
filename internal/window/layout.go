// This file is where sluice decides how request-path data sits in
// memory: the cache line size, the padding that keeps data written by
// different cores (or written and only read) off each other's lines, and
// the prefetch that starts loading a line before it is needed.
//
// Layouts built with it depend only on the sizes of their own fields, never
// on where the allocator puts an object: a Pad separates two fields by a
// full line whatever the object's address, so no package needs to know
// another's offsets or the allocator's headers to stay free of false
// sharing. Alignment that happens to be better than that makes calls a
// little cheaper; the benchmarks, not tests of addresses, watch for it.

package window

import "sync/atomic"

// CacheLine is the size in bytes of the cache line of the processors sluice
// is tuned for (x86-64 and the common arm64 server cores).
const CacheLine = 64

// Pad is one cache line of padding. A field declared after a Pad never
// shares a cache line with a field declared before it, wherever the
// allocator places the struct. Its zero value is all it needs.
type Pad [CacheLine]byte

// Prefetch starts loading the cache line that holds *p and drops the value.
// A caller that knows which lines it will touch, but has other work to do
// first, calls it early so that the misses overlap that work instead of
// following it. Go has no prefetch instruction; this is a plain atomic load,
// which the compiler never removes and the processor does not wait for
// until its result is used (here: never).
//
// It is safe for concurrent use. Do not prefetch a line other cores keep
// writing well before writing it yourself: the early read costs a second
// transfer of the line.
func Prefetch(p *atomic.Uint64) { p.Load() }
