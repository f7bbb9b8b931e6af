package window

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"sync/atomic"
)

// TestPadSeparatesLines checks the one property a Pad promises, for every
// placement of a struct relative to a line: no line holds bytes of both the
// field before the pad and the field after it.
func TestPadSeparatesLines(t *testing.T) {
	type padded struct {
		before atomic.Uint64
		_      Pad
		after  atomic.Uint64
	}
	var p padded
	first := unsafe.Offsetof(p.before) + unsafe.Sizeof(p.before) - 1 // last byte of before
	second := unsafe.Offsetof(p.after)                               // first byte of after
	for base := uintptr(0); base < CacheLine; base += 8 {
		require.NotEqual(t, (base+first)/CacheLine, (base+second)/CacheLine, "struct at line offset %d", base)
	}
}

func TestPrefetchLeavesTheValue(t *testing.T) {
	var w atomic.Uint64
	w.Store(42)
	Prefetch(&w)
	require.Equal(t, uint64(42), w.Load())
}
