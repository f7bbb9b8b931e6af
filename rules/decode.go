package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
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

// DecodeLimits bounds what decoding one document may cost, so that a hostile
// or mistaken document is refused quickly rather than exhausting memory. A
// field that is zero (or negative) means its default. The zero value is the
// default limits, which Decode and DecodeFile use; a FileSource takes others
// with WithDecodeLimits. A DecodeLimits is a plain value, safe to share.
type DecodeLimits struct {
	// MaxBytes is the size of the largest document, in bytes; a larger one
	// is refused before it is parsed (a file, by its size, unread). Decoding
	// allocates at most 36 bytes per byte of a rule file (measured 30 to
	// 32), and at most 240 for a document made to be dense ({a,a,a,...}:
	// 225, with a peak of live memory of 190), so this bounds memory as
	// well: at most about 960 MiB at the default (docs/limits.md). Default
	// DefaultMaxBytes.
	MaxBytes int
	// MaxValues is the most values (each string, number, boolean, null, list
	// and map, keys included) a document may hold once YAML aliases are
	// expanded, every use of an alias counting its values again; it bounds
	// the work of a "billion laughs" document. A two-field rule is 5 values.
	// Default 2^20.
	MaxValues int
	// MaxRules is the most rules of one kind (flow, isolation, ...) a
	// document may hold. Default DefaultMaxRules.
	MaxRules int
	// MaxNameBytes is the longest string a rule may hold, in bytes: its
	// resource, associated resource, ID, attachment key and the values
	// listed in its exceptions. Default DefaultMaxNameBytes.
	MaxNameBytes int
}

const (
	// DefaultMaxBytes is the default DecodeLimits.MaxBytes, 4 MiB: about
	// 80,000 two-field rules in YAML.
	DefaultMaxBytes = 4 << 20
	// defaultMaxValues is the default DecodeLimits.MaxValues, 2^20: more
	// than a document of DefaultMaxBytes holds without aliases unless it is
	// made to be dense.
	defaultMaxValues = 1 << 20
	// DefaultMaxRules is the default DecodeLimits.MaxRules, and the number
	// of rules of one kind an engine takes by default (sluice.Limits).
	DefaultMaxRules = 10000
	// DefaultMaxNameBytes is the default DecodeLimits.MaxNameBytes, and the
	// longest name an engine takes by default (sluice.Limits).
	DefaultMaxNameBytes = 1024
	// maxDepth bounds nesting, which no rule document needs beyond 5.
	maxDepth = 64
)

func (l DecodeLimits) maxBytes() int {
	if l.MaxBytes <= 0 {
		return DefaultMaxBytes
	}
	return l.MaxBytes
}

func (l DecodeLimits) maxValues() int {
	if l.MaxValues <= 0 {
		return defaultMaxValues
	}
	return l.MaxValues
}

func (l DecodeLimits) maxRules() int {
	if l.MaxRules <= 0 {
		return DefaultMaxRules
	}
	return l.MaxRules
}

func (l DecodeLimits) maxNameBytes() int {
	if l.MaxNameBytes <= 0 {
		return DefaultMaxNameBytes
	}
	return l.MaxNameBytes
}

func tooLarge(size int64, limit int) error {
	return fmt.Errorf("rules: document is %d bytes, more than the limit of %d bytes; "+
		"raise DecodeLimits.MaxBytes (WithDecodeLimits for a FileSource) to read it", size, limit)
}

// Decode decodes data with the default limits; see DecodeLimits.Decode.
func Decode(data []byte, format Format) (Set, error) { return DecodeLimits{}.Decode(data, format) }

