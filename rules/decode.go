package rules

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Format is the text format of a rule document.
type Format uint8

const (
	// JSON is RFC 8259 JSON.
	JSON Format = iota + 1
	// YAML is YAML 1.2 (as read by go.yaml.in/yaml/v3), one document.
	YAML
)

func (f Format) String() string {
	switch f {
	case JSON:
		return "json"
	case YAML:
		return "yaml"
	}
	return "Format(" + strconv.Itoa(int(f)) + ")"
}

// FormatOf returns the format a file name's extension names: JSON for
// ".json", YAML for ".yaml" and ".yml" (in any case).
func FormatOf(path string) (Format, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		return JSON, nil
	case ".yaml", ".yml":
		return YAML, nil
	}
	return 0, fmt.Errorf("rules: cannot tell the format of %q: want a .json, .yaml or .yml file", path)
}

// MaxFileSize is the largest rule file DecodeFile and FileSource read, in
// bytes; larger files are refused.
const MaxFileSize = 16 << 20

// Limits on a document's shape, so hostile input (deep nesting, YAML alias
// expansion) costs bounded time and memory.
const (
	maxDepth = 64
	maxNodes = 1 << 18
)

// DecodeFile reads the file at path and decodes it with Decode, in the
// format its extension names (see FormatOf). Errors about the content are
// prefixed with the path.
func DecodeFile(path string) (Set, error) {
	f, err := FormatOf(path)
	if err != nil {
		return Set{}, err
	}
	data, err := readFile(path)
	if err != nil {
		return Set{}, err
	}
	s, err := Decode(data, f)
	if err != nil {
		return Set{}, &PathError{Path: path, Err: err}
	}
	return s, nil
}

// PathError is an error about the content of a rule file: Err (often an
// *Error, reached with errors.As) says what is wrong with the file at Path.
type PathError struct {
	Path string
	Err  error
}

func (e *PathError) Error() string { return e.Path + ": " + e.Err.Error() }

// Unwrap returns Err.
func (e *PathError) Unwrap() error { return e.Err }

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("rules: %s: file is larger than %d bytes", path, MaxFileSize)
	}
	return data, nil
}

// Decode parses a rule document and validates every rule in it.
//
// The document is a map from rule kind (flow, isolation, system,
// circuitBreaker, param) to a list of rules; each rule is a map from field
// names (the json tags of the rule types, camelCase) to values. Decoding is
// strict, so that a typo never passes silently:
//
//   - An unknown kind or field is an error that names it (and suggests the
//     likely intended name), as is a key given twice.
//   - A value of the wrong type is an error naming the field; strings must
//     be strings (quote a resource named 123), numbers numbers.
//   - Durations are Go duration strings ("500ms", "1m30s"). A bare number
//     is refused, because its unit would be a guess (Sentinel's files use
//     milliseconds, Go's time.Duration counts nanoseconds); only 0 is
//     accepted without a unit.
//   - Enumerations (metric, strategy, behavior, ...) are their names, such
//     as "qps" or "warm-up".
//   - Integers must be whole and in range; NaN and infinities are refused.
//   - null is the same as leaving the field out, and an empty list or map
//     decodes as nil.
//   - An empty document (or one that is only null) is refused, because a
//     file read halfway through being written is often empty; write {} for
//     a document with no rules.
//
// Errors in a rule are *Error values (reach them with errors.As) with Kind,
// Index and Field set; decoding errors also give the line. After decoding,
// the set is validated with Set.Validate and the first problem returned. On
// error the returned Set is empty.
func Decode(data []byte, format Format) (Set, error) {
	var (
		root *node
		err  error
	)
	switch format {
	case JSON:
		root, err = parseJSON(data)
	case YAML:
		root, err = parseYAML(data)
	default:
		return Set{}, fmt.Errorf("rules: unknown format %v", format)
	}
	if err != nil {
		return Set{}, err
	}
	var s Set
	if err := decodeSet(root, &s); err != nil {
		return Set{}, err
	}
	if err := s.Validate(); err != nil {
		return Set{}, err
	}
	return s, nil
}

