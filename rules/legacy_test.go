package rules

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var updateSections = flag.Bool("update-sections", false, "write testdata/flat/sections/* from Encode")

// TestFlatFilesDecodeIntoSections: every rule file of the release before
// the strategy sections (testdata/flat) decodes; Encode writes it, in its
// format, in the sections' shape only (testdata/flat/sections, reviewed by
// hand), which decodes to the same Set; the other format round-trips too. The
// engine's decisions on these files are compared with that release's in
// the root package (TestPreviousReleaseRuleFilesDecideAsBefore).
func TestFlatFilesDecodeIntoSections(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "flat", "*.*"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			s, err := DecodeFile(f)
			require.NoError(t, err)
			format, err := FormatOf(f)
			require.NoError(t, err)
			enc, err := Encode(s, format)
			require.NoError(t, err)
			for _, flat := range []string{"warm-up", "token-bucket", "behavior", "warmUpPeriod"} {
				assert.NotContains(t, string(enc), flat, "Encode wrote a flat field")
			}
			golden := filepath.Join("testdata", "flat", "sections", filepath.Base(f))
			if *updateSections {
				require.NoError(t, os.WriteFile(golden, enc, 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err)
			assert.Equal(t, string(want), string(enc))
			again, err := Decode(want, format)
			require.NoError(t, err)
			assert.Equal(t, s, again, "the sections' shape means what the flat fields meant")
			other := map[Format]Format{JSON: YAML, YAML: JSON}[format]
			enc, err = Encode(s, other)
			require.NoError(t, err)
			again, err = Decode(enc, other)
			require.NoError(t, err)
			assert.Equal(t, s, again, "round trip through %v", other)
		})
	}
}

