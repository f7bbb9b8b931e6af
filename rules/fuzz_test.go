package rules

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"github.com/sluice-go/sluice/internal/rulewalk"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FuzzDecode feeds arbitrary documents to Decode in both formats. Decode must
// never panic; a document it accepts must validate, and encoding the result
// and decoding that again must give the same Set (the JSON encoding being
// valid JSON). Tight limits must give the same answer or a limit error. The
// seed corpus is testdata/seed/* (JSON and YAML rule files, good and bad)
// plus testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join("testdata", "seed", "*"))
	require.NoError(f, err)
	require.NotEmpty(f, seeds)
	for _, p := range seeds {
		data, err := os.ReadFile(p)
		require.NoError(f, err)
		format, err := FormatOf(p)
		require.NoError(f, err)
		f.Add(data, format == YAML)
	}
	f.Fuzz(func(t *testing.T, data []byte, yamlFormat bool) {
		format := JSON
		if yamlFormat {
			format = YAML
		}
		s, err := Decode(data, format)
		tight, terr := DecodeLimits{MaxBytes: 1 << 10, MaxValues: 64}.Decode(data, format)
		if terr == nil || !strings.Contains(terr.Error(), "raise DecodeLimits.") {
			require.Equal(t, fmt.Sprint(err), fmt.Sprint(terr), "tight limits changed the answer")
			require.Equal(t, s, tight)
		}
		if err != nil {
			assert.Equal(t, Set{}, s)
			return
		}
		require.NoError(t, s.Validate(), "Decode accepted an invalid set")
		for _, out := range []Format{JSON, YAML} {
			enc, err := Encode(s, out)
			require.NoError(t, err, "Encode(%v) of a decoded set", out)
			if out == JSON {
				require.True(t, json.Valid(enc), "Encode(JSON) wrote invalid JSON:\n%s", enc)
			}
			again, err := Decode(enc, out)
			require.NoError(t, err, "Decode of the %v encoding:\n%s", out, enc)
			require.Equal(t, s, again, "round trip through %v:\n%s", out, enc)
		}
	})
}

// FuzzRoundTrip writes sets whose names, IDs, attachment keys and exception
// values are arbitrary strings, with Encode in both formats, and reads them
// back: every set Validate accepts must encode without error and decode to
// an equal set; a set it refuses must have been refused for a reason.
// Seeds: the strings yaml.v3's own encoder wrote wrong or failed on.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{"\n#x", "\n0", "\t\n#", "a\tb", " x", "x ", "\u2028", "\ufeffa", "- a", "#",
		"true", "007", "1e3", "1.5s", "~", "<<", "a: b", "\"'", "\x7f\u0085", strings.Repeat("k", 1100), "\xff"} {
		f.Add(s, "id", "user", s, 5.0, int64(3))
	}
	// Shadow mode (n odd) and tiers (Above threshold, Below half of it).
	f.Add("api", "tiered", "user", "", 150.0, int64(7))
	f.Add("api", "", "", "", 0.5, int64(1))
	f.Fuzz(func(t *testing.T, name, id, key, value string, threshold float64, n int64) {
		s := Set{
			Flow:           []Flow{{ID: id, Resource: name, Threshold: threshold, RefResource: value}},
			CircuitBreaker: []CircuitBreaker{{ID: id, Resource: name, Threshold: threshold, RetryTimeout: time.Duration(n)}},
			Param:          []Param{{ID: id, Resource: name, Key: key, Threshold: n, Exceptions: map[string]int64{value: n, key: 0}}},
		}
		roundTrip(t, s)
		// Each kind on its own, so that one refused rule does not hide the
		// others.
		roundTrip(t, Set{Flow: s.Flow})
		roundTrip(t, Set{CircuitBreaker: s.CircuitBreaker})
		roundTrip(t, Set{Param: s.Param})
		sh := n%2 != 0
		roundTrip(t, Set{
			Flow:           []Flow{{ID: id, Resource: name, Shadow: sh, Tiers: []Tier{{Above: threshold, Below: threshold / 2, Threshold: float64(n)}}}},
			System:         []System{{ID: id, Metric: CPUUsage, Threshold: threshold, Shadow: sh}},
			CircuitBreaker: []CircuitBreaker{{ID: id, Resource: name, Threshold: threshold, RetryTimeout: time.Duration(n), Shadow: sh}},
			Param:          []Param{{ID: id, Resource: name, Key: key, Threshold: n, Shadow: sh}},
		})
	})
}

// FuzzValidate makes rules of every kind whose fields are valid values or
// values filled from the fuzzer's bytes (fuzzSet): Validate must never
// panic, and a set it accepts must round-trip through both formats.
func FuzzValidate(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x01\x00\x00\x00\x00\x00\x00\x14@resource\x00\x01\x01\x01"))
	f.Add(bytes.Repeat([]byte{1}, 200))
	f.Add(bytes.Repeat([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0xf0, 0x3f}, 40))
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, fuzzSet(&fuzzBytes{b: data}))
	})
}