// Decode parses a rule document and validates every rule in it.
//
// The document is a map from rule kind (flow, isolation, system,
// circuitBreaker, param) to a list of rules; each rule is a map from field
// names (the yaml tags of the rule types, camelCase) to values. Decoding is
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
//     as "qps" or "warm-up", exactly; an isolation rule is read as a flow
//     rule of the concurrency metric, after the flow rules.
//   - Integers must be whole and in range; NaN and infinities are refused.
//   - null is the same as leaving the field out, and an empty list or map
//     decodes as nil.
//   - An empty document (or one that is only null) is refused, because a
//     file read halfway through being written is often empty; write {} for
//     a document with no rules.
//
// YAML is parsed by go.yaml.in/yaml/v3 and JSON by encoding/json, into the
// same yaml.Node tree, so what JSON forbids (trailing commas, comments,
// single quotes) is refused.
//
// A document over l's limits is refused with an error that names the limit.
// Errors in a rule are *Error values (reach them with errors.As) with Kind,
// Index and Field set; decoding errors also give the line. After decoding,
// the set is validated with Set.Validate and the first problem returned. On
// error the returned Set is empty. Decode is safe for concurrent use.
func (l DecodeLimits) Decode(data []byte, format Format) (Set, error) {
	if len(data) > l.maxBytes() {
		return Set{}, tooLarge(int64(len(data)), l.maxBytes())
	}
	root, err := parse(data, format, l.maxValues())
	if err != nil {
		return Set{}, err
	}
	var s Set
	if err := decodeSet(root, &s, l.maxRules()); err != nil {
		return Set{}, err
	}
	if err := s.Validate(); err != nil {
		return Set{}, err
	}
	if err := checkNames(&s, l.maxNameBytes()); err != nil {
		return Set{}, err
	}
	return s, nil
}

var errEmpty = errors.New("rules: empty document; write {} for a document with no rules")

