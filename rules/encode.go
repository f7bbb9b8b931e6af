package rules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Encode writes s as a document in format f that Decode reads back to an
// equal Set (an empty list or map reads back as nil). Fields are written in
// the order of the rule types' fields, and fields tagged omitempty are left
// out when zero; durations are written as Go duration strings, enums by
// name, map keys sorted. In YAML a string is written plain when the parser
// reads it back as the same string, single-quoted when all its characters
// can be written raw, and double-quoted otherwise, with escapes for every
// character YAML does not take raw (line breaks, control characters,
// U+0085, U+2028, U+2029, U+FEFF); a map key longer than 512
// characters as written is written as an explicit key ("? key"), which has no length limit.
// Encode does not validate s, but refuses values no document can hold (NaN,
// infinities, strings that are not UTF-8, which Validate refuses too).
// Encode is safe for concurrent use.
//
// Encode writes the text itself rather than through yaml.v3's encoder: that
// encoder checks its own output by parsing it again and fails on, or
// changes, strings such as "\n0" and "\n#x".
func Encode(s Set, f Format) ([]byte, error) {
	return encodeAny(s, f)
}

// encodeAny is Encode for a value of any type made of what rule types
// hold.
func encodeAny(v any, f Format) ([]byte, error) {
	if f != JSON && f != YAML {
		return nil, fmt.Errorf("rules: unknown format %v", f)
	}
	doc, err := encodeValue(reflect.ValueOf(v))
	if err != nil {
		return nil, fmt.Errorf("rules: encode: %w", err)
	}
	var b bytes.Buffer
	if f == JSON {
		writeJSON(&b, doc, "")
		b.WriteByte('\n')
		return b.Bytes(), nil
	}
	if doc.kind == eMap && len(doc.keys) > 0 {
		writeYAMLMap(&b, doc, "", "")
	} else {
		writeYAMLValue(&b, doc, "")
		b.Next(1) // the space writeYAMLValue puts after a key's colon
	}
	return b.Bytes(), nil
}

// enode is a value as Encode writes it.
type enode struct {
	kind  ekind
	text  string   // a scalar's text
	keys  []string // a map's keys, in order
	items []*enode // a map's values (by key) or a list's items
}

type ekind uint8

const (
	eString  ekind = iota // a string, quoted as the format needs
	eLiteral              // a number or a boolean, written as is
	eMap
	eList
)

// encodeValue turns v into the tree Encode writes; the error names the map
// keys on the way to a value no document can hold.
func encodeValue(v reflect.Value) (*enode, error) {
	if v.Type() == reflect.TypeFor[time.Duration]() {
		return &enode{kind: eString, text: time.Duration(v.Int()).String()}, nil
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return &enode{kind: eLiteral, text: "null"}, nil
		}
		return encodeValue(v.Elem())
	case reflect.String:
		return encodeString(v.String())
	case reflect.Bool:
		return &enode{kind: eLiteral, text: strconv.FormatBool(v.Bool())}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return &enode{kind: eLiteral, text: strconv.FormatInt(v.Int(), 10)}, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return &enode{kind: eLiteral, text: strconv.FormatUint(v.Uint(), 10)}, nil
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("number %v cannot be written", f)
		}
		return &enode{kind: eLiteral, text: strconv.FormatFloat(f, 'g', -1, v.Type().Bits())}, nil
	case reflect.Slice:
		n := &enode{kind: eList}
		for i := 0; i < v.Len(); i++ {
			item, err := encodeValue(v.Index(i))
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, item)
		}
		return n, nil
	case reflect.Map:
		n := &enode{kind: eMap}
		keys := v.MapKeys()
		texts := make([]string, len(keys))
		for i, k := range keys {
			kn, err := encodeValue(k)
			if err != nil {
				return nil, fmt.Errorf("key: %w", err)
			}
			texts[i] = kn.text
		}
		order := make([]int, len(keys))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(i, j int) int { return strings.Compare(texts[i], texts[j]) })
		for _, i := range order {
			item, err := encodeValue(v.MapIndex(keys[i]))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", clip(texts[i]), err)
			}
			n.keys = append(n.keys, texts[i])
			n.items = append(n.items, item)
		}
		return n, nil
	case reflect.Struct:
		n := &enode{kind: eMap}
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			name, opts, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
			if !sf.IsExported() || name == "-" {
				continue
			}
			if name == "" {
				name = strings.ToLower(sf.Name)
			}
			fv := v.Field(i)
			if opts == "omitempty" && emptyValue(fv) {
				continue
			}
			item, err := encodeValue(fv)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			n.keys = append(n.keys, name)
			n.items = append(n.items, item)
		}
		return n, nil
	}
	return nil, fmt.Errorf("cannot encode Go type %v", v.Type())
}

func encodeString(s string) (*enode, error) {
	if !utf8.ValidString(s) {
		return nil, fmt.Errorf("string %q is not valid UTF-8", clip(s))
	}
	return &enode{kind: eString, text: s}, nil
}

// emptyValue reports whether omitempty leaves v out: zero scalars, nil
// pointers, and empty lists and maps.
func emptyValue(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Slice, reflect.Map:
		return v.Len() == 0
	case reflect.Pointer:
		return v.IsNil()
	}
	return v.IsZero()
}