// TestFlatFieldsMapOntoSections: each flat field of earlier documents, in
// both formats, through a YAML merge key too, gives the section it maps
// onto, as if the section had been written.
func TestFlatFieldsMapOntoSections(t *testing.T) {
	for _, tt := range []struct {
		name, flat, sections string
		format               Format
		want                 Set
	}{
		{"warm-up", "flow: [{resource: r, threshold: 9, strategy: warm-up, warmUpPeriod: 1m, coldFactor: 4}]",
			"flow: [{resource: r, threshold: 9, warmUp: {period: 1m, coldFactor: 4}}]", YAML,
			Set{Flow: []Flow{{Resource: "r", Threshold: 9, WarmUp: &WarmUp{Period: time.Minute, ColdFactor: 4}}}}},
		{"token bucket", `{"flow": [{"resource": "r", "threshold": 9, "strategy": "token-bucket", "burst": 2}]}`,
			`{"flow": [{"resource": "r", "threshold": 9, "bucket": {"burst": 2}}]}`, JSON,
			Set{Flow: []Flow{{Resource: "r", Threshold: 9, Bucket: &Bucket{Burst: 2}}}}},
		{"token bucket, burst left out", "flow: [{resource: r, threshold: 9, strategy: token-bucket}]",
			"flow: [{resource: r, threshold: 9, bucket: {}}]", YAML, Set{Flow: []Flow{{Resource: "r", Threshold: 9, Bucket: &Bucket{}}}}},
		{"throttle", "flow: [{resource: r, threshold: 9, behavior: throttle, maxQueueing: 1s}]",
			"flow: [{resource: r, threshold: 9, throttle: {maxQueueing: 1s}}]", YAML,
			Set{Flow: []Flow{{Resource: "r", Threshold: 9, Throttle: &Throttle{MaxQueueing: time.Second}}}}},
		{"throttle, no queueing", `{"flow": [{"resource": "r", "threshold": 9, "behavior": "throttle"}]}`,
			`{"flow": [{"resource": "r", "threshold": 9, "throttle": {}}]}`, JSON,
			Set{Flow: []Flow{{Resource: "r", Threshold: 9, Throttle: &Throttle{}}}}},
		{"warm-up throttle", "flow: [{resource: r, threshold: 9, strategy: warm-up, warmUpPeriod: 5s, behavior: throttle}]",
			"flow: [{resource: r, threshold: 9, warmUp: {period: 5s}, throttle: {}}]", YAML,
			Set{Flow: []Flow{{Resource: "r", Threshold: 9, WarmUp: &WarmUp{Period: 5 * time.Second}, Throttle: &Throttle{}}}}},
		{"the defaults", "flow: [{resource: r, threshold: 9, strategy: direct, behavior: reject}]",
			"flow: [{resource: r, threshold: 9}]", YAML, Set{Flow: []Flow{{Resource: "r", Threshold: 9}}}},
		{"param throttle", "param: [{resource: r, threshold: 9, behavior: throttle, maxQueueing: 2s}]",
			"param: [{resource: r, threshold: 9, throttle: {maxQueueing: 2s}}]", YAML,
			Set{Param: []Param{{Resource: "r", Threshold: 9, Throttle: &Throttle{MaxQueueing: 2 * time.Second}}}}},
		{"param reject keeps its burst", "param: [{resource: r, threshold: 9, burst: 3, behavior: reject}]",
			"param: [{resource: r, threshold: 9, burst: 3}]", YAML, Set{Param: []Param{{Resource: "r", Threshold: 9, Burst: 3}}}},
		{"merge key", "flow:\n  - &a {resource: a, threshold: 9, strategy: warm-up, warmUpPeriod: 1m}\n  - <<: *a\n    resource: b\n    coldFactor: 5\n",
			"flow: [{resource: a, threshold: 9, warmUp: {period: 1m}}, {resource: b, threshold: 9, warmUp: {period: 1m, coldFactor: 5}}]", YAML,
			Set{Flow: []Flow{
				{Resource: "a", Threshold: 9, WarmUp: &WarmUp{Period: time.Minute}},
				{Resource: "b", Threshold: 9, WarmUp: &WarmUp{Period: time.Minute, ColdFactor: 5}},
			}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode([]byte(tt.flat), tt.format)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			got, err = Decode([]byte(tt.sections), tt.format)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestFlatFieldErrors: a flat field beside the section it maps onto, a flat
// field without the strategy or behavior it belongs to, and an unknown
// value are refused, naming the rule, the field and the line.
func TestFlatFieldErrors(t *testing.T) {
	for _, tt := range []struct{ name, doc, want string }{
		{"strategy beside its section", "flow:\n- resource: r\n  threshold: 9\n  strategy: warm-up\n  warmUpPeriod: 1m\n  warmUp: {period: 1m}\n",
			`rules: flow rule 0 (resource "r"): Strategy: is the flat field of earlier releases; beside a warmUp or bucket section, leave it out at line 2`},
		{"strategy direct beside a bucket", "flow: [{resource: r, threshold: 9, strategy: direct, bucket: {burst: 2}}]",
			`rules: flow rule 0 (resource "r"): Strategy: is the flat field of earlier releases; beside a warmUp or bucket section, leave it out at line 1`},
		{"behavior beside its section", "flow: [{resource: r, threshold: 9, behavior: throttle, throttle: {}}]",
			`rules: flow rule 0 (resource "r"): Behavior: is the flat field of earlier releases; beside a throttle section, leave it out at line 1`},
		{"param behavior beside its section", "param: [{resource: r, threshold: 9, behavior: reject, throttle: {}}]",
			`rules: param rule 0 (resource "r"): Behavior: is the flat field of earlier releases; beside a throttle section, leave it out at line 1`},
		{"period without warm-up", "flow: [{resource: r, threshold: 9, warmUpPeriod: 1m}]",
			`rules: flow rule 0 (resource "r"): WarmUpPeriod: is only used with strategy warm-up; write warmUp: {period: 1m0s} at line 1`},
		{"cold factor with token bucket", "flow: [{resource: r, threshold: 9, strategy: token-bucket, coldFactor: 4}]",
			`rules: flow rule 0 (resource "r"): ColdFactor: is only used with strategy warm-up; write it in the warmUp section at line 1`},
		{"burst without token bucket", "flow: [{resource: r, threshold: 9, burst: 4}]",
			`rules: flow rule 0 (resource "r"): Burst: is only used with strategy token-bucket; write bucket: {burst: 4} at line 1`},
		{"queueing without throttle", "flow: [{resource: r, threshold: 9, maxQueueing: 1s}]",
			`rules: flow rule 0 (resource "r"): MaxQueueing: is only used with behavior throttle; write throttle: {maxQueueing: 1s} at line 1`},
		{"queueing beside the section", "param: [{resource: r, threshold: 9, maxQueueing: 1s, throttle: {}}]",
			`rules: param rule 0 (resource "r"): MaxQueueing: is only used with behavior throttle; write throttle: {maxQueueing: 1s} at line 1`},
		{"unknown strategy", "flow: [{resource: r, threshold: 9}, {resource: s, threshold: 9, strategy: WARM_UP}]",
			`rules: flow rule 1 (resource "s"): Strategy: unknown value "WARM_UP" (want one of direct, warm-up, token-bucket) at line 1`},
		{"unknown behavior", "flow: [{resource: r, threshold: 9, behavior: pace}]",
			`rules: flow rule 0 (resource "r"): Behavior: unknown value "pace" (want one of reject, throttle) at line 1`},
		{"strategy of the wrong type", "flow: [{resource: r, threshold: 9, strategy: 3}]",
			`rules: flow rule 0 (resource "r"): Strategy: want a string, got number 3 (quote it) at line 1`},
		{"flat field given twice", "flow:\n- {resource: r, threshold: 9, burst: 1, strategy: token-bucket, burst: 2}\n",
			`rules: flow rule 0 (resource "r"): Burst: given twice, at lines 2 and 2`},
		{"flat field of another kind", "param: [{resource: r, threshold: 9, strategy: warm-up}]",
			`rules: param rule 0 (resource "r"): unknown field "strategy" at line 1`},
		{"flat field inside a section", "flow: [{resource: r, threshold: 9, cluster: {behavior: throttle}}]",
			`rules: flow rule 0 (resource "r"): unknown field "behavior" at line 1`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Decode([]byte(tt.doc), YAML)
			require.EqualError(t, err, tt.want)
			assert.Equal(t, Set{}, s)
			var re *Error
			require.True(t, errors.As(err, &re))
		})
	}
}