// parse reads the one document in data into a node tree and checks its
// shape (see checker). JSON is read by encoding/json (jsonNode), so what
// JSON allows (tabs, long keys, surrogate escapes) and forbids (trailing
// commas, comments) is exactly what it says; YAML by go.yaml.in/yaml/v3.
func parse(data []byte, f Format, maxValues int) (*yaml.Node, error) {
	var root *yaml.Node
	switch f {
	case JSON:
		if len(bytes.TrimSpace(data)) == 0 {
			return nil, errEmpty
		}
		if !json.Valid(data) {
			return nil, jsonSyntaxError(data)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		root = (&jsonReader{dec: dec, data: data, line: 1}).node(0)
	case YAML:
		dec := yaml.NewDecoder(bytes.NewReader(data))
		var doc, extra yaml.Node
		if err := dec.Decode(&doc); err == io.EOF {
			return nil, errEmpty
		} else if err != nil {
			return nil, fmt.Errorf("rules: %w", err)
		}
		if err := dec.Decode(&extra); err != io.EOF {
			if err != nil {
				return nil, fmt.Errorf("rules: %w", err)
			}
			return nil, fmt.Errorf("rules: yaml: want one document, found another%s", at(extra.Line))
		}
		if len(doc.Content) == 0 {
			return nil, errEmpty
		}
		root = doc.Content[0]
	default:
		return nil, fmt.Errorf("rules: unknown format %v", f)
	}
	if tagOf(root) == "!!null" {
		return nil, errEmpty
	}
	c := checker{format: f, maxValues: maxValues}
	if err := c.check(root, 0); err != nil {
		return nil, err
	}
	return root, nil
}

// jsonReader reads valid JSON into a node tree, keeping the line of the
// decoder's offset as it goes (counting each byte once).
type jsonReader struct {
	dec       *json.Decoder
	data      []byte
	off, line int
}

// node reads the next value as a node: strings are !!str, numbers !!int or
// !!float, with the line where the value ends.
func (r *jsonReader) node(depth int) *yaml.Node {
	tok, _ := r.dec.Token()
	if end := int(r.dec.InputOffset()); end > r.off {
		r.line += bytes.Count(r.data[r.off:end], []byte("\n"))
		r.off = end
	}
	n := &yaml.Node{Kind: yaml.ScalarNode, Line: r.line}
	switch v := tok.(type) {
	case json.Delim:
		n.Kind, n.Tag = yaml.SequenceNode, "!!seq"
		if v == '{' {
			n.Kind, n.Tag = yaml.MappingNode, "!!map"
		}
		if depth > maxDepth { // the checker refuses it; do not recurse further
			return n
		}
		for r.dec.More() {
			n.Content = append(n.Content, r.node(depth+1))
		}
		r.dec.Token() // the closing delimiter
	case string:
		n.Tag, n.Value, n.Style = "!!str", v, yaml.DoubleQuotedStyle
	case json.Number:
		n.Tag, n.Value = "!!int", v.String()
		if strings.ContainsAny(n.Value, ".eE") {
			n.Tag = "!!float"
		}
	case bool:
		n.Tag, n.Value = "!!bool", strconv.FormatBool(v)
	default:
		n.Tag, n.Value = "!!null", "null"
	}
	return n
}

// jsonSyntaxError says where data, which is not valid JSON, goes wrong.
func jsonSyntaxError(data []byte) error {
	var se *json.SyntaxError
	if err := json.Unmarshal(data, new(json.RawMessage)); !errors.As(err, &se) {
		return fmt.Errorf("rules: json: %w", err)
	}
	line := 1 + bytes.Count(data[:max(se.Offset-1, 0)], []byte("\n"))
	if strings.Contains(se.Error(), "after top-level value") {
		return fmt.Errorf("rules: json: unexpected data after the document%s", at(line))
	}
	return fmt.Errorf("rules: json: %v%s", se, at(line))
}

// checker bounds a parsed document, before anything is decoded: nesting
// depth, the number of values with YAML aliases expanded (a "billion laughs"
// document is refused after maxValues values, not after its billion), keys
// (scalars, none given twice) and merge keys.
type checker struct {
	format            Format
	values, maxValues int
}

func (c *checker) tooMany(n *yaml.Node) error {
	return fmt.Errorf("rules: document has more than %d values%s (a YAML alias counts its values at every use); "+
		"raise DecodeLimits.MaxValues (WithDecodeLimits for a FileSource) to read it", c.maxValues, at(n.Line))
}

func (c *checker) check(n *yaml.Node, depth int) error {
	if c.values++; c.values > c.maxValues {
		return c.tooMany(n)
	}
	if depth > maxDepth {
		return fmt.Errorf("rules: %v: nesting deeper than %d%s", c.format, maxDepth, at(n.Line))
	}
	switch n.Kind {
	case yaml.AliasNode:
		return c.check(n.Alias, depth+1)
	case yaml.ScalarNode:
		switch tag := n.ShortTag(); tag {
		case "!!null", "!!bool", "!!int", "!!float", "!!str", "!!timestamp", "!!merge":
		default:
			return fmt.Errorf("rules: yaml: unsupported tag %s%s", clip(tag), at(n.Line))
		}
	case yaml.MappingNode:
		// A large map is refused before its map of keys is built, when
		// its own keys and values are already too many.
		if len(n.Content) > 1024 && c.values+len(n.Content) > c.maxValues {
			return c.tooMany(n)
		}
		seen := make(map[string]int, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], deref(n.Content[i+1])
			switch {
			case k.ShortTag() == "!!merge":
				ok := v.Kind == yaml.MappingNode || v.Kind == yaml.SequenceNode
				for j := 0; ok && v.Kind == yaml.SequenceNode && j < len(v.Content); j++ {
					ok = deref(v.Content[j]).Kind == yaml.MappingNode
				}
				if !ok {
					return fmt.Errorf("rules: yaml: a merge key (<<) needs a map or a list of maps%s", at(v.Line))
				}
			case k.Kind != yaml.ScalarNode || k.ShortTag() == "!!null":
				return fmt.Errorf("rules: %v: a map key must be a string or number%s", c.format, at(k.Line))
			default:
				if first, dup := seen[k.Value]; dup {
					return fmt.Errorf("rules: %v: key %q%s is given twice (first at line %d)", c.format, clip(k.Value), at(k.Line), first)
				}
				seen[k.Value] = k.Line
			}
		}
	}
	for _, child := range n.Content {
		if err := c.check(child, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func deref(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode {
		return n.Alias
	}
	return n
}

// pairs returns the keys and values of mapping n in document order, then
// those its merge keys (<<: *defaults) bring that n does not set itself; of
// a merged list of maps, earlier maps win.
func pairs(n *yaml.Node) [][2]*yaml.Node {
	var own, merged [][2]*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		if k.ShortTag() != "!!merge" {
			own = append(own, [2]*yaml.Node{k, v})
			continue
		}
		maps := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			maps = v.Content
		}
		for _, m := range maps {
			merged = append(merged, pairs(deref(m))...)
		}
	}
	if len(merged) == 0 {
		return own
	}
	set := make(map[string]bool, len(own)+len(merged))
	for _, p := range own {
		set[p[0].Value] = true
	}
	for _, p := range merged {
		if !set[p[0].Value] {
			set[p[0].Value] = true
			own = append(own, p)
		}
	}
	return own
}

// tagOf returns the short tag of scalar n as the decoder reads it: a
// timestamp (2024-01-01) or a lone << is the text as written, and a plain
// number too large for a float64 (1e400), which yaml.v3 leaves a string, is
// a number.
func tagOf(n *yaml.Node) string {
	switch t := n.ShortTag(); t {
	case "!!timestamp", "!!merge":
		return "!!str"
	case "!!str":
		if v := n.Value; n.Style == 0 && v != "" && strings.IndexByte("+-.0123456789", v[0]) >= 0 && yamlFloat.MatchString(unscore(v)) {
			return "!!float"
		}
		return t
	default:
		return t
	}
}

// yamlFloat is yaml.v3's pattern for a decimal float.
var yamlFloat = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)