// Encode writes s as a document in format f that Decode reads back to an
// equal Set. Fields are written in the order of the rule types' fields, and
// fields tagged omitempty are left out when zero. It does not validate s,
// but refuses values no document can hold (NaN, infinities, strings that
// are not UTF-8).
func Encode(s Set, f Format) ([]byte, error) {
	root, err := encodeValue(reflect.ValueOf(s))
	if err != nil {
		return nil, fmt.Errorf("rules: encode: %w", err)
	}
	switch f {
	case JSON:
		var b bytes.Buffer
		writeJSON(&b, root, "")
		b.WriteByte('\n')
		return b.Bytes(), nil
	case YAML:
		var b bytes.Buffer
		enc := yaml.NewEncoder(&b)
		enc.SetIndent(2)
		if err := enc.Encode(toYAML(root)); err != nil {
			return nil, fmt.Errorf("rules: encode yaml: %w", err)
		}
		if err := enc.Close(); err != nil {
			return nil, fmt.Errorf("rules: encode yaml: %w", err)
		}
		return b.Bytes(), nil
	}
	return nil, fmt.Errorf("rules: unknown format %v", f)
}

// node is a parsed document value, the same for JSON and YAML, so one
// reflection-driven decoder serves both formats.
type node struct {
	kind  nodeKind
	text  string  // scalars: the string, the number literal, "true"/"false"
	keys  []*node // maps: the keys (scalars), in document order
	items []*node // lists: the items; maps: the values
	line  int     // 1-based line where the value starts (0 if unknown)
}

type nodeKind uint8

const (
	nullNode nodeKind = iota
	boolNode
	numberNode
	stringNode
	listNode
	mapNode
)

func (n *node) scalar() bool { return n.kind != listNode && n.kind != mapNode }

// describe names a value for an error message: `string "abc"`, `number 5`.
func (n *node) describe() string {
	switch n.kind {
	case nullNode:
		return "null"
	case boolNode:
		return "boolean " + n.text
	case numberNode:
		return "number " + clip(n.text)
	case stringNode:
		return "string " + strconv.Quote(clip(n.text))
	case listNode:
		return "a list"
	}
	return "a map"
}

func clip(s string) string {
	if len(s) <= 40 {
		return s
	}
	i := 37
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

func at(line int) string {
	if line <= 0 {
		return ""
	}
	return " at line " + strconv.Itoa(line)
}

// budget bounds the nodes a parse may create.
type budget struct{ nodes int }

func (b *budget) add(line int) error {
	b.nodes++
	if b.nodes > maxNodes {
		return fmt.Errorf("rules: document has more than %d values%s (alias expansion?)", maxNodes, at(line))
	}
	return nil
}

// parseJSON reads one JSON value with the token stream, which keeps keys in
// order and lets duplicates be found.
func parseJSON(data []byte) (*node, error) {
	p := jsonParser{data: data, dec: json.NewDecoder(bytes.NewReader(data))}
	p.dec.UseNumber()
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("rules: empty document; write {} for a document with no rules")
	}
	root, err := p.value(0)
	if err != nil {
		return nil, err
	}
	if _, err := p.dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("rules: json: unexpected data after the document%s", at(p.line(p.dec.InputOffset())))
	}
	return root, nil
}

type jsonParser struct {
	data []byte
	dec  *json.Decoder
	nl   []int // offsets of newlines, computed on first use
	b    budget
}

func (p *jsonParser) line(off int64) int {
	if p.nl == nil {
		p.nl = []int{}
		for i, c := range p.data {
			if c == '\n' {
				p.nl = append(p.nl, i)
			}
		}
	}
	return sort.SearchInts(p.nl, int(off)) + 1
}

func (p *jsonParser) token() (json.Token, int, error) {
	// The offset before the token may point at the whitespace before it;
	// skip that so the line is the token's own.
	off := p.dec.InputOffset()
	for off < int64(len(p.data)) && strings.IndexByte(" \t\r\n,:", p.data[off]) >= 0 {
		off++
	}
	tok, err := p.dec.Token()
	if err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, 0, fmt.Errorf("rules: json: %v%s", se, at(p.line(se.Offset-1)))
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, 0, errors.New("rules: json: unexpected end of document")
		}
		return nil, 0, fmt.Errorf("rules: json: %w", err)
	}
	return tok, p.line(off), nil
}