// writeJSON writes n as indented JSON.
func writeJSON(b *bytes.Buffer, n *enode, indent string) {
	switch n.kind {
	case eLiteral:
		b.WriteString(n.text)
		return
	case eString:
		q, _ := json.Marshal(n.text) // a UTF-8 string always marshals
		b.Write(q)
		return
	}
	open, closing := byte('['), byte(']')
	if n.kind == eMap {
		open, closing = '{', '}'
	}
	b.WriteByte(open)
	inner := indent + "  "
	for i, item := range n.items {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n" + inner)
		if n.kind == eMap {
			q, _ := json.Marshal(n.keys[i])
			b.Write(q)
			b.WriteString(": ")
		}
		writeJSON(b, item, inner)
	}
	if len(n.items) > 0 {
		b.WriteString("\n" + indent)
	}
	b.WriteByte(closing)
}

// maxSimpleKey is the longest map key, in characters as written (quotes
// and escapes included), Encode writes as a plain "key: value" in YAML;
// the parser refuses such a key beyond 1024 characters, so longer ones are
// written "? key".
const maxSimpleKey = 512

// writeYAMLMap writes the non-empty map n in block style, its first line
// starting with first (which holds a list's "- ") and the others with ind.
func writeYAMLMap(b *bytes.Buffer, n *enode, first, ind string) {
	for i, k := range n.keys {
		p := ind
		if i == 0 {
			p = first
		}
		b.WriteString(p)
		// The limit is on the key as written: escapes make it longer
		// than the string (DEL is six characters, \u007F).
		var kb bytes.Buffer
		writeYAMLString(&kb, k)
		if utf8.RuneCount(kb.Bytes()) > maxSimpleKey {
			b.WriteString("? ")
			b.Write(kb.Bytes())
			b.WriteString("\n" + ind)
		} else {
			b.Write(kb.Bytes())
		}
		b.WriteByte(':')
		writeYAMLValue(b, n.items[i], ind)
	}
}

// writeYAMLValue writes n after a key's colon or a list's dash, with its
// own lines, if it needs any, indented under ind.
func writeYAMLValue(b *bytes.Buffer, n *enode, ind string) {
	switch {
	case n.kind == eLiteral:
		b.WriteString(" " + n.text + "\n")
	case n.kind == eString:
		b.WriteByte(' ')
		writeYAMLString(b, n.text)
		b.WriteByte('\n')
	case n.kind == eMap && len(n.items) == 0:
		b.WriteString(" {}\n")
	case n.kind == eList && len(n.items) == 0:
		b.WriteString(" []\n")
	case n.kind == eMap:
		b.WriteByte('\n')
		writeYAMLMap(b, n, ind+"  ", ind+"  ")
	default:
		b.WriteByte('\n')
		for _, item := range n.items {
			if item.kind == eMap && len(item.items) > 0 {
				writeYAMLMap(b, item, ind+"  - ", ind+"    ")
				continue
			}
			b.WriteString(ind + "  -")
			writeYAMLValue(b, item, ind+"  ")
		}
	}
}

// writeYAMLString writes s plain when YAML reads it back as the same
// string; otherwise single-quoted when it holds only characters written
// raw (and no leading or trailing space, which a folded line could lose),
// and double-quoted with escapes when it does not.
func writeYAMLString(b *bytes.Buffer, s string) {
	if plainYAML(s) {
		b.WriteString(s)
		return
	}
	if strings.IndexFunc(s, func(r rune) bool { return !rawYAML(r) }) < 0 && len(s) > 0 && s[0] != ' ' && s[len(s)-1] != ' ' {
		// Single quotes, as yaml.v3 writes such strings: no escapes, a
		// quote doubled.
		b.WriteByte('\'')
		b.WriteString(strings.ReplaceAll(s, "'", "''"))
		b.WriteByte('\'')
		return
	}
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case rawYAML(r):
			b.WriteRune(r)
		default: // C0 and C1 controls, DEL, line and paragraph separators, BOM, U+FFFE, U+FFFF
			fmt.Fprintf(b, `\u%04X`, r)
		}
	}
	b.WriteByte('"')
}

// rawYAML reports whether r is written as itself in a quoted YAML string:
// printable, and not a line break to YAML (U+0085, U+2028, U+2029) or a
// byte order mark.
func rawYAML(r rune) bool {
	return r >= 0x20 && r < 0x7f ||
		r >= 0xa0 && r <= 0xd7ff && r != 0x2028 && r != 0x2029 ||
		r >= 0xe000 && r <= 0xfffd && r != 0xfeff ||
		r >= 0x10000 && r <= utf8.MaxRune
}

// plainYAML reports whether s can be written as a plain YAML scalar and read
// back as the same string: a conservative alphabet, no leading or trailing
// space, and not a word or number YAML reads as something else.
func plainYAML(s string) bool {
	if s == "" || len(s) > 256 || s[0] == ' ' || s[len(s)-1] == ' ' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '_', c == '.', c == '/', c == '-' && i > 0, c == ' ':
		case (c == '{' || c == '}') && i > 0:
		default:
			return false
		}
	}
	if c := s[0] | 0x20; c >= 'a' && c <= 'z' {
		switch strings.ToLower(s) {
		case "true", "false", "yes", "no", "on", "off", "y", "n", "null":
			return false
		}
		return true
	}
	// A digit or another first character: ask the parser.
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(s), &n); err != nil || len(n.Content) != 1 {
		return false
	}
	v := n.Content[0]
	return v.Kind == yaml.ScalarNode && v.Style == 0 && tagOf(v) == "!!str" && v.Value == s
}
