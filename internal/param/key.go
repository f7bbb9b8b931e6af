package param

import (
	"math"
	"reflect"
	"sort"
	"strconv"
	"unsafe"
)

// keyBuf is the stack buffer an integer key is formatted into (the longest
// integer, -9223372036854775808, has 20 characters).
type keyBuf [24]byte

// keyOf returns the string form of an argument value, which identifies the
// value in the rule's cache and in its exceptions, and false when v is nil or
// of a type with no stable form (see formatValue).
//
// Strings are returned as they are and integers are formatted into buf: both
// without allocating, and the result may point into v or buf, so it is valid
// only while they are and must be cloned before it is kept.
//
// v must not escape from here: the engine builds arguments on its stack, and
// a single path that kept v would move every argument of every entry to the
// heap. Types other than strings and integers are therefore formatted through
// an unsafe copy of the interface that escape analysis cannot follow
// (noescape). That is sound only because nothing reached through it outlives
// the call: formatValue reads the value and copies what it reads, and no
// user code runs on it. (Calling a String or Error method would let that
// method keep a pointer into the caller's stack, so keys of such types are
// rendered by their structure, not by their methods.)
func keyOf(v any, buf *keyBuf) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", false
	case string:
		return x, true
	case int:
		return itoa(buf, int64(x)), true
	case int64:
		return itoa(buf, x), true
	case int32:
		return itoa(buf, int64(x)), true
	case int16:
		return itoa(buf, int64(x)), true
	case int8:
		return itoa(buf, int64(x)), true
	case uint:
		return utoa(buf, uint64(x)), true
	case uint64:
		return utoa(buf, x), true
	case uint32:
		return utoa(buf, uint64(x)), true
	case uint16:
		return utoa(buf, uint64(x)), true
	case uint8:
		return utoa(buf, uint64(x)), true
	case uintptr:
		return utoa(buf, uint64(x)), true
	}
	return slowKey(noescape(v))
}

func itoa(buf *keyBuf, v int64) string {
	b := strconv.AppendInt(buf[:0], v, 10)
	return unsafe.String(&b[0], len(b))
}

func utoa(buf *keyBuf, v uint64) string {
	b := strconv.AppendUint(buf[:0], v, 10)
	return unsafe.String(&b[0], len(b))
}

// noescape returns v unchanged while hiding it from escape analysis (as the
// runtime's noescape does): the interface words travel through a non-pointer
// array. It is sound only because nothing reached through the result is kept
// past the call that uses it.
func noescape(v any) any {
	w := *(*[2]uintptr)(unsafe.Pointer(&v))
	return *(*any)(unsafe.Pointer(&w))
}

// slowKey gives the string form of a value that is neither a string nor an
// integer: formatValue's rendering of its structure (methods such as String
// are deliberately not called, see keyOf). It allocates.
func slowKey(v any) (string, bool) {
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
		return "", false // a nil pointer has no value to count (and its String may panic)
	}
	switch x := v.(type) {
	case []byte:
		return string(x), true
	case bool:
		return strconv.FormatBool(x), true
	}
	b, ok := formatValue(nil, reflect.ValueOf(v), 0)
	if !ok {
		return "", false
	}
	return string(b), true
}

// maxFormatDepth bounds the nesting formatValue follows (and so cycles).
const maxFormatDepth = 8

// formatValue appends a %v-like rendering of v: numbers and booleans as fmt
// prints them, strings as they are, structs as {a b}, arrays and slices as
// [a b], maps as map[k:v] with keys in sorted order, pointers as & followed
// by what they point to. It reports false for values with no stable form:
// channels, functions, unsafe pointers, nil pointers, and nesting deeper than
// maxFormatDepth.
//
// It keeps v only in reflect.Values on its own stack, so values the caller
// keeps on its stack stay valid however the stack moves; that is why it is
// used rather than fmt, which stores its argument in a heap buffer.
func formatValue(b []byte, v reflect.Value, depth int) ([]byte, bool) {
	if depth > maxFormatDepth {
		return b, false
	}
	switch v.Kind() {
	case reflect.Bool:
		return strconv.AppendBool(b, v.Bool()), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.AppendInt(b, v.Int(), 10), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.AppendUint(b, v.Uint(), 10), true
	case reflect.Float32:
		return strconv.AppendFloat(b, v.Float(), 'g', -1, 32), true
	case reflect.Float64:
		return strconv.AppendFloat(b, v.Float(), 'g', -1, 64), true
	case reflect.Complex64, reflect.Complex128:
		bits := 64
		if v.Kind() == reflect.Complex64 {
			bits = 32
		}
		c := v.Complex()
		b = strconv.AppendFloat(append(b, '('), real(c), 'g', -1, bits)
		if imag(c) >= 0 || math.IsNaN(imag(c)) {
			b = append(b, '+')
		}
		return append(strconv.AppendFloat(b, imag(c), 'g', -1, bits), "i)"...), true
	case reflect.String:
		return append(b, v.String()...), true
	case reflect.Pointer:
		if v.IsNil() {
			return b, false
		}
		return formatValue(append(b, '&'), v.Elem(), depth+1)
	case reflect.Interface:
		if v.IsNil() {
			return append(b, "<nil>"...), true
		}
		return formatValue(b, v.Elem(), depth+1)
	case reflect.Struct:
		b = append(b, '{')
		for i := 0; i < v.NumField(); i++ {
			if i > 0 {
				b = append(b, ' ')
			}
			var ok bool
			if b, ok = formatValue(b, v.Field(i), depth+1); !ok {
				return b, false
			}
		}
		return append(b, '}'), true
	case reflect.Array, reflect.Slice:
		b = append(b, '[')
		for i := 0; i < v.Len(); i++ {
			if i > 0 {
				b = append(b, ' ')
			}
			var ok bool
			if b, ok = formatValue(b, v.Index(i), depth+1); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	case reflect.Map:
		type kv struct{ k, v []byte }
		pairs := make([]kv, 0, v.Len())
		it := v.MapRange()
		for it.Next() {
			k, ok := formatValue(nil, it.Key(), depth+1)
			if !ok {
				return b, false
			}
			e, ok := formatValue(nil, it.Value(), depth+1)
			if !ok {
				return b, false
			}
			pairs = append(pairs, kv{k, e})
		}
		sort.Slice(pairs, func(i, j int) bool { return string(pairs[i].k) < string(pairs[j].k) })
		b = append(b, "map["...)
		for i, p := range pairs {
			if i > 0 {
				b = append(b, ' ')
			}
			b = append(append(append(b, p.k...), ':'), p.v...)
		}
		return append(b, ']'), true
	}
	return b, false
}