// fuzzSet makes a set of up to two rules of each kind from f. Each rule
// starts valid and a byte per field decides whether the field keeps its
// valid value or is filled from f (an eighth of the time), so that many sets
// pass Validate and the rest fail it in one or two fields.
func fuzzSet(f *fuzzBytes) Set {
	var s Set
	templates := []any{
		Flow{Threshold: 10},
		System{Metric: InboundQPS, Threshold: 100},
		CircuitBreaker{Strategy: ErrorCount, Threshold: 1, RetryTimeout: time.Second},
		Param{Threshold: 3},
	}
	sv := reflect.ValueOf(&s).Elem()
	for k, tmpl := range templates {
		n := int(f.byte() % 3)
		if n == 0 {
			continue
		}
		list := reflect.MakeSlice(sv.Field(k).Type(), n, n)
		for i := range n {
			r := list.Index(i)
			r.Set(reflect.ValueOf(tmpl))
			if res := r.FieldByName("Resource"); res.IsValid() {
				res.SetString(fmt.Sprint("r", i))
			}
			if k == 1 && i == 1 { // a second system rule on another metric
				r.FieldByName("Metric").Set(reflect.ValueOf(InboundConcurrency))
			}
			for j := 0; j < r.NumField(); j++ {
				if r.Type().Field(j).IsExported() && f.byte()%8 == 0 {
					fill(f, r.Field(j), 1)
				}
			}
		}
		sv.Field(k).Set(list)
	}
	return s
}

// roundTrip checks that s, if Validate accepts it, encodes in both formats
// and decodes to an equal set (empty lists and maps reading back as nil).
func roundTrip(t *testing.T, s Set) {
	t.Helper()
	if s.Validate() != nil {
		return
	}
	want := normalized(s)
	for _, f := range []Format{JSON, YAML} {
		enc, err := Encode(s, f)
		require.NoError(t, err, "Encode(%v) of a valid set %#v", f, s)
		if f == JSON {
			require.True(t, json.Valid(enc), "Encode(JSON) wrote invalid JSON:\n%s", enc)
		}
		got, err := DecodeLimits{MaxBytes: 1 << 30, MaxValues: 1 << 30, MaxNameBytes: 1 << 30}.Decode(enc, f)
		require.NoError(t, err, "Decode of the %v encoding:\n%s", f, enc)
		require.Equal(t, want, got, "round trip through %v:\n%s", f, enc)
	}
}

// normalized is s as a document gives it back: empty lists and maps nil.
func normalized(s Set) Set {
	var norm func(v reflect.Value)
	norm = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Slice, reflect.Map:
			if v.Len() == 0 {
				v.SetZero()
				return
			}
			if v.Kind() == reflect.Slice {
				for i := 0; i < v.Len(); i++ {
					norm(v.Index(i))
				}
			}
		case reflect.Pointer:
			if !v.IsNil() {
				norm(v.Elem())
			}
		case reflect.Struct:
			for i := 0; i < v.NumField(); i++ {
				if v.Type().Field(i).IsExported() {
					norm(v.Field(i))
				}
			}
		}
	}
	c := Set{}
	for i, rs := range []any{s.Flow, s.System, s.CircuitBreaker, s.Param} {
		v := reflect.ValueOf(rs)
		cp := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		reflect.Copy(cp, v)
		reflect.ValueOf(&c).Elem().Field(i).Set(cp)
	}
	c.Param = cloneParams(c.Param)
	norm(reflect.ValueOf(&c).Elem())
	return c
}

func cloneParams(rs []Param) []Param {
	for i := range rs {
		rs[i] = rulewalk.Clone(rs[i])
	}
	return rs
}

// fuzzBytes hands out the fuzzer's bytes as values; past the end, zeros.
type fuzzBytes struct{ b []byte }

func (f *fuzzBytes) next(n int) []byte {
	out := make([]byte, n)
	k := copy(out, f.b)
	f.b = f.b[k:]
	return out
}

func (f *fuzzBytes) u64() uint64 { return binary.LittleEndian.Uint64(f.next(8)) }
func (f *fuzzBytes) byte() byte  { return f.next(1)[0] }

// str is a length byte then that many bytes.
func (f *fuzzBytes) str() string { return string(f.next(int(f.byte() % 48))) }

// fill sets v from f: small counts of list items and map entries, numbers
// often near the limits Validate checks (a byte picks a plain small value,
// a value from the bits, or a boundary).
func fill(f *fuzzBytes, v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(f.str())
	case reflect.Bool:
		v.SetBool(f.byte()&1 == 1)
	case reflect.Uint8: // enums: mostly valid
		v.SetUint(uint64(f.byte() % 6))
	case reflect.Int, reflect.Int64:
		switch k := f.byte(); k % 4 {
		case 0:
			v.SetInt(int64(k / 4))
		case 1:
			v.SetInt(int64(f.u64()))
		case 2: // a duration in whole milliseconds
			v.SetInt(int64(f.byte()) * int64(time.Millisecond) * 10)
		default:
			v.SetInt(int64(f.u64() % 2000))
		}
	case reflect.Float64:
		switch k := f.byte(); k % 3 {
		case 0:
			v.SetFloat(float64(k / 3))
		case 1:
			v.SetFloat(math.Float64frombits(f.u64()))
		default:
			v.SetFloat(float64(f.u64()%20000) / 100)
		}
	case reflect.Pointer:
		if f.byte()%4 == 0 && depth < 3 {
			p := reflect.New(v.Type().Elem())
			fill(f, p.Elem(), depth+1)
			v.Set(p)
		}
	case reflect.Slice:
		n := int(f.byte() % 4)
		if depth == 0 {
			n = int(f.byte() % 3)
		}
		if n == 0 {
			return
		}
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			fill(f, s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Map:
		n := int(f.byte() % 4)
		if n == 0 {
			return
		}
		m := reflect.MakeMapWithSize(v.Type(), n)
		for range n {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(f, k, depth+1)
			fill(f, e, depth+1)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(f, v.Field(i), depth+1)
			}
		}
	}
}
