package param

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/entry"
)

type point struct {
	X, Y int
	Tag  string
}

type celsius float64

// TestKeyOfStringerIsStableByStructure: String methods are not called (they
// could keep a pointer into the caller's stack), but a Stringer still gets a
// stable, distinct key from its structure.
func TestKeyOfStringerIsStableByStructure(t *testing.T) {
	var b1, b2, b3 keyBuf
	a, _ := anyKey(netip.MustParseAddr("10.1.2.3"), &b1)
	a2, _ := anyKey(netip.MustParseAddr("10.1.2.3"), &b2)
	b, ok := anyKey(netip.MustParseAddr("10.1.2.4"), &b3)
	require.True(t, ok)
	assert.Equal(t, a, a2)
	assert.NotEqual(t, a, b)
	assert.NotEqual(t, "10.1.2.3", a)
}

func TestAnyKey(t *testing.T) {
	var nilPtr *point
	tests := []struct {
		name   string
		give   any
		want   string
		wantOK bool
	}{
		{"string", "user-1", "user-1", true},
		{"empty string", "", "", true},
		{"int", 42, "42", true},
		{"negative int8", int8(-5), "-5", true},
		{"min int64", int64(math.MinInt64), "-9223372036854775808", true},
		{"max uint64", uint64(math.MaxUint64), "18446744073709551615", true},
		{"uint8", uint8(7), "7", true},
		{"uintptr", uintptr(9), "9", true},
		{"int32", int32(-1), "-1", true},
		{"uint32", uint32(1), "1", true},
		{"int16", int16(300), "300", true},
		{"uint16", uint16(300), "300", true},
		{"uint", uint(3), "3", true},
		{"bool", true, "true", true},
		{"float", 1.5, "1.5", true},
		{"named float", celsius(-3.25), "-3.25", true},
		{"complex", complex(1, -2), "(1-2i)", true},
		{"bytes", []byte("ab"), "ab", true},
		{"error is rendered by structure, not Error()", errors.New("boom"), "&{boom}", true},
		{"struct", point{1, 2, "x"}, "{1 2 x}", true},
		{"pointer to struct", &point{1, 2, "x"}, "&{1 2 x}", true},
		{"slice", []int{1, 2}, "[1 2]", true},
		{"array", [2]string{"a", "b"}, "[a b]", true},
		{"map sorted", map[string]int{"b": 2, "a": 1}, "map[a:1 b:2]", true},
		{"nil", nil, "", false},
		{"nil pointer", nilPtr, "", false},
		{"channel", make(chan int), "", false},
		{"func", func() {}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf keyBuf
			got, ok := anyKey(tt.give, &buf)
			require.Equal(t, tt.wantOK, ok, "anyKey(%#v) ok", tt.give)
			assert.Equal(t, tt.want, got, "anyKey(%#v)", tt.give)
			if ok {
				switch tt.give.(type) {
				case error, fmt.Stringer, []byte: // methods are not called; bytes as a string
				default:
					assert.Equal(t, fmt.Sprint(tt.give), got, "matches fmt's %%v form")
				}
			}
		})
	}
}

func TestKeyOf(t *testing.T) {
	tests := []struct {
		name   string
		give   entry.Value
		want   string
		wantOK bool
	}{
		{"none", entry.Value{}, "", false},
		{"string", entry.Value{Str: "u", Kind: entry.KindString}, "u", true},
		{"empty string", entry.Value{Kind: entry.KindString}, "", true},
		{"int", entry.Value{Int: math.MinInt64, Kind: entry.KindInt}, "-9223372036854775808", true},
		{"any", entry.Value{Any: uint8(7), Kind: entry.KindAny}, "7", true},
		{"nil any", entry.Value{Kind: entry.KindAny}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf keyBuf
			got, ok := keyOf(&tt.give, &buf)
			require.Equal(t, tt.wantOK, ok)
			require.Equal(t, tt.want, got)
		})
	}
	var buf keyBuf
	_, ok := keyOf(nil, &buf)
	require.False(t, ok, "no value")
}

// TestAnyKeyNoAllocs: a string or an integer boxed by the caller and read
// by anyKey stays on the caller's stack (anyKey keeps nothing reachable
// from it, and escape analysis can tell), and typed values never box.
func TestAnyKeyNoAllocs(t *testing.T) {
	s, n := strconv.Itoa(12345)+"-user", 123456789 // not constants
	var buf keyBuf
	var sink string
	allocs := testing.AllocsPerRun(1000, func() {
		sink, _ = anyKey(s, &buf)
		sink, _ = anyKey(n, &buf)
		sink, _ = anyKey(uint32(n), &buf)
		v := entry.Value{Str: s, Kind: entry.KindString}
		sink, _ = keyOf(&v, &buf)
		v = entry.Value{Int: int64(n), Kind: entry.KindInt}
		sink, _ = keyOf(&v, &buf)
	})
	assert.Equal(t, 0.0, allocs)
	assert.Equal(t, "123456789", sink)
}

func TestFormatDepthBound(t *testing.T) {
	type node struct{ Next *node }
	n := &node{}
	n.Next = n // a cycle
	var buf keyBuf
	_, ok := anyKey(n, &buf)
	assert.False(t, ok, "cycles have no stable form")
}
