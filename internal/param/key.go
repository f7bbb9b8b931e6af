package param

import (
	"math"
	"reflect"
	"sort"
	"strconv"
	"unsafe"

	"github.com/sluice-go/sluice/internal/entry"
)

// keyBuf is the stack buffer an integer key is formatted into (the longest
// integer, -9223372036854775808, has 20 characters).
type keyBuf [24]byte

// keyOf returns the string form of an argument value, which identifies the
// value in the rule's cache and in its exceptions, and false when v is nil
// (no value), holds nil, or holds a value of a type with no stable form
// (see formatValue).
//
// Strings are returned as they are and integers are formatted into buf,
// without allocating; the result may point into v or buf, so it is valid
// only while they are and must be copied before it is kept.
func keyOf(v *entry.Value, buf *keyBuf) (string, bool) {
	if v == nil {
		return "", false
	}
	switch v.Kind {
	case entry.KindString:
		return v.Str, true
	case entry.KindInt:
		return itoa(buf, v.Int), true
	case entry.KindAny:
		return anyKey(v.Any, buf)
	}
	return "", false
}

// anyKey is keyOf for a value of any type.
//
// It keeps nothing reachable from v, and the compiler can tell: nothing
// here stores v, calls a method of it, or hands it to code escape analysis
// cannot follow, so a caller's boxed argument may stay on the caller's
// stack. That is why String and Error methods are not called (a dynamic
// call would make every boxed argument of every entry escape to the heap),
// why formatValue walks the value with reflect rather than fmt (which
// stores its operand in a heap buffer), and why it reads maps with MapKeys
// and MapIndex rather than MapRange (whose iterator leaks the map).
// TestAnyKeyNoAllocs guards this.
//
// complexity: a case per common key type turned into a string without allocating; reflect only for the rest
func anyKey(v any, buf *keyBuf) (string, bool) {
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
	case []byte:
		return string(x), true
	case bool:
		return strconv.FormatBool(x), true
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer && rv.IsNil() {
		return "", false // a nil pointer has no value to count
	}
	b, ok := formatValue(nil, rv, 0)
	if !ok {
		return "", false
	}
	return string(b), true
}

// itoa formats v into buf and returns a string that shares buf's memory.
func itoa(buf *keyBuf, v int64) string {
	b := strconv.AppendInt(buf[:0], v, 10)
	return unsafe.String(&b[0], len(b))
}

// utoa formats v into buf and returns a string that shares buf's memory.
func utoa(buf *keyBuf, v uint64) string {
	b := strconv.AppendUint(buf[:0], v, 10)
	return unsafe.String(&b[0], len(b))
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
// It keeps nothing reachable from v (see anyKey).
//
// complexity: a case per reflect.Kind a key may be, formatted without allocating (see anyKey)
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
		keys := v.MapKeys()
		pairs := make([]kv, 0, len(keys))
		for _, mk := range keys {
			k, ok := formatValue(nil, mk, depth+1)
			if !ok {
				return b, false
			}
			e, ok := formatValue(nil, v.MapIndex(mk), depth+1)
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