func (p *jsonParser) value(depth int) (*node, error) {
	tok, line, err := p.token()
	if err != nil {
		return nil, err
	}
	return p.build(tok, line, depth)
}

func (p *jsonParser) build(tok json.Token, line, depth int) (*node, error) {
	if err := p.b.add(line); err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case nil:
		return &node{kind: nullNode, line: line}, nil
	case bool:
		return &node{kind: boolNode, text: strconv.FormatBool(t), line: line}, nil
	case json.Number:
		return &node{kind: numberNode, text: string(t), line: line}, nil
	case string:
		return &node{kind: stringNode, text: t, line: line}, nil
	case json.Delim:
		if depth >= maxDepth {
			return nil, fmt.Errorf("rules: json: nesting deeper than %d%s", maxDepth, at(line))
		}
		n := &node{kind: listNode, line: line}
		if t == '{' {
			n.kind = mapNode
		}
		seen := map[string]int{}
		for p.dec.More() {
			if n.kind == mapNode {
				ktok, kline, err := p.token()
				if err != nil {
					return nil, err
				}
				k, _ := ktok.(string) // the decoder only yields string keys
				if first, dup := seen[k]; dup {
					return nil, fmt.Errorf("rules: json: key %q%s is given twice (first at line %d)", clip(k), at(kline), first)
				}
				seen[k] = kline
				n.keys = append(n.keys, &node{kind: stringNode, text: k, line: kline})
			}
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, v)
		}
		if _, _, err := p.token(); err != nil { // the closing delimiter
			return nil, err
		}
		return n, nil
	}
	return nil, fmt.Errorf("rules: json: unexpected token %v%s", tok, at(line))
}

// parseYAML reads one YAML document into nodes, resolving aliases and merge
// keys.
func parseYAML(data []byte) (*node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF {
			return nil, errors.New("rules: empty document; write {} for a document with no rules")
		}
		return nil, fmt.Errorf("rules: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		if err != nil {
			return nil, fmt.Errorf("rules: %w", err)
		}
		return nil, fmt.Errorf("rules: yaml: want one document, found another%s", at(extra.Line))
	}
	var b budget
	return fromYAML(&doc, &b, 0)
}

func fromYAML(y *yaml.Node, b *budget, depth int) (*node, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("rules: yaml: nesting deeper than %d%s", maxDepth, at(y.Line))
	}
	if err := b.add(y.Line); err != nil {
		return nil, err
	}
	n := &node{line: y.Line}
	switch y.Kind {
	case yaml.DocumentNode:
		if len(y.Content) == 0 {
			return n, nil
		}
		return fromYAML(y.Content[0], b, depth)
	case yaml.AliasNode:
		if y.Alias == nil {
			return nil, fmt.Errorf("rules: yaml: unknown alias%s", at(y.Line))
		}
		return fromYAML(y.Alias, b, depth+1)
	case yaml.ScalarNode:
		return n, scalarFromYAML(y, n)
	case yaml.SequenceNode:
		n.kind = listNode
		for _, c := range y.Content {
			v, err := fromYAML(c, b, depth+1)
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, v)
		}
		return n, nil
	case yaml.MappingNode:
		n.kind = mapNode
		return n, mapFromYAML(y, n, b, depth)
	}
	return nil, fmt.Errorf("rules: yaml: unexpected node%s", at(y.Line))
}

func scalarFromYAML(y *yaml.Node, n *node) error {
	switch tag := y.ShortTag(); tag {
	case "!!null":
		n.kind = nullNode
	case "!!bool":
		var v bool
		if err := y.Decode(&v); err != nil {
			return fmt.Errorf("rules: %w", err)
		}
		n.kind, n.text = boolNode, strconv.FormatBool(v)
	case "!!int":
		n.kind = numberNode
		var i int64
		var u uint64
		if y.Decode(&i) == nil {
			n.text = strconv.FormatInt(i, 10)
		} else if y.Decode(&u) == nil {
			n.text = strconv.FormatUint(u, 10)
		} else {
			return fmt.Errorf("rules: yaml: integer %s%s is out of range", clip(y.Value), at(y.Line))
		}
	case "!!float":
		var f float64
		if err := y.Decode(&f); err != nil {
			return fmt.Errorf("rules: %w", err)
		}
		n.kind, n.text = numberNode, strconv.FormatFloat(f, 'g', -1, 64)
	case "!!str", "!!timestamp":
		n.kind, n.text = stringNode, y.Value
	default:
		return fmt.Errorf("rules: yaml: unsupported tag %s%s", clip(tag), at(y.Line))
	}
	return nil
}

