package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sampleYAML = `# sample
flow:
  - resource: GET /orders
    threshold: 500
  - id: paced
    resource: POST /orders
    threshold: 20
    behavior: throttle
    maxQueueing: 500ms
  - resource: GET /search
    threshold: 100
    strategy: warm-up
    warmUpPeriod: 1m30s
    coldFactor: 4
    statInterval: 2s
isolation:
  - resource: db
    threshold: 16
`

const sampleJSON = `{
  "flow": [
    {"resource": "GET /orders", "threshold": 500},
    {"id": "paced", "resource": "POST /orders", "threshold": 20, "behavior": "throttle", "maxQueueing": "500ms"},
    {"resource": "GET /search", "threshold": 1e2, "strategy": "warm-up", "warmUpPeriod": "90s",
     "coldFactor": 4, "statInterval": "2000ms"}
  ],
  "isolation": [{"resource": "db", "threshold": 16}]
}`

func sampleSet() Set {
	return Set{
		Flow: []Flow{
			{Resource: "GET /orders", Threshold: 500},
			{ID: "paced", Resource: "POST /orders", Threshold: 20, Throttle: &Throttle{MaxQueueing: 500 * time.Millisecond}},
			{Resource: "GET /search", Threshold: 100, WarmUp: &WarmUp{Period: 90 * time.Second, ColdFactor: 4}, StatInterval: 2 * time.Second},
			{Resource: "db", Metric: Concurrency, Threshold: 16}, // isolation
		},
	}
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name   string
		give   string
		format Format
		want   Set
	}{
		{"yaml", sampleYAML, YAML, sampleSet()},
		{"json", sampleJSON, JSON, sampleSet()},
		{"empty map yaml", "{}", YAML, Set{}},
		{"empty map json", "{}", JSON, Set{}},
		{"null and empty kinds are nil", "flow: []\nisolation: null\n", YAML, Set{}},
		{"null field is the zero value", `{"flow":[{"resource":"a","threshold":1,"maxQueueing":null}]}`, JSON,
			Set{Flow: []Flow{{Resource: "a", Threshold: 1}}}},
		{"bare zero duration", "flow:\n- {resource: a, threshold: 1, maxQueueing: 0}\n", YAML,
			Set{Flow: []Flow{{Resource: "a", Threshold: 1}}}},
		{"whole float for an integer", `{"isolation":[{"resource":"a","threshold":4.0}]}`, JSON,
			Set{Flow: []Flow{{Resource: "a", Metric: Concurrency, Threshold: 4}}}},
		{"token bucket yaml", "flow:\n- {resource: a, threshold: 10, strategy: token-bucket, burst: 2.5}\n", YAML,
			Set{Flow: []Flow{{Resource: "a", Threshold: 10, Bucket: &Bucket{Burst: 2.5}}}}},
		{"token bucket json", `{"flow":[{"resource":"a","threshold":10,"strategy":"token-bucket","burst":40}]}`, JSON,
			Set{Flow: []Flow{{Resource: "a", Threshold: 10, Bucket: &Bucket{Burst: 40}}}}},
		{"yaml hex integer", "isolation:\n- {resource: a, threshold: 0x10}\n", YAML,
			Set{Flow: []Flow{{Resource: "a", Metric: Concurrency, Threshold: 16}}}},
		{"yaml anchors and merge keys", `
flow:
  - &a {resource: a, threshold: 10, behavior: throttle, maxQueueing: 1s}
  - <<: *a
    resource: b
    threshold: 20
`, YAML, Set{Flow: []Flow{
			{Resource: "a", Threshold: 10, Throttle: &Throttle{MaxQueueing: time.Second}},
			{Resource: "b", Threshold: 20, Throttle: &Throttle{MaxQueueing: time.Second}},
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode([]byte(tt.give), tt.format)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name   string
		give   string
		format Format
		want   string
		// wantRule, when set, is the *Error the message comes from.
		wantRule *Error
	}{
		{
			name:   "unknown field",
			give:   "flow:\n- {resource: a, threshold: 1}\n- {resource: b, threshold: 1}\n- resource: c\n  thresold: 5\n",
			format: YAML,
			want:   `rules: flow rule 2 (resource "c"): unknown field "thresold" at line 5 (did you mean "threshold"?)`,
			wantRule: &Error{Kind: "flow", Index: 2, Resource: "c", Field: "thresold",
				Reason: `unknown field "thresold" at line 5 (did you mean "threshold"?)`},
		},
		{
			name:   "unknown field json without suggestion",
			give:   `{"isolation": [{"resource": "a", "threshold": 1, "colour": "red"}]}`,
			format: JSON,
			want:   `rules: isolation rule 0 (resource "a"): unknown field "colour" at line 1`,
			wantRule: &Error{Kind: "isolation", Index: 0, Resource: "a", Field: "colour",
				Reason: `unknown field "colour" at line 1`},
		},
		{
			name:   "field names are case-sensitive",
			give:   "isolation:\n- {resource: a, Threshold: 3}\n",
			format: YAML,
			want:   `rules: isolation rule 0 (resource "a"): unknown field "Threshold" at line 2 (did you mean "threshold"?)`,
		},
		{
			name:   "type mismatch names the field",
			give:   "{\"flow\": [\n  {\"resource\": \"a\",\n   \"threshold\": \"ten\"}]}",
			format: JSON,
			want:   `rules: flow rule 0 (resource "a"): Threshold: want a number, got string "ten" at line 3`,
			wantRule: &Error{Kind: "flow", Index: 0, Resource: "a", Field: "Threshold",
				Reason: `want a number, got string "ten" at line 3`},
		},
		{
			name:   "number for a string",
			give:   "isolation:\n- {resource: 123, threshold: 3}\n",
			format: YAML,
			want:   `rules: isolation rule 0: Resource: want a string, got number 123 (quote it) at line 2`,
		},
		{
			name:   "integer duration",
			give:   "flow:\n- resource: a\n  threshold: 1\n  behavior: throttle\n  maxQueueing: 500\n",
			format: YAML,
			want:   `rules: flow rule 0 (resource "a"): MaxQueueing: want a duration string such as "500ms", got the number 500 at line 5 (a bare number has no unit; write "500ms" for milliseconds)`,
		},
		{
			name:   "bad duration string",
			give:   `{"flow":[{"resource":"a","threshold":1,"strategy":"warm-up","warmUpPeriod":"ten seconds"}]}`,
			format: JSON,
			want:   `rules: flow rule 0 (resource "a"): WarmUpPeriod: want a duration such as "500ms" or "1m30s", got "ten seconds" at line 1`,
		},
		{
			name:   "unknown enum",
			give:   "flow:\n- {resource: a, threshold: 1, metric: rps}\n",
			format: YAML,
			want:   `rules: flow rule 0 (resource "a"): Metric: unknown value "rps" (want one of qps, concurrency)`,
		},
		{
			name:   "fraction for an integer",
			give:   `{"isolation":[{"resource":"a","threshold":2.5}]}`,
			format: JSON,
			want:   `rules: isolation rule 0 (resource "a"): Threshold: want a whole number that fits in 64 bits, got 2.5 at line 1`,
		},
		{
			name:   "integer out of range",
			give:   `{"isolation":[{"resource":"a","threshold":99999999999999999999}]}`,
			format: JSON,
			want:   `rules: isolation rule 0 (resource "a"): Threshold: want a whole number that fits in 64 bits, got 99999999999999999999 at line 1`,
		},
		{
			name:   "nan",
			give:   "flow:\n- {resource: a, threshold: .nan}\n",
			format: YAML,
			want:   `rules: flow rule 0 (resource "a"): Threshold: want a finite number, got NaN at line 2`,
		},
		{
			name:   "invalid rule is refused with index and field",
			give:   "flow:\n- {resource: a, threshold: 1}\n- {resource: b, threshold: 1}\n- {resource: c, threshold: -5}\n",
			format: YAML,
			want:   `rules: flow rule 2 (resource "c"): Threshold: must be a positive number, got -5`,
			wantRule: &Error{Kind: "flow", Index: 2, Resource: "c", Field: "Threshold",
				Reason: "must be a positive number, got -5"},
		},
		{
			name:   "invalid isolation rule after valid flow rules",
			give:   `{"flow":[{"resource":"a","threshold":1}],"isolation":[{"resource":"b","threshold":0}]}`,
			format: JSON,
			want:   `rules: isolation rule 0 (resource "b"): Threshold: must be a positive number, got 0`,
		},
		{
			name:   "unknown kind",
			give:   "flows:\n- {resource: a, threshold: 1}\n",
			format: YAML,
			want:   `rules: unknown rule kind "flows" at line 1 (did you mean "flow"?); the kinds are flow, isolation, system, circuitBreaker, param, authority`,
		},
		{
			name:   "kind is not a list",
			give:   `{"flow": {"resource": "a"}}`,
			format: JSON,
			want:   `rules: flow: want a list of rules, got a map at line 1`,
		},
		{
			name:   "rule is not a map",
			give:   "isolation:\n- db\n",
			format: YAML,
			want:   `rules: isolation rule 0: want a map of fields, got string "db" at line 2`,
		},
		{
			name:   "top level is a list",
			give:   `[]`,
			format: JSON,
			want:   `rules: want a map of rule kinds (flow, isolation, ...) at the top of the document, got a list at line 1`,
		},
		{name: "empty yaml", give: "# nothing\n", format: YAML, want: `rules: empty document; write {} for a document with no rules`},
		{name: "null yaml", give: "null\n", format: YAML, want: `rules: empty document; write {} for a document with no rules`},
		{name: "empty json", give: " \n", format: JSON, want: `rules: empty document; write {} for a document with no rules`},
		{
			name:   "duplicate key yaml",
			give:   "isolation:\n- resource: a\n  threshold: 1\n  threshold: 2\n",
			format: YAML,
			want:   `rules: isolation rule 0 (resource "a"): Threshold: given twice, at lines 3 and 4`,
		},
		{
			name:   "duplicate key json",
			give:   "{\"isolation\": [{\"resource\": \"a\",\n \"resource\": \"b\", \"threshold\": 1}]}",
			format: JSON,
			want:   `rules: isolation rule 0 (resource "b"): Resource: given twice, at lines 1 and 2`,
		},
		{
			name:   "json syntax error",
			give:   "{\"flow\": [\n  {\"resource\": \"a\", \"threshold\": 1,}\n]}",
			format: JSON,
			want:   `rules: json: invalid character '}' looking for beginning of object key string at line 2`,
		},
		{
			name:   "json trailing data",
			give:   "{}\n{}",
			format: JSON,
			want:   `rules: json: unexpected data after the document at line 2`,
		},
		{
			name:   "two yaml documents",
			give:   "{}\n---\nflow: []\n",
			format: YAML,
			want:   `rules: yaml: want one document, found another at line 2`,
		},
		{
			name:   "yaml syntax error",
			give:   "flow:\n  - resource: a\n   threshold: 1\n",
			format: YAML,
			want:   `rules: yaml: line 1: did not find expected '-' indicator`,
		},
		{name: "unknown format", give: "{}", format: 0, want: `rules: unknown format Format(0)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode([]byte(tt.give), tt.format)
			require.Error(t, err)
			assert.Equal(t, tt.want, err.Error())
			assert.Equal(t, Set{}, got, "a failed decode returns an empty Set")
			if tt.wantRule != nil {
				var re *Error
				require.True(t, errors.As(err, &re), "error %T is not an *Error", err)
				assert.Equal(t, tt.wantRule, re)
			}
		})
	}
}

// TestDecodeJSONStrings checks that a JSON string decodes as encoding/json
// reads it, although the YAML parser reads the document: escapes JSON has
// and YAML lacks (\/, surrogate pairs), and raw characters YAML refuses or
// takes for line breaks.
func TestDecodeJSONStrings(t *testing.T) {
	for _, lit := range []string{
		`"GET \/orders"`,               // PHP's json_encode writes \/
		`"\ud83d\ude00 \u00e9 \u0000"`, // Python's json.dumps writes surrogate pairs
		`"lone \ud800 and \udc00\u0041"`,
		`"pair split \ud83d\u0041"`,
		"\"raw \x7f \u0085 \u2028 \u2029 \ufeff \uffff\"",
		"\"not utf-8: \xff\xfe\"",
		`"\\u005c and \\\/ and \"quoted\""`,
		`"` + strings.Repeat("long ", 200) + `"`, // at most DefaultMaxNameBytes
	} {
		t.Run(lit[:min(len(lit), 20)], func(t *testing.T) {
			var want string
			require.NoError(t, json.Unmarshal([]byte(lit), &want))
			doc := "{\n\t\"isolation\": [{\"resource\": " + lit + ",\r\n\t\"threshold\": 1}]}"
			got, err := Decode([]byte(doc), JSON)
			require.NoError(t, err)
			require.Equal(t, want, got.Flow[0].Resource)
		})
	}
}

// TestDecodeOutOfRangeNumbers: a number beyond float64's range (which the
// YAML parser leaves a string) is still a number, refused as out of range.
func TestDecodeOutOfRangeNumbers(t *testing.T) {
	tests := []struct {
		give   string
		format Format
		want   string
	}{
		{"flow:\n- {resource: a, threshold: 1e400}\n", YAML,
			`rules: flow rule 0 (resource "a"): Threshold: number 1e400 is out of range for a 64-bit float at line 2`},
		{`{"flow": [{"resource": "a", "threshold": -1.5E+400}]}`, JSON,
			`rules: flow rule 0 (resource "a"): Threshold: number -1.5E+400 is out of range for a 64-bit float at line 1`},
		{`{"isolation": [{"resource": "a", "threshold": 1e400}]}`, JSON,
			`rules: isolation rule 0 (resource "a"): Threshold: want a whole number that fits in 64 bits, got 1e400 at line 1`},
		{`{"isolation": [{"resource": 1e400, "threshold": 1}]}`, JSON,
			`rules: isolation rule 0: Resource: want a string, got number 1e400 (quote it) at line 1`},
		{"isolation:\n- {resource: 1e400, threshold: 1}\n", YAML,
			`rules: isolation rule 0: Resource: want a string, got number 1e400 (quote it) at line 2`},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			_, err := Decode([]byte(tt.give), tt.format)
			require.EqualError(t, err, tt.want)
		})
	}
	// Quoted, it is a string like any other.
	s, err := Decode([]byte("isolation:\n- {resource: \"1e400\", threshold: 1}\n"), YAML)
	require.NoError(t, err)
	require.Equal(t, "1e400", s.Flow[0].Resource)
}

// TestDecodeJSONWhitespace: tabs are JSON whitespace anywhere between
// tokens, though YAML refuses one that starts a line outside brackets.
func TestDecodeJSONWhitespace(t *testing.T) {
	for _, doc := range []string{
		"\t{}",
		"\t\n{}",
		"{}\n\t",
		"{\n\t\"flow\": [\n\t\t{\"resource\":\t\"a\",\t\"threshold\": 1}\n\t]\n}\n\t\n",
		" \r\n{\"flow\":[]}\r\n",
	} {
		_, err := Decode([]byte(doc), JSON)
		require.NoError(t, err, "%q", doc)
	}
	// A key's colon may be on another line, and a key may be longer than
	// the 1024 characters YAML allows a plain key.
	_, err := Decode([]byte("{\"flow\"\n: []}"), JSON)
	require.NoError(t, err)
	long := strings.Repeat("k", 4000)
	s, err := DecodeLimits{MaxNameBytes: len(long)}.Decode([]byte(`{"param": [{"resource": "a", "threshold": 1, "exceptions": {"`+long+`"`+"\n\t: 2}}]}"), JSON)
	require.NoError(t, err)
	require.Equal(t, int64(2), s.Param[0].Exceptions[long])
}

func TestDecodeBoundsHostileInput(t *testing.T) {
	// A billion-laughs document: each rule merges the one before twice, so
	// decoding rule k would visit 2^k values.
	var b strings.Builder
	b.WriteString("flow:\n- &a00 {resource: a, threshold: 1}\n")
	for i := 1; i < 40; i++ {
		fmt.Fprintf(&b, "- &a%02d {<<: [*a%02d, *a%02d], id: x}\n", i, i-1, i-1)
	}
	_, err := Decode([]byte(b.String()), YAML)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "more than 1048576 values")

	// Nesting: JSON is read to 64 levels; no rule field takes a list, so
	// deeper YAML is refused as the wrong type where it starts.
	deep := strings.Repeat("[", 200) + strings.Repeat("]", 200)
	_, err = Decode([]byte(`{"flow":`+deep+`}`), JSON)
	require.EqualError(t, err, "rules: json: nesting deeper than 64 at line 1")
	_, err = Decode([]byte(`flow: `+deep), YAML)
	require.EqualError(t, err, "rules: flow rule 0: want a map of fields, got a list at line 1")

	// A map that merges itself: merging counts no value before it recurses,
	// so the depth of merges is bounded instead (it overflowed the stack).
	_, err = Decode([]byte("flow:\n  - &a\n    <<: *a\n    resource: r\n"), YAML)
	require.EqualError(t, err, `rules: flow rule 0 (resource "r"): merge keys nested deeper than 64 (does a map merge itself?) at line 3`)
}

// manyRules returns a document of n flow rules of two fields each, about 52
// bytes and 5 values a rule in YAML, 56 bytes in JSON.
func manyRules(n int, f Format) []byte {
	var b strings.Builder
	if f == YAML {
		b.WriteString("flow:\n")
		for i := range n {
			fmt.Fprintf(&b, "  - resource: GET /api/v1/r%06d\n    threshold: 500\n", i)
		}
		return []byte(b.String())
	}
	b.WriteString("{\"flow\": [\n")
	for i := range n {
		if i > 0 {
			b.WriteString(",\n")
		}
		fmt.Fprintf(&b, "  {\"resource\": \"GET /api/v1/r%06d\", \"threshold\": 500}", i)
	}
	return []byte(b.String() + "]}\n")
}

// TestDecodeRefusesLargeDocumentBeforeParsing: a document over the byte limit
// is refused by its length, before it is parsed, with a message that names
// the limit and the knob; a 100,000-rule file is such a document by default.
func TestDecodeRefusesLargeDocumentBeforeParsing(t *testing.T) {
	for _, f := range []Format{YAML, JSON} {
		t.Run(f.String(), func(t *testing.T) {
			doc := manyRules(100_000, f)
			_, err := Decode(doc, f)
			require.EqualError(t, err, fmt.Sprintf("rules: document is %d bytes, more than the limit of 4194304 bytes; "+
				"raise DecodeLimits.MaxBytes (filestore.Config.Limits for a rule store) to read it", len(doc)))

			// Not even parsed: a broken document over the limit gets the same
			// answer, not a syntax error.
			broken := append([]byte("{[: "), bytes.Repeat([]byte{' '}, 4<<20)...)
			_, err = Decode(broken, f)
			require.ErrorContains(t, err, "rules: document is 4194308 bytes, more than the limit of 4194304 bytes")
		})
	}
}

func TestDecodeLimits(t *testing.T) {
	doc := manyRules(3, YAML) // 18 values on 7 lines
	for _, tt := range []struct {
		name   string
		limits DecodeLimits
		want   string // empty: decodes
	}{
		{"defaults", DecodeLimits{}, ""},
		{"negative means default", DecodeLimits{MaxBytes: -1, MaxValues: -1}, ""},
		{"exactly the bytes", DecodeLimits{MaxBytes: len(doc)}, ""},
		{"a byte short", DecodeLimits{MaxBytes: len(doc) - 1}, fmt.Sprintf("rules: document is %d bytes, more than the limit of %d bytes; "+
			"raise DecodeLimits.MaxBytes (filestore.Config.Limits for a rule store) to read it", len(doc), len(doc)-1)},
		{"exactly the values", DecodeLimits{MaxValues: 18}, ""},
		{"a value short", DecodeLimits{MaxValues: 17}, "rules: document has more than 17 values at line 7 (a YAML alias counts its values at every use); " +
			"raise DecodeLimits.MaxValues (filestore.Config.Limits for a rule store) to read it"},
		{"exactly the rules", DecodeLimits{MaxRules: 3}, ""},
		{"a rule short", DecodeLimits{MaxRules: 2}, "rules: flow: 3 rules, more than the limit of 2 rules of one kind at line 2; " +
			"raise DecodeLimits.MaxRules (filestore.Config.Limits for a rule store) to read them"},
		{"names exactly the bytes", DecodeLimits{MaxNameBytes: len("GET /api/v1/r000002")}, ""},
		{"a name a byte long", DecodeLimits{MaxNameBytes: len("GET /api/v1/r000002") - 1}, `rules: flow rule 0 (resource "GET /api/v1/r000000"): ` +
			"Resource: is 19 bytes, more than the limit of 18 at line 2; raise DecodeLimits.MaxNameBytes (filestore.Config.Limits for a rule store) to read it"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := tt.limits.Decode(doc, YAML)
			if tt.want != "" {
				require.EqualError(t, err, tt.want)
				return
			}
			require.NoError(t, err)
			require.Equal(t, 3, size(s))
		})
	}

	t.Run("raised for 100,000 rules", func(t *testing.T) {
		if testing.Short() || raceEnabled {
			t.Skip("decodes 5 MB: a second, ten under the race detector")
		}
		_, err := DecodeLimits{MaxBytes: 8 << 20}.Decode(manyRules(100_000, YAML), YAML)
		require.EqualError(t, err, "rules: flow: 100000 rules, more than the limit of 10000 rules of one kind at line 2; "+
			"raise DecodeLimits.MaxRules (filestore.Config.Limits for a rule store) to read them")
		s, err := DecodeLimits{MaxBytes: 8 << 20, MaxRules: 100_000}.Decode(manyRules(100_000, YAML), YAML)
		require.NoError(t, err)
		require.Equal(t, 100_000, len(s.Flow))
		require.Equal(t, Flow{Resource: "GET /api/v1/r099999", Threshold: 500}, s.Flow[99_999])
	})

	t.Run("file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "rules.yaml")
		require.NoError(t, os.WriteFile(path, doc, 0o600))
		_, err := DecodeLimits{MaxBytes: 100}.DecodeFile(path)
		require.EqualError(t, err, fmt.Sprintf("%s: rules: document is %d bytes, more than the limit of 100 bytes; "+
			"raise DecodeLimits.MaxBytes (filestore.Config.Limits for a rule store) to read it", path, len(doc)))
		var pe *PathError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, path, pe.Path)
		s, err := DecodeLimits{MaxBytes: len(doc)}.DecodeFile(path)
		require.NoError(t, err)
		require.Equal(t, 3, size(s))
	})
}

func TestEncodeRoundTrip(t *testing.T) {
	sets := map[string]Set{
		"empty":  {},
		"sample": sampleSet(),
		"awkward strings": {Flow: []Flow{
			{ID: "123", Resource: "true", Threshold: 2.5},
			{ID: "null", Resource: "line\nbreak: \"quoted\" # not a comment", Threshold: 1e11},
			{Resource: "- looks: like yaml", Threshold: 1, Metric: Concurrency},
		}},
	}
	for name, s := range sets {
		for _, f := range []Format{JSON, YAML} {
			t.Run(name+"/"+f.String(), func(t *testing.T) {
				data, err := Encode(s, f)
				require.NoError(t, err)
				got, err := Decode(data, f)
				require.NoError(t, err, "encoded document:\n%s", data)
				assert.Equal(t, s, got)
			})
		}
	}
}

func TestEncode(t *testing.T) {
	s := Set{Flow: []Flow{{ID: "paced", Resource: "POST /orders", Threshold: 20, Throttle: &Throttle{MaxQueueing: 1500 * time.Millisecond}}}}
	gotYAML, err := Encode(s, YAML)
	require.NoError(t, err)
	assert.Equal(t, `flow:
  - id: paced
    resource: POST /orders
    threshold: 20
    throttle:
      maxQueueing: 1.5s
`, string(gotYAML))
	gotJSON, err := Encode(s, JSON)
	require.NoError(t, err)
	assert.Equal(t, `{
  "flow": [
    {
      "id": "paced",
      "resource": "POST /orders",
      "threshold": 20,
      "throttle": {
        "maxQueueing": "1.5s"
      }
    }
  ]
}
`, string(gotJSON))

	_, err = Encode(Set{Flow: []Flow{{Resource: "\xff"}}}, JSON)
	require.EqualError(t, err, `rules: encode: flow: resource: string "\xff" is not valid UTF-8`)
	_, err = Encode(Set{}, 7)
	require.EqualError(t, err, "rules: unknown format Format(7)")
}

// TestTagsAgree checks that every rule type's json tags say what its yaml
// tags say, since the decoder and the encoder read the yaml tags for both
// formats and users may marshal the types with encoding/json.
func TestTagsAgree(t *testing.T) {
	for _, typ := range []reflect.Type{
		reflect.TypeOf(Set{}), reflect.TypeOf(Flow{}),
		reflect.TypeOf(System{}), reflect.TypeOf(CircuitBreaker{}), reflect.TypeOf(Param{}),
	} {
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			if !f.IsExported() {
				continue
			}
			assert.Equal(t, f.Tag.Get("json"), f.Tag.Get("yaml"), "%s.%s: json and yaml tags differ", typ.Name(), f.Name)
			assert.NotEmpty(t, f.Tag.Get("json"), "%s.%s has no json tag", typ.Name(), f.Name)
		}
	}
	// The document Decode reads has Set's kinds, with the same keys and
	// types, and isolation.
	st, dt := reflect.TypeOf(Set{}), reflect.TypeOf(document{})
	require.Equal(t, st.NumField()+1, dt.NumField())
	for i := 0; i < st.NumField(); i++ {
		f, ok := dt.FieldByName(st.Field(i).Name)
		require.True(t, ok, st.Field(i).Name)
		assert.Equal(t, fieldName(st.Field(i)), f.Tag.Get("yaml"))
		assert.Equal(t, st.Field(i).Type, f.Type)
	}
}

func TestDecodeFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	for _, name := range []string{"rules.yaml", "rules.YML"} {
		got, err := DecodeFile(write(name, sampleYAML))
		require.NoError(t, err)
		assert.Equal(t, sampleSet(), got)
	}
	got, err := DecodeFile(write("rules.json", sampleJSON))
	require.NoError(t, err)
	assert.Equal(t, sampleSet(), got)

	bad := write("bad.yaml", "flow:\n- {resource: a, threshold: -1}\n")
	_, err = DecodeFile(bad)
	require.EqualError(t, err, bad+`: rules: flow rule 0 (resource "a"): Threshold: must be a positive number, got -1`)
	var re *Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "Threshold", re.Field)

	_, err = DecodeFile(write("rules.toml", ""))
	require.EqualError(t, err, `rules: cannot tell the format of "`+filepath.Join(dir, "rules.toml")+`": want a .json, .yaml or .yml file`)
	_, err = DecodeFile(filepath.Join(dir, "missing.yaml"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestSeedCorpus(t *testing.T) {
	bad := map[string]string{
		"typo.yaml":         "unknown field",
		"invalid.json":      "must be a positive number",
		"int-duration.yaml": "a bare number has no unit",
		"syntax.json":       "invalid character",
		"out-of-range.yaml": "number 1e400 is out of range",
		"duplicate.yaml":    "duplicates rule 0",
	}
	seeds, err := filepath.Glob(filepath.Join("testdata", "seed", "*"))
	require.NoError(t, err)
	for _, p := range seeds {
		t.Run(filepath.Base(p), func(t *testing.T) {
			s, err := DecodeFile(p)
			if want, ok := bad[filepath.Base(p)]; ok {
				require.ErrorContains(t, err, want)
				return
			}
			require.NoError(t, err)
			if filepath.Base(p) != "empty.json" {
				assert.NotZero(t, size(s))
			}
		})
	}
}

// BenchmarkDecodeJSONList decodes a 4 MiB JSON list of numbers (refused
// after MaxValues): reading JSON must stay linear in the document, as the
// line of each value is counted once (counting from the start for every
// value took 47 s here, against 0.8 s).
func BenchmarkDecodeJSONList(b *testing.B) {
	doc := []byte(`{"flow": [` + strings.Repeat("1,", DefaultMaxBytes/2-7) + `1]}`)
	b.ReportAllocs()
	for b.Loop() {
		_, _ = Decode(doc, JSON)
	}
}

// size is the number of rules of all kinds in s.
func size(s Set) int { return len(s.Flow) + len(s.System) + len(s.CircuitBreaker) + len(s.Param) }
