package rules

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// Format is the text format of a rule document.
type Format uint8

const (
	JSON Format = iota + 1 // RFC 8259
	YAML                   // YAML 1.2 as go.yaml.in/yaml/v3 reads it, one document
)

func (f Format) String() string {
	if f == JSON || f == YAML {
		return [...]string{JSON: "json", YAML: "yaml"}[f]
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

// DecodeLimits bounds what decoding one document may cost. A field that is
// zero (or negative) means its default; the zero value is what Decode uses.
type DecodeLimits struct {
	// MaxBytes is the size of the largest document, refused before it is
	// parsed; decoding allocates at most 240 bytes per byte. Default
	// DefaultMaxBytes.
	MaxBytes int
	// MaxValues is the most values (keys included, every use of a YAML
	// alias counting its values again) a document may hold; a two-field rule
	// is 5. Default 2^20.
	MaxValues int
	// MaxRules is the most rules of one kind a document may hold. Default
	// DefaultMaxRules.
	MaxRules int
	// MaxNameBytes is the longest string a rule may hold, in bytes (a
	// resource, ID, key or exception's value). Default DefaultMaxNameBytes.
	MaxNameBytes int
}

// The default limits of DecodeLimits, and the engine's own for rules and
// names (sluice.Limits).
const (
	DefaultMaxBytes     = 4 << 20 // about 80,000 two-field rules in YAML
	DefaultMaxRules     = 10000
	DefaultMaxNameBytes = 1024
)

const maxDepth = 64 // a rule document needs 5; the JSON reader stops there

func (l DecodeLimits) maxBytes() int { return cmp.Or(max(l.MaxBytes, 0), DefaultMaxBytes) }

// raise is the end of the message of a limit that was reached.
func raise(field, what string) string {
	return "raise DecodeLimits." + field + " (filestore.Config.Limits for a rule store) to read " + what
}

func tooLarge(size int64, limit int) error {
	return fmt.Errorf("rules: document is %d bytes, more than the limit of %d bytes; %s",
		size, limit, raise("MaxBytes", "it"))
}

// document is a rule document: a Set, and isolation rules, which become
// flow rules of the concurrency metric. A kind tag is the *Error.Kind of a
// list whose yaml tag is not.
type document struct {
	Flow           []Flow           `yaml:"flow"`
	Isolation      []isolation      `yaml:"isolation"`
	System         []System         `yaml:"system"`
	CircuitBreaker []CircuitBreaker `yaml:"circuitBreaker" kind:"circuit breaker"`
	Param          []Param          `yaml:"param"`
	Authority      []Authority      `yaml:"authority"`
}

type isolation struct {
	ID        string `yaml:"id"`
	Resource  string `yaml:"resource"`
	Threshold int64  `yaml:"threshold"`
}

// Decode decodes data with the default limits; see DecodeLimits.Decode.
func Decode(data []byte, format Format) (Set, error) { return DecodeLimits{}.Decode(data, format) }

// Decode parses a rule document and validates every rule in it. The
// document maps rule kinds (flow, isolation, system, circuitBreaker, param,
// authority) to lists of rules, each a map from the yaml tags of the rule type to
// values. Decoding is strict: an unknown kind or field (a close name is
// suggested), a key given twice, a value of the wrong type, and a bare
// number for a duration ("500ms"; 0 is accepted) are errors; null is the
// same as leaving the field out. An isolation rule is read as a flow rule
// of the concurrency metric, after the flow rules. An empty document is
// refused (write {} for no rules). A problem in a rule is an *Error naming
// the kind, index, resource and field, with the line when decoding found
// it; on error the Set is empty. Decode is safe for concurrent use.
func (l DecodeLimits) Decode(data []byte, format Format) (Set, error) {
	if len(data) > l.maxBytes() {
		return Set{}, tooLarge(int64(len(data)), l.maxBytes())
	}
	var doc document
	root, err := parse(data, format)
	if err == nil {
		d := &decoder{
			maxValues: cmp.Or(max(l.MaxValues, 0), 1<<20),
			maxRules:  cmp.Or(max(l.MaxRules, 0), DefaultMaxRules),
			maxName:   cmp.Or(max(l.MaxNameBytes, 0), DefaultMaxNameBytes),
		}
		if de := d.value(root, reflect.ValueOf(&doc).Elem()); de != nil {
			err = de.err()
		}
	}
	s := Set{
		Flow: doc.Flow, System: doc.System, CircuitBreaker: doc.CircuitBreaker, Param: doc.Param, Authority: doc.Authority,
	}
	for i, r := range doc.Isolation {
		s.Flow = append(s.Flow, Flow{ID: r.ID, Resource: r.Resource, Metric: Concurrency, Threshold: float64(r.Threshold)})
		if e, ok := s.Flow[len(s.Flow)-1].validate().(*Error); ok && err == nil {
			e.Kind, e.Index, err = "isolation", i, e
		}
	}
	if err = cmp.Or(err, s.Validate()); err != nil {
		return Set{}, err
	}
	return s, nil
}

var errEmpty = errors.New("rules: empty document; write {} for a document with no rules")

// parse reads the one document in data into a node tree.
func parse(data []byte, f Format) (*yaml.Node, error) {
	var root *yaml.Node
	switch f {
	case JSON:
		if len(bytes.TrimSpace(data)) == 0 {
			return nil, errEmpty
		}
		var se *json.SyntaxError
		if err := json.Unmarshal(data, new(json.RawMessage)); errors.As(err, &se) {
			line := at(1 + bytes.Count(data[:max(se.Offset-1, 0)], []byte("\n")))
			if strings.Contains(se.Error(), "after top-level value") {
				return nil, errors.New("rules: json: unexpected data after the document" + line)
			}
			return nil, fmt.Errorf("rules: json: %v%s", se, line)
		} else if err != nil {
			return nil, fmt.Errorf("rules: json: %w", err)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		r := &jsonReader{dec: dec, data: data, line: 1}
		if root = r.node(0); r.deep > 0 {
			return nil, fmt.Errorf("rules: json: nesting deeper than %d%s", maxDepth, at(r.deep))
		}
	case YAML:
		dec := yaml.NewDecoder(bytes.NewReader(data))
		var doc, extra yaml.Node
		if err := dec.Decode(&doc); err == io.EOF || err == nil && len(doc.Content) == 0 {
			return nil, errEmpty
		} else if err != nil {
			return nil, fmt.Errorf("rules: %w", err)
		}
		if err := dec.Decode(&extra); err == nil {
			return nil, fmt.Errorf("rules: yaml: want one document, found another%s", at(extra.Line))
		} else if err != io.EOF {
			return nil, fmt.Errorf("rules: %w", err)
		}
		root = doc.Content[0]
	default:
		return nil, fmt.Errorf("rules: unknown format %v", f)
	}
	if tagOf(root) == "!!null" {
		return nil, errEmpty
	}
	return root, nil
}

// jsonReader reads valid JSON into a node tree, with each value's line.
type jsonReader struct {
	dec       *json.Decoder
	data      []byte
	off, line int
	deep      int // the line where nesting passed maxDepth, or 0
}

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
		if depth > maxDepth {
			r.deep = cmp.Or(r.deep, r.line)
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

func deref(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode {
		return n.Alias
	}
	return n
}

// tagOf returns the short tag of scalar n as decoded: a timestamp is a
// string, and a plain number beyond float64 (1e400, a string to yaml.v3) a
// number.
func tagOf(n *yaml.Node) string {
	switch t := n.ShortTag(); {
	case t == "!!timestamp":
		return "!!str"
	case t == "!!str" && n.Style == 0 && n.Value != "" && strings.IndexByte("+-.0123456789", n.Value[0]) >= 0 &&
		yamlFloat.MatchString(strings.ReplaceAll(n.Value, "_", "")):
		return "!!float"
	default:
		return t
	}
}

// yamlFloat is yaml.v3's pattern for a decimal float.
var yamlFloat = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)

func isNumber(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && (tagOf(n) == "!!int" || tagOf(n) == "!!float")
}

// describe names a value for an error message: `string "abc"`, `number 5`.
func describe(n *yaml.Node) string {
	switch {
	case n.Kind != yaml.ScalarNode:
		return map[yaml.Kind]string{yaml.SequenceNode: "a list", yaml.MappingNode: "a map"}[n.Kind]
	case isNumber(n):
		return "number " + clip(n.Value, 40)
	case tagOf(n) == "!!null":
		return "null"
	case tagOf(n) == "!!bool":
		return "boolean " + n.Value
	}
	return "string " + strconv.Quote(clip(n.Value, 40))
}

func at(line int) string {
	if line <= 0 {
		return ""
	}
	return " at line " + strconv.Itoa(line)
}

// decodeErr is a problem at path (fields' Go names, indexes and keys), in
// rule, or with an unknown field (named as written).
type decodeErr struct {
	limit     error // a limit of the whole document, reached
	path      []string
	msg, hint string
	line      int
	unknown   string
	rule      *yaml.Node
}

func (e *decodeErr) in(elem string) *decodeErr {
	e.path = append([]string{elem}, e.path...)
	return e
}

// err returns the problem as an *Error when it is in a rule.
func (e *decodeErr) err() error {
	if e.limit != nil {
		return e.limit
	}
	reason := e.msg + at(e.line) + e.hint
	if len(e.path) == 0 {
		return errors.New("rules: " + reason)
	}
	f, _ := reflect.TypeFor[document]().FieldByName(e.path[0])
	if len(e.path) == 1 {
		return fmt.Errorf("rules: %s: %s", fieldName(f), reason)
	}
	re := &Error{Kind: cmp.Or(f.Tag.Get("kind"), fieldName(f)), Field: e.unknown, Reason: reason}
	re.Index, _ = strconv.Atoi(e.path[1])
	if len(e.path) > 2 {
		re.Field, re.Reason = e.path[2], strings.Join(append(e.path[3:len(e.path):len(e.path)], reason), ": ")
	}
	for i := 0; e.rule.Kind == yaml.MappingNode && i < len(e.rule.Content); i += 2 {
		k, v := e.rule.Content[i], deref(e.rule.Content[i+1])
		if k.Value == "resource" && v.Kind == yaml.ScalarNode && tagOf(v) == "!!str" {
			re.Resource = v.Value
		}
	}
	return re
}

func mismatch(want string, n *yaml.Node) *decodeErr {
	msg := "want " + want + ", got " + describe(n)
	if want == "a string" && n.Kind == yaml.ScalarNode {
		msg += " (quote it)"
	}
	return &decodeErr{msg: msg, line: n.Line}
}

var durationType = reflect.TypeFor[time.Duration]()

// decoder decodes a node tree into a document, within the limits. It
// counts every value it visits (keys, and each use of a YAML alias,
// included), so that a "billion laughs" stops after maxValues.
type decoder struct {
	values, maxValues, maxRules, maxName, merges int
	flat                                         reflect.Value // the flat fields of the rule being decoded (legacy.go)
}

// count counts value n, or refuses the document when it holds too many.
func (d *decoder) count(n *yaml.Node) *decodeErr {
	if d.values++; d.values <= d.maxValues {
		return nil
	}
	return &decodeErr{limit: fmt.Errorf(
		"rules: document has more than %d values%s (a YAML alias counts its values at every use); %s",
		d.maxValues, at(n.Line), raise("MaxValues", "it"))}
}

func (d *decoder) long(s string, line int) *decodeErr {
	if len(s) <= d.maxName {
		return nil
	}
	return &decodeErr{msg: fmt.Sprintf("is %d bytes, more than the limit of %d", len(s), d.maxName), line: line,
		hint: "; " + raise("MaxNameBytes", "it")}
}

// value stores n into v (addressable), refusing what the document did not
// mean as a value of v's type, such as a number for a string.
// complexity: a case per kind of YAML value and Go type it accepts, each refusing what the document did not mean
func (d *decoder) value(n *yaml.Node, v reflect.Value) *decodeErr {
	if err := d.count(n); err != nil {
		return err
	} else if n.Kind == yaml.AliasNode {
		return d.value(n.Alias, v)
	}
	t, str := v.Type(), n.Kind == yaml.ScalarNode && tagOf(n) == "!!str"
	switch k := t.Kind(); {
	case n.Kind == yaml.ScalarNode && tagOf(n) == "!!null":
		v.SetZero()
	case t == durationType && isNumber(n):
		if f, err := parseFloat(n.Value); err != nil || f != 0 {
			return &decodeErr{
				msg:  fmt.Sprintf("want a duration string such as \"500ms\", got the number %s", clip(n.Value, 40)),
				line: n.Line,
				hint: fmt.Sprintf(" (a bare number has no unit; write \"%sms\" for milliseconds)", clip(n.Value, 40)),
			}
		}
		v.SetInt(0)
	case t == durationType && !str:
		return mismatch("a duration string such as \"500ms\"", n)
	case t == durationType:
		dur, err := time.ParseDuration(strings.TrimSpace(n.Value))
		if err != nil {
			return &decodeErr{msg: fmt.Sprintf("want a duration such as \"500ms\" or \"1m30s\", got %q", clip(n.Value, 40)),
				line: n.Line}
		}
		v.SetInt(int64(dur))
	case k == reflect.Pointer:
		v.Set(reflect.New(t.Elem()))
		return d.value(n, v.Elem())
	case k == reflect.Struct && flatTypes[t] != nil:
		return d.rule(n, v)
	case k == reflect.Struct:
		return d.fields(n, v)
	case k == reflect.Slice: // of rules, or a flow rule's tiers
		if n.Kind != yaml.SequenceNode {
			want := map[bool]string{true: "a list of tiers", false: "a list of rules"}[t == reflect.TypeFor[[]Tier]()]
			return mismatch(want, n)
		} else if len(n.Content) > d.maxRules {
			return &decodeErr{
				msg:  fmt.Sprintf("%d rules, more than the limit of %d rules of one kind", len(n.Content), d.maxRules),
				line: n.Line, hint: "; " + raise("MaxRules", "them"),
			}
		}
		if v.SetZero(); len(n.Content) > 0 { // an empty list reads back as nil, as Encode leaves it out
			v.Set(reflect.MakeSlice(t, len(n.Content), len(n.Content)))
		}
		for i, item := range n.Content {
			if err := d.value(item, v.Index(i)); err != nil {
				err.rule = deref(item) // the outermost list's item: the rule
				return err.in(strconv.Itoa(i))
			}
		}
	case k == reflect.Map:
		if n.Kind != yaml.MappingNode {
			return mismatch("a map", n)
		}
		if v.SetZero(); len(n.Content) > 0 { // an empty map reads back as nil, as Encode leaves it out
			v.Set(reflect.MakeMap(t))
		}
		for i := 0; i < len(n.Content); i += 2 {
			key, e := deref(n.Content[i]), reflect.New(t.Elem()).Elem()
			if err := d.count(key); err != nil {
				return err
			} else if kt := tagOf(key); key.Kind != yaml.ScalarNode ||
				kt != "!!str" && kt != "!!int" && kt != "!!float" && kt != "!!bool" {
				return mismatch("a string or number as a key", key)
			} else if v.MapIndex(reflect.ValueOf(key.Value)).IsValid() {
				return (&decodeErr{msg: "given twice", line: key.Line}).in(strconv.Quote(clip(key.Value, 40)))
			} else if err := cmp.Or(d.long(key.Value, key.Line), d.value(n.Content[i+1], e)); err != nil {
				return err.in(strconv.Quote(clip(key.Value, 40)))
			}
			v.SetMapIndex(reflect.ValueOf(key.Value), e)
		}
	case k == reflect.String:
		if !str {
			return mismatch("a string", n)
		} else if err := d.long(n.Value, n.Line); err != nil {
			return err
		}
		v.SetString(n.Value)
	case k == reflect.Bool:
		if n.Kind != yaml.ScalarNode || tagOf(n) != "!!bool" || n.Decode(v.Addr().Interface()) != nil {
			return mismatch("true or false", n)
		}
	case !isNumber(n):
		return mismatch(map[bool]string{true: "a number", false: "an integer"}[k == reflect.Float64], n)
	default: // int, int64, float64
		f, err := parseFloat(n.Value)
		if k != reflect.Float64 {
			if err != nil || f != math.Trunc(f) || math.Abs(f) >= 1<<53 || v.OverflowInt(int64(f)) {
				return &decodeErr{msg: fmt.Sprintf("want a whole number that fits in %d bits, got %s",
					t.Bits(), clip(n.Value, 40)), line: n.Line}
			}
			v.SetInt(int64(f))
		} else if errors.Is(err, strconv.ErrRange) {
			return &decodeErr{msg: fmt.Sprintf("number %s is out of range for a 64-bit float", clip(n.Value, 40)), line: n.Line}
		} else if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return &decodeErr{msg: "want a finite number, got " + strconv.FormatFloat(f, 'g', -1, 64), line: n.Line}
		} else {
			v.SetFloat(f)
		}
	}
	return nil
}

// fields decodes mapping n into struct v by the yaml tags. A merge key
// (<<: *defaults) sets what n does not (of a list of maps, the first wins).
// complexity: struct decoding by yaml tags with merge keys, unknown fields and duplicates refused
func (d *decoder) fields(n *yaml.Node, v reflect.Value) *decodeErr {
	t, what := v.Type(), "field"
	if t == reflect.TypeFor[document]() {
		what = "rule kind"
	}
	if n.Kind != yaml.MappingNode {
		return mismatch(map[bool]string{
			true:  "a map of fields",
			false: "a map of rule kinds (flow, isolation, ...) at the top of the document",
		}[what == "field"], n)
	}
	for i := 0; i < len(n.Content); i += 2 {
		if n.Content[i].ShortTag() == "!!merge" {
			if d.merges++; d.merges > maxDepth { // merges count no value before they recurse
				return &decodeErr{msg: fmt.Sprintf("merge keys nested deeper than %d (does a map merge itself?)", maxDepth),
					line: n.Content[i].Line}
			}
			maps := []*yaml.Node{deref(n.Content[i+1])}
			if maps[0].Kind == yaml.SequenceNode {
				maps = maps[0].Content
			}
			for j := len(maps) - 1; j >= 0; j-- {
				if err := d.fields(deref(maps[j]), v); err != nil {
					return err
				}
			}
			d.merges--
		}
	}
	fs := docFields(t)
	seen := make([]int, len(fs))
	for i := 0; i < len(n.Content); i += 2 {
		key, f := deref(n.Content[i]), 0
		if err := d.count(key); err != nil {
			return err
		}
		for f < len(fs) && fieldName(fs[f]) != key.Value {
			f++
		}
		switch {
		case key.ShortTag() == "!!merge":
			continue
		case f == len(fs):
			var names []string
			for _, f := range fs {
				names = append(names, fieldName(f))
			}
			hint := suggest(key.Value, names)
			if what == "rule kind" {
				hint += "; the kinds are " + strings.Join(names, ", ")
			}
			return &decodeErr{msg: fmt.Sprintf("unknown %s %q", what, clip(key.Value, 40)), line: key.Line, hint: hint,
				unknown: key.Value}
		case seen[f] > 0:
			return (&decodeErr{msg: fmt.Sprintf("given twice, at lines %d and %d", seen[f], key.Line)}).in(fs[f].Name)
		}
		seen[f] = max(key.Line, 1)
		if err := d.value(n.Content[i+1], d.field(v, f)); err != nil {
			return err.in(fs[f].Name)
		}
	}
	return nil
}

// parseFloat reads a number as YAML writes it: 1e3, 0x10, 1_000, .nan.
func parseFloat(s string) (float64, error) {
	s = strings.ReplaceAll(s, "_", "")
	switch l := strings.ToLower(strings.TrimPrefix(s, "+")); l {
	case ".inf", "-.inf", ".nan":
		return strconv.ParseFloat(strings.Replace(l, ".", "", 1), 64)
	}
	if i, err := strconv.ParseInt(s, 0, 64); err == nil {
		return float64(i), nil
	}
	return strconv.ParseFloat(s, 64)
}

// docFieldCache holds docFields' answers by type.
var docFieldCache sync.Map

// docFields returns the fields of struct type t a document may write: t's,
// then, for a rule type, those of earlier releases it maps (legacy.go).
func docFields(t reflect.Type) []reflect.StructField {
	if fs, ok := docFieldCache.Load(t); ok {
		return fs.([]reflect.StructField)
	}
	fs := reflect.VisibleFields(t)
	if ft := flatTypes[t]; ft != nil {
		fs = append(fs, reflect.VisibleFields(ft)...)
	}
	docFieldCache.Store(t, fs)
	return fs
}

// fieldName is the key of struct field f in a document: its yaml tag.
func fieldName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}

// suggest returns ` (did you mean "x"?)` for the name that s differs from
// only by case, separators, or at most two letters left out or added, or "".
func suggest(s string, names []string) string {
	norm := strings.NewReplacer("_", "", "-", "", " ", "")
	for _, n := range names {
		a, b := strings.ToLower(norm.Replace(s)), strings.ToLower(norm.Replace(n))
		if len(a) > len(b) {
			a, b = b, a
		}
		i := 0 // a is a subsequence of b when i reaches len(a)
		for j := 0; i < len(a) && j < len(b); j++ {
			if a[i] == b[j] {
				i++
			}
		}
		if len(a) > 0 && i == len(a) && len(b)-len(a) <= 2 {
			return fmt.Sprintf(" (did you mean %q?)", n)
		}
	}
	return ""
}