func mapFromYAML(y *yaml.Node, n *node, b *budget, depth int) error {
	seen := map[string]int{}
	var merges []*yaml.Node
	for i := 0; i+1 < len(y.Content); i += 2 {
		ky, vy := y.Content[i], y.Content[i+1]
		if ky.Kind == yaml.ScalarNode && ky.ShortTag() == "!!merge" {
			merges = append(merges, vy)
			continue
		}
		k, err := fromYAML(ky, b, depth+1)
		if err != nil {
			return err
		}
		if !k.scalar() || k.kind == nullNode {
			return fmt.Errorf("rules: yaml: a map key must be a string or number%s", at(ky.Line))
		}
		if ky.Kind == yaml.ScalarNode {
			k.text = ky.Value // keys keep their text as written: 007 stays "007"
		}
		if first, dup := seen[k.text]; dup {
			return fmt.Errorf("rules: yaml: key %q%s is given twice (first at line %d)", clip(k.text), at(ky.Line), first)
		}
		seen[k.text] = ky.Line
		v, err := fromYAML(vy, b, depth+1)
		if err != nil {
			return err
		}
		n.keys = append(n.keys, k)
		n.items = append(n.items, v)
	}
	// Merge keys (<<: *defaults) add the keys the map does not set itself;
	// in a list of maps, earlier maps win.
	for _, m := range merges {
		src, err := fromYAML(m, b, depth+1)
		if err != nil {
			return err
		}
		var maps []*node
		switch src.kind {
		case mapNode:
			maps = []*node{src}
		case listNode:
			maps = src.items
		}
		if len(maps) == 0 && src.kind != listNode {
			return fmt.Errorf("rules: yaml: a merge key (<<) needs a map or a list of maps%s", at(m.Line))
		}
		for _, mm := range maps {
			if mm.kind != mapNode {
				return fmt.Errorf("rules: yaml: a merge key (<<) needs a map or a list of maps%s", at(mm.line))
			}
			for j, k := range mm.keys {
				if _, ok := seen[k.text]; ok {
					continue
				}
				seen[k.text] = k.line
				n.keys = append(n.keys, k)
				n.items = append(n.items, mm.items[j])
			}
		}
	}
	return nil
}

// decodeSet fills s from the document root.
func decodeSet(root *node, s *Set) error {
	switch root.kind {
	case mapNode:
	case nullNode:
		return errors.New("rules: empty document; write {} for a document with no rules")
	default:
		return fmt.Errorf("rules: want a map of rule kinds (flow, isolation, ...) at the top of the document, got %s%s", root.describe(), at(root.line))
	}
	sv := reflect.ValueOf(s).Elem()
	for i, k := range root.keys {
		kd := -1
		for j := range kinds {
			if kinds[j].key == k.text {
				kd = j
			}
		}
		if kd < 0 {
			names := make([]string, len(kinds))
			for j := range kinds {
				names[j] = kinds[j].key
			}
			return fmt.Errorf("rules: unknown rule kind %q%s%s; the kinds are %s",
				clip(k.text), at(k.line), suggest(k.text, names), strings.Join(names, ", "))
		}
		list := root.items[i]
		switch list.kind {
		case nullNode:
			continue
		case listNode:
		default:
			return fmt.Errorf("rules: %s: want a list of rules, got %s%s", k.text, list.describe(), at(list.line))
		}
		if len(list.items) == 0 {
			continue
		}
		fv := sv.Field(kinds[kd].field)
		out := reflect.MakeSlice(fv.Type(), len(list.items), len(list.items))
		for j, item := range list.items {
			if err := decodeRule(kinds[kd].name, j, item, out.Index(j)); err != nil {
				return err
			}
		}
		fv.Set(out)
	}
	return nil
}