func isNumber(n *yaml.Node) bool {
	t := tagOf(n)
	return n.Kind == yaml.ScalarNode && (t == "!!int" || t == "!!float")
}

// describe names a value for an error message: `string "abc"`, `number 5`.
func describe(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.MappingNode:
		return "a map"
	case isNumber(n):
		return "number " + clip(n.Value)
	}
	switch tagOf(n) {
	case "!!null":
		return "null"
	case "!!bool":
		return "boolean " + n.Value
	}
	return "string " + strconv.Quote(clip(n.Value))
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

// decodeSet fills s from the document root.
func decodeSet(root *yaml.Node, s *Set, maxRules int) error {
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("rules: want a map of rule kinds (flow, isolation, ...) at the top of the document, got %s%s", describe(root), at(root.Line))
	}
	sv := reflect.ValueOf(s).Elem()
	var inflight []Flow // the isolation rules, after the flow rules
	for _, p := range pairs(root) {
		k, list := p[0], p[1]
		kd := -1
		names := make([]string, len(kinds))
		for j := range kinds {
			if names[j] = kinds[j].key; names[j] == k.Value {
				kd = j
			}
		}
		switch {
		case kd < 0:
			return fmt.Errorf("rules: unknown rule kind %q%s%s; the kinds are %s",
				clip(k.Value), at(k.Line), suggest(k.Value, names), strings.Join(names, ", "))
		case list.Kind == yaml.ScalarNode && tagOf(list) == "!!null":
			continue
		case list.Kind != yaml.SequenceNode:
			return fmt.Errorf("rules: %s: want a list of rules, got %s%s", k.Value, describe(list), at(list.Line))
		case len(list.Content) == 0:
			continue
		case len(list.Content) > maxRules:
			return fmt.Errorf("rules: %s: %d rules, more than the limit of %d rules of one kind%s; "+
				"raise DecodeLimits.MaxRules (WithDecodeLimits for a FileSource) to read them",
				k.Value, len(list.Content), maxRules, at(list.Line))
		}
		if kinds[kd].field < 0 {
			for j, item := range list.Content {
				var r isolation
				if err := decodeRule("isolation", j, deref(item), reflect.ValueOf(&r).Elem()); err != nil {
					return err
				}
				f := r.flow()
				if err := f.Validate(); err != nil {
					e := *err.(*Error)
					e.Kind, e.Index = "isolation", j
					return &e
				}
				inflight = append(inflight, f)
			}
			continue
		}
		fv := sv.Field(kinds[kd].field)
		out := reflect.MakeSlice(fv.Type(), len(list.Content), len(list.Content))
		for j, item := range list.Content {
			if err := decodeRule(kinds[kd].name, j, deref(item), out.Index(j)); err != nil {
				return err
			}
		}
		fv.Set(out)
	}
	s.Flow = append(s.Flow, inflight...)
	return nil
}

