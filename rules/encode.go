package rules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Encode writes s as a document in format f that Decode reads back to an
// equal Set (an empty list or map reads back as nil): fields in declaration
// order, zero optional fields left out, map keys sorted. Encode does not
// validate s, but refuses what no document can hold (NaN, infinities,
// invalid UTF-8).
func Encode(s Set, f Format) ([]byte, error) {
	if f != JSON && f != YAML {
		return nil, fmt.Errorf("rules: unknown format %v", f)
	}
	n, err := toNode(reflect.ValueOf(s))
	if err != nil {
		return nil, fmt.Errorf("rules: encode: %w", err)
	}
	var b bytes.Buffer
	if f == JSON {
		var compact bytes.Buffer
		writeJSON(&compact, n)
		if err := json.Indent(&b, compact.Bytes(), "", "  "); err != nil {
			return nil, fmt.Errorf("rules: encode: %w", err)
		}
		b.WriteByte('\n')
		return b.Bytes(), nil
	}
	e := yaml.NewEncoder(&b)
	e.SetIndent(2)
	if err := e.Encode(n); err != nil {
		return nil, fmt.Errorf("rules: encode: %w", err)
	}
	return b.Bytes(), nil
}

// plain matches the strings Encode writes unquoted in YAML.
var plain = regexp.MustCompile(`^[A-Za-z_/]([A-Za-z0-9_./{} -]{0,254}[A-Za-z0-9_./{}-])?$`)

// toNode turns v into the node tree Encode writes; the error names the
// fields and keys on the way to a value no document can hold.
// complexity: a case per reflect.Kind the encoder writes, each naming the field of a value no document can hold
func toNode(v reflect.Value) (*yaml.Node, error) {
	n := &yaml.Node{Kind: yaml.ScalarNode}
	switch k := v.Kind(); {
	case v.Type() == durationType:
		n.Tag, n.Value = "!!str", time.Duration(v.Int()).String()
	case k == reflect.Pointer:
		return toNode(v.Elem())
	case k == reflect.String:
		n.Tag, n.Value, n.Style = "!!str", v.String(), yaml.DoubleQuotedStyle
		if !utf8.ValidString(n.Value) {
			return nil, fmt.Errorf("string %q is not valid UTF-8", clip(n.Value, 40))
		}
		switch strings.ToLower(n.Value) {
		case "true", "false", "yes", "no", "on", "off", "y", "n", "null":
		default:
			if plain.MatchString(n.Value) {
				n.Style = 0
			}
		}
	case k == reflect.Bool:
		n.Value = strconv.FormatBool(v.Bool())
	case k == reflect.Int || k == reflect.Int64:
		n.Value = strconv.FormatInt(v.Int(), 10)
	case k == reflect.Float64:
		if f := v.Float(); math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("number %v cannot be written", f)
		}
		n.Value = strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case k == reflect.Slice:
		n.Kind = yaml.SequenceNode
		for i := 0; i < v.Len(); i++ {
			item, err := toNode(v.Index(i))
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, item)
		}
	case k == reflect.Map:
		n.Kind = yaml.MappingNode
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		for _, key := range keys {
			kn, err := toNode(key)
			if err != nil {
				return nil, fmt.Errorf("key: %w", err)
			}
			item, err := toNode(v.MapIndex(key))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", clip(key.String(), 40), err)
			}
			n.Content = append(n.Content, kn, item)
		}
	case k == reflect.Struct:
		n.Kind = yaml.MappingNode
		for i := 0; i < v.NumField(); i++ {
			name, opts, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
			fv := v.Field(i)
			if opts == "omitempty" &&
				(fv.IsZero() || (fv.Kind() == reflect.Slice || fv.Kind() == reflect.Map) && fv.Len() == 0) {
				continue
			}
			item, err := toNode(fv)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: name}, item)
		}
	default:
		return nil, fmt.Errorf("cannot encode Go type %v", v.Type())
	}
	return n, nil
}

// writeJSON writes n as compact JSON, which Encode then indents.
func writeJSON(b *bytes.Buffer, n *yaml.Node) {
	switch {
	case n.Tag == "!!str":
		q, _ := json.Marshal(n.Value) // a UTF-8 string always marshals
		b.Write(q)
	case n.Kind == yaml.ScalarNode:
		b.WriteString(n.Value)
	default:
		open, closing, step := "[", "]", 1
		if n.Kind == yaml.MappingNode {
			open, closing, step = "{", "}", 2
		}
		b.WriteString(open)
		for i := 0; i < len(n.Content); i += step {
			if i > 0 {
				b.WriteByte(',')
			}
			if step == 2 {
				writeJSON(b, n.Content[i])
				b.WriteByte(':')
			}
			writeJSON(b, n.Content[i+step-1])
		}
		b.WriteString(closing)
	}
}