// decodeRule decodes one rule, turning a decoding problem into an *Error
// that names the rule and its field.
func decodeRule(kind string, index int, n *node, v reflect.Value) error {
	if n.kind != mapNode {
		return &Error{Kind: kind, Index: index, Reason: fmt.Sprintf("want a map of fields, got %s%s", n.describe(), at(n.line))}
	}
	de := decodeValue(n, v)
	if de == nil {
		return nil
	}
	e := &Error{Kind: kind, Index: index, Reason: de.reason()}
	if len(de.path) > 0 {
		e.Field = de.path[0]
		e.Reason = strings.Join(append(de.path[1:len(de.path):len(de.path)], de.reason()), ": ")
	}
	// Name the resource when the rule gives one plainly, as validation
	// errors do.
	for i, k := range n.keys {
		if k.text == "resource" && n.items[i].kind == stringNode {
			e.Resource = n.items[i].text
		}
	}
	return e
}

// decodeErr is a decoding problem at path (Go name of the rule's field,
// then keys and indexes inside it).
type decodeErr struct {
	path []string
	msg  string
	line int
	hint string
}

func (e *decodeErr) reason() string { return e.msg + at(e.line) + e.hint }

func (e *decodeErr) in(elem string) *decodeErr {
	e.path = append([]string{elem}, e.path...)
	return e
}

func mismatch(want string, n *node) *decodeErr {
	msg := "want " + want + ", got " + n.describe()
	if want == "a string" && n.scalar() && n.kind != nullNode {
		msg += " (quote it)"
	}
	return &decodeErr{msg: msg, line: n.line}
}

var (
	durationType        = reflect.TypeOf(time.Duration(0))
	textUnmarshalerType = reflect.TypeOf((*encoding.TextUnmarshaler)(nil)).Elem()
	textMarshalerType   = reflect.TypeOf((*encoding.TextMarshaler)(nil)).Elem()
)

// decodeValue stores n into v, which must be settable.
func decodeValue(n *node, v reflect.Value) *decodeErr {
	if n.kind == nullNode {
		v.SetZero()
		return nil
	}
	t := v.Type()
	if t == durationType {
		return decodeDuration(n, v)
	}
	if t.Kind() != reflect.Pointer && reflect.PointerTo(t).Implements(textUnmarshalerType) {
		if !n.scalar() {
			return mismatch("a string", n)
		}
		if err := v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(n.text)); err != nil {
			return &decodeErr{msg: strings.TrimPrefix(err.Error(), "rules: "), line: n.line}
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		p := reflect.New(t.Elem())
		if err := decodeValue(n, p.Elem()); err != nil {
			return err
		}
		v.Set(p)
	case reflect.String:
		if n.kind != stringNode {
			return mismatch("a string", n)
		}
		v.SetString(n.text)
	case reflect.Bool:
		if n.kind != boolNode {
			return mismatch("true or false", n)
		}
		v.SetBool(n.text == "true")
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if n.kind != numberNode {
			return mismatch("an integer", n)
		}
		i, ok := parseInt(n.text, t.Bits())
		if !ok {
			return &decodeErr{msg: fmt.Sprintf("want a whole number that fits in %d bits, got %s", t.Bits(), clip(n.text)), line: n.line}
		}
		v.SetInt(i)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if n.kind != numberNode {
			return mismatch("a non-negative integer", n)
		}
		u, err := strconv.ParseUint(n.text, 10, t.Bits())
		if err != nil {
			f, ferr := strconv.ParseFloat(n.text, 64)
			if ferr != nil || f < 0 || f != float64(uint64(f)) || f >= 1<<53 || (t.Bits() < 64 && f >= float64(uint64(1)<<t.Bits())) {
				return &decodeErr{msg: fmt.Sprintf("want a non-negative whole number that fits in %d bits, got %s", t.Bits(), clip(n.text)), line: n.line}
			}
			u = uint64(f)
		}
		v.SetUint(u)
	case reflect.Float32, reflect.Float64:
		if n.kind != numberNode {
			return mismatch("a number", n)
		}
		f, err := strconv.ParseFloat(n.text, t.Bits())
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return &decodeErr{msg: "want a finite number, got " + clip(n.text), line: n.line}
		}
		v.SetFloat(f)
	case reflect.Slice:
		if n.kind != listNode {
			return mismatch("a list", n)
		}
		if len(n.items) == 0 {
			v.SetZero()
			return nil
		}
		out := reflect.MakeSlice(t, len(n.items), len(n.items))
		for i, item := range n.items {
			if err := decodeValue(item, out.Index(i)); err != nil {
				return err.in("[" + strconv.Itoa(i) + "]")
			}
		}
		v.Set(out)
	case reflect.Map:
		return decodeMap(n, v)
	case reflect.Struct:
		return decodeStruct(n, v)
	case reflect.Interface:
		if t.NumMethod() != 0 {
			return &decodeErr{msg: "cannot decode into Go type " + t.String(), line: n.line}
		}
		v.Set(reflect.ValueOf(natural(n)))
	default:
		return &decodeErr{msg: "cannot decode into Go type " + t.String(), line: n.line}
	}
	return nil
}