// decodeRule decodes one rule, turning a decoding problem into an *Error
// that names the rule and its field.
func decodeRule(kind string, index int, n *yaml.Node, v reflect.Value) error {
	if n.Kind != yaml.MappingNode {
		return &Error{Kind: kind, Index: index, Reason: fmt.Sprintf("want a map of fields, got %s%s", describe(n), at(n.Line))}
	}
	de := decodeValue(n, v)
	if de == nil {
		return nil
	}
	e := &Error{Kind: kind, Index: index, Field: de.unknown, Reason: de.reason()}
	if len(de.path) > 0 {
		e.Field = de.path[0]
		e.Reason = strings.Join(append(de.path[1:len(de.path):len(de.path)], de.reason()), ": ")
	}
	// Name the resource when the rule gives one plainly, as validation
	// errors do.
	for _, p := range pairs(n) {
		if p[0].Value == "resource" && p[1].Kind == yaml.ScalarNode && tagOf(p[1]) == "!!str" {
			e.Resource = p[1].Value
		}
	}
	return e
}

// decodeErr is a decoding problem at path (Go name of the rule's field,
// then keys and indexes inside it), or of an unknown field, named as
// written.
type decodeErr struct {
	path    []string
	msg     string
	line    int
	hint    string
	unknown string
}

func (e *decodeErr) reason() string { return e.msg + at(e.line) + e.hint }

func (e *decodeErr) in(elem string) *decodeErr {
	e.path = append([]string{elem}, e.path...)
	return e
}

func mismatch(want string, n *yaml.Node) *decodeErr {
	msg := "want " + want + ", got " + describe(n)
	if want == "a string" && n.Kind == yaml.ScalarNode && tagOf(n) != "!!null" {
		msg += " (quote it)"
	}
	return &decodeErr{msg: msg, line: n.Line}
}

var durationType = reflect.TypeFor[time.Duration]()

// decodeValue stores n into v, which must be addressable: a struct field
// by field (decodeStruct), anything else by yaml.v3 once its node has the
// kind v needs (check), so that a number is never read as a string, nor a
// fraction as an integer.
func decodeValue(n *yaml.Node, v reflect.Value) *decodeErr {
	n = deref(n)
	switch {
	case n.Kind == yaml.ScalarNode && tagOf(n) == "!!null":
		v.SetZero()
		return nil
	case v.Type() == durationType:
		return decodeDuration(n, v)
	case v.Kind() == reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		if err := decodeValue(n, p.Elem()); err != nil {
			return err
		}
		v.Set(p)
		return nil
	case v.Kind() == reflect.Struct:
		return decodeStruct(n, v)
	}
	if err := check(n, v.Type()); err != nil {
		return err
	}
	switch v.Kind() { // the kinds check has read; the rest is yaml.v3's
	case reflect.String:
		if names, ok := enumNames[v.Type()]; ok && !slices.Contains(names, n.Value) {
			return &decodeErr{msg: fmt.Sprintf("unknown value %q (want one of %s)", clip(n.Value), strings.Join(names, ", ")), line: n.Line}
		}
		v.SetString(n.Value)
		return nil
	case reflect.Int, reflect.Int64, reflect.Float64:
		f, _ := parseFloat(n.Value)
		if v.Kind() == reflect.Float64 {
			v.SetFloat(f)
		} else {
			v.SetInt(int64(f))
		}
		return nil
	}
	if err := n.Decode(v.Addr().Interface()); err != nil {
		return &decodeErr{msg: strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n  "), line: n.Line}
	}
	if v.Kind() == reflect.Map && v.Len() == 0 {
		v.SetZero() // an empty map reads back as nil, as Encode leaves it out
	}
	return nil
}

// check refuses a node yaml.v3 would read into a value of type t but the
// document did not mean as one: a number or boolean for a string (quote
// it), a string for a number, a fraction or a number out of range for an
// integer, a number that is not finite.
func check(n *yaml.Node, t reflect.Type) *decodeErr {
	switch t.Kind() {
	case reflect.String:
		if n.Kind != yaml.ScalarNode || tagOf(n) != "!!str" {
			return mismatch("a string", n)
		}
	case reflect.Bool:
		if tagOf(n) != "!!bool" {
			return mismatch("true or false", n)
		}
	case reflect.Int, reflect.Int64, reflect.Float64:
		want := map[bool]string{true: "an integer", false: "a number"}[t.Kind() != reflect.Float64]
		if !isNumber(n) {
			return mismatch(want, n)
		}
		f, err := parseFloat(n.Value)
		if t.Kind() != reflect.Float64 && (err != nil || f != math.Trunc(f) || math.Abs(f) >= 1<<53 || reflect.New(t).Elem().OverflowInt(int64(f))) {
			return &decodeErr{msg: fmt.Sprintf("want a whole number that fits in %d bits, got %s", t.Bits(), clip(n.Value)), line: n.Line}
		}
		if errors.Is(err, strconv.ErrRange) {
			return &decodeErr{msg: fmt.Sprintf("number %s is out of range for a 64-bit float", clip(n.Value)), line: n.Line}
		} else if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return &decodeErr{msg: "want a finite number, got " + strconv.FormatFloat(f, 'g', -1, 64), line: n.Line}
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return mismatch("a map", n)
		}
		for _, p := range pairs(n) {
			if err := check(p[1], t.Elem()); err != nil && tagOf(p[1]) != "!!null" {
				return err.in(strconv.Quote(clip(p[0].Value)))
			}
		}
	}
	return nil
}