// parseInt parses a number literal as a whole number of the given size,
// accepting float notation (1e3, 5.0) when the value is exactly whole.
func parseInt(s string, bits int) (int64, bool) {
	if i, err := strconv.ParseInt(s, 10, bits); err == nil {
		return i, true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != float64(int64(f)) || f >= 1<<53 || f <= -(1<<53) {
		return 0, false
	}
	i := int64(f)
	if bits < 64 && (i >= 1<<(bits-1) || i < -(1<<(bits-1))) {
		return 0, false
	}
	return i, true
}

func decodeDuration(n *node, v reflect.Value) *decodeErr {
	switch n.kind {
	case stringNode:
		d, err := time.ParseDuration(strings.TrimSpace(n.text))
		if err != nil {
			return &decodeErr{msg: fmt.Sprintf("want a duration such as \"500ms\" or \"1m30s\", got %q", clip(n.text)), line: n.line}
		}
		v.SetInt(int64(d))
		return nil
	case numberNode:
		if f, err := strconv.ParseFloat(n.text, 64); err == nil && f == 0 {
			v.SetInt(0)
			return nil
		}
		return &decodeErr{
			msg:  fmt.Sprintf("want a duration string such as \"500ms\", got the number %s", clip(n.text)),
			line: n.line,
			hint: fmt.Sprintf(" (a bare number has no unit; write \"%sms\" for milliseconds)", clip(n.text)),
		}
	}
	return mismatch("a duration string such as \"500ms\"", n)
}

func decodeMap(n *node, v reflect.Value) *decodeErr {
	if n.kind != mapNode {
		return mismatch("a map", n)
	}
	if len(n.keys) == 0 {
		v.SetZero()
		return nil
	}
	t := v.Type()
	out := reflect.MakeMapWithSize(t, len(n.keys))
	for i, k := range n.keys {
		kv := reflect.New(t.Key()).Elem()
		kn := k
		if t.Key().Kind() == reflect.String && !reflect.PointerTo(t.Key()).Implements(textUnmarshalerType) {
			kn = &node{kind: stringNode, text: k.text, line: k.line} // YAML keys 123: are names here
		} else if k.kind == stringNode && isNumberKind(t.Key().Kind()) {
			kn = &node{kind: numberNode, text: k.text, line: k.line} // JSON keys are strings
		}
		if err := decodeValue(kn, kv); err != nil {
			err.msg = "key " + strconv.Quote(clip(k.text)) + ": " + err.msg
			return err
		}
		if out.MapIndex(kv).IsValid() {
			return &decodeErr{msg: fmt.Sprintf("key %q is the same as an earlier key", clip(k.text)), line: k.line}
		}
		ev := reflect.New(t.Elem()).Elem()
		if err := decodeValue(n.items[i], ev); err != nil {
			return err.in(strconv.Quote(clip(k.text)))
		}
		out.SetMapIndex(kv, ev)
	}
	v.Set(out)
	return nil
}

func isNumberKind(k reflect.Kind) bool {
	return k >= reflect.Int && k <= reflect.Float64
}

func decodeStruct(n *node, v reflect.Value) *decodeErr {
	if n.kind != mapNode {
		return mismatch("a map of fields", n)
	}
	fs := fieldsOf(v.Type())
	for i, k := range n.keys {
		f, ok := fs.byName[k.text]
		if !ok {
			return &decodeErr{
				msg:  fmt.Sprintf("unknown field %q", clip(k.text)),
				line: k.line,
				hint: suggest(k.text, fs.names),
			}
		}
		fv := v.FieldByIndex(f.index)
		if err := decodeValue(n.items[i], fv); err != nil {
			return err.in(f.goName)
		}
	}
	return nil
}

// natural converts n to plain Go values for an interface{} field: string,
// bool, int64 or float64, []any, map[string]any, nil.
func natural(n *node) any {
	switch n.kind {
	case boolNode:
		return n.text == "true"
	case numberNode:
		if i, err := strconv.ParseInt(n.text, 10, 64); err == nil {
			return i
		}
		f, _ := strconv.ParseFloat(n.text, 64)
		return f
	case stringNode:
		return n.text
	case listNode:
		out := make([]any, len(n.items))
		for i, it := range n.items {
			out[i] = natural(it)
		}
		return out
	case mapNode:
		out := make(map[string]any, len(n.keys))
		for i, k := range n.keys {
			out[k.text] = natural(n.items[i])
		}
		return out
	}
	return nil
}

// field is a struct field as a document sees it.
type field struct {
	name      string // the json tag's name
	goName    string
	index     []int
	omitEmpty bool
}

type fieldSet struct {
	list   []field
	byName map[string]field
	names  []string
}

var fieldCache sync.Map // reflect.Type -> *fieldSet

// fieldsOf returns the fields of struct type t named by their json tags:
// untagged exported fields by their Go name, "-" left out, untagged
// embedded structs flattened (as encoding/json does).
func fieldsOf(t reflect.Type) *fieldSet {
	if fs, ok := fieldCache.Load(t); ok {
		return fs.(*fieldSet)
	}
	fs := &fieldSet{byName: map[string]field{}}
	var walk func(t reflect.Type, index []int)
	walk = func(t reflect.Type, index []int) {
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			tag, hasTag := sf.Tag.Lookup("json")
			name, opts, _ := strings.Cut(tag, ",")
			if tag == "-" {
				continue
			}
			idx := append(append([]int(nil), index...), i)
			if sf.Anonymous && name == "" {
				ft := sf.Type
				if ft.Kind() == reflect.Struct {
					walk(ft, idx)
					continue
				}
			}
			if !sf.IsExported() {
				continue
			}
			if !hasTag || name == "" {
				name = sf.Name
			}
			if _, dup := fs.byName[name]; dup {
				continue
			}
			f := field{name: name, goName: sf.Name, index: idx, omitEmpty: strings.Contains(","+opts+",", ",omitempty,")}
			fs.list = append(fs.list, f)
			fs.byName[name] = f
			fs.names = append(fs.names, name)
		}
	}
	walk(t, nil)
	v, _ := fieldCache.LoadOrStore(t, fs)
	return v.(*fieldSet)
}

// suggest returns ` (did you mean "x"?)` when one of names is close to s,
// or "".
func suggest(s string, names []string) string {
	norm := func(s string) string {
		return strings.NewReplacer("_", "", "-", "", " ", "").Replace(strings.ToLower(s))
	}
	best, bestD := "", 3
	for _, n := range names {
		d := distance(norm(s), norm(n))
		if d < bestD {
			best, bestD = n, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// distance is the Levenshtein distance of a and b, capped for long input.
func distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		if a == b {
			return 0
		}
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// encodeValue converts v to a node, the inverse of decodeValue.
func encodeValue(v reflect.Value) (*node, error) {
	t := v.Type()
	if t == durationType {
		return &node{kind: stringNode, text: time.Duration(v.Int()).String()}, nil
	}
	if t.Kind() != reflect.Pointer && t.Implements(textMarshalerType) {
		b, err := v.Interface().(encoding.TextMarshaler).MarshalText()
		if err != nil {
			return nil, err
		}
		return &node{kind: stringNode, text: string(b)}, nil
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return &node{kind: nullNode}, nil
		}
		return encodeValue(v.Elem())
	case reflect.String:
		if !utf8.ValidString(v.String()) {
			return nil, fmt.Errorf("string %q is not valid UTF-8", clip(v.String()))
		}
		return &node{kind: stringNode, text: v.String()}, nil
	case reflect.Bool:
		return &node{kind: boolNode, text: strconv.FormatBool(v.Bool())}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return &node{kind: numberNode, text: strconv.FormatInt(v.Int(), 10)}, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return &node{kind: numberNode, text: strconv.FormatUint(v.Uint(), 10)}, nil
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("number %v cannot be written", f)
		}
		return &node{kind: numberNode, text: strconv.FormatFloat(f, 'g', -1, t.Bits())}, nil
	case reflect.Slice, reflect.Array:
		n := &node{kind: listNode}
		for i := 0; i < v.Len(); i++ {
			item, err := encodeValue(v.Index(i))
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, item)
		}
		return n, nil
	case reflect.Map:
		n := &node{kind: mapNode}
		type kv struct {
			k string
			v reflect.Value
		}
		var entries []kv
		iter := v.MapRange()
		for iter.Next() {
			k, err := encodeValue(iter.Key())
			if err != nil {
				return nil, err
			}
			if !k.scalar() || k.kind == nullNode {
				return nil, fmt.Errorf("map key of type %s cannot be written", t.Key())
			}
			entries = append(entries, kv{k.text, iter.Value()})
		}
		sort.Slice(entries, func(i, j int) bool { return entries[i].k < entries[j].k })
		for _, e := range entries {
			val, err := encodeValue(e.v)
			if err != nil {
				return nil, err
			}
			n.keys = append(n.keys, &node{kind: stringNode, text: e.k})
			n.items = append(n.items, val)
		}
		return n, nil
	case reflect.Struct:
		n := &node{kind: mapNode}
		for _, f := range fieldsOf(t).list {
			fv := v.FieldByIndex(f.index)
			if f.omitEmpty && isEmpty(fv) {
				continue
			}
			val, err := encodeValue(fv)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f.name, err)
			}
			n.keys = append(n.keys, &node{kind: stringNode, text: f.name})
			n.items = append(n.items, val)
		}
		return n, nil
	}
	return nil, fmt.Errorf("cannot encode Go type %s", t)
}