// parseFloat reads a number as YAML writes it: 1.5, 1e3, 0x10, .inf, .nan.
func parseFloat(s string) (float64, error) {
	switch strings.ToLower(strings.TrimPrefix(s, "+")) {
	case ".inf":
		return math.Inf(1), nil
	case "-.inf":
		return math.Inf(-1), nil
	case ".nan":
		return math.NaN(), nil
	}
	if i, err := strconv.ParseInt(unscore(s), 0, 64); err == nil {
		return float64(i), nil
	}
	return strconv.ParseFloat(unscore(s), 64)
}

// unscore drops the underscores YAML allows in numbers (1_000).
func unscore(s string) string { return strings.ReplaceAll(s, "_", "") }

func decodeDuration(n *yaml.Node, v reflect.Value) *decodeErr {
	switch {
	case isNumber(n):
		if f, err := strconv.ParseFloat(unscore(n.Value), 64); err == nil && f == 0 {
			v.SetInt(0)
			return nil
		}
		return &decodeErr{
			msg:  fmt.Sprintf("want a duration string such as \"500ms\", got the number %s", clip(n.Value)),
			line: n.Line,
			hint: fmt.Sprintf(" (a bare number has no unit; write \"%sms\" for milliseconds)", clip(n.Value)),
		}
	case n.Kind != yaml.ScalarNode || tagOf(n) != "!!str":
		return mismatch("a duration string such as \"500ms\"", n)
	}
	d, err := time.ParseDuration(strings.TrimSpace(n.Value))
	if err != nil {
		return &decodeErr{msg: fmt.Sprintf("want a duration such as \"500ms\" or \"1m30s\", got %q", clip(n.Value)), line: n.Line}
	}
	v.SetInt(int64(d))
	return nil
}

func decodeStruct(n *yaml.Node, v reflect.Value) *decodeErr {
	if n.Kind != yaml.MappingNode {
		return mismatch("a map of fields", n)
	}
	t := v.Type()
	for _, p := range pairs(n) {
		k, found := p[0], -1
		for i := 0; i < t.NumField() && found < 0; i++ {
			if fieldName(t.Field(i)) == k.Value {
				found = i
			}
		}
		if found < 0 {
			var names []string
			for i := 0; i < t.NumField(); i++ {
				names = append(names, fieldName(t.Field(i)))
			}
			return &decodeErr{msg: unknownField(k.Value), line: k.Line, hint: suggest(k.Value, names), unknown: k.Value}
		}
		if err := decodeValue(p[1], v.Field(found)); err != nil {
			return err.in(t.Field(found).Name)
		}
	}
	return nil
}

// fieldName is the key of struct field f in a document: its yaml tag,
// which Encode reads too.
func fieldName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}

// suggest returns ` (did you mean "x"?)` when one of names is close to s,
// or "".
func suggest(s string, names []string) string {
	norm := strings.NewReplacer("_", "", "-", "", " ", "")
	best, bestD := "", 3
	for _, n := range names {
		if d := distance(norm.Replace(strings.ToLower(s)), norm.Replace(strings.ToLower(n))); d < bestD {
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
		return 64
	}
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
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