func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Slice, reflect.Map, reflect.String, reflect.Array:
		return v.Len() == 0
	}
	return v.IsZero()
}

// writeJSON writes n as indented JSON.
func writeJSON(b *bytes.Buffer, n *node, indent string) {
	switch n.kind {
	case nullNode:
		b.WriteString("null")
	case boolNode, numberNode:
		b.WriteString(n.text)
	case stringNode:
		q, _ := json.Marshal(n.text) // a Go string always marshals
		b.Write(q)
	case listNode, mapNode:
		open, closing := byte('['), byte(']')
		if n.kind == mapNode {
			open, closing = '{', '}'
		}
		b.WriteByte(open)
		if len(n.items) == 0 {
			b.WriteByte(closing)
			return
		}
		inner := indent + "  "
		for i, item := range n.items {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
			b.WriteString(inner)
			if n.kind == mapNode {
				q, _ := json.Marshal(n.keys[i].text)
				b.Write(q)
				b.WriteString(": ")
			}
			writeJSON(b, item, inner)
		}
		b.WriteByte('\n')
		b.WriteString(indent)
		b.WriteByte(closing)
	}
}

// toYAML converts n to a yaml.Node; tags make strings that look like
// numbers come out quoted.
func toYAML(n *node) *yaml.Node {
	switch n.kind {
	case nullNode:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
	case boolNode:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: n.text}
	case numberNode:
		tag := "!!float"
		if _, err := strconv.ParseInt(n.text, 10, 64); err == nil {
			tag = "!!int"
		} else if _, err := strconv.ParseUint(n.text, 10, 64); err == nil {
			tag = "!!int"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: n.text}
	case stringNode:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: n.text}
	case listNode:
		y := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		if len(n.items) == 0 {
			y.Style = yaml.FlowStyle
		}
		for _, it := range n.items {
			y.Content = append(y.Content, toYAML(it))
		}
		return y
	}
	y := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	if len(n.items) == 0 {
		y.Style = yaml.FlowStyle
	}
	for i, it := range n.items {
		y.Content = append(y.Content, toYAML(n.keys[i]), toYAML(it))
	}
	return y
}
