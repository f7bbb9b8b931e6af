package rules

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestDecodeMemoryIsBounded decodes documents of DefaultMaxBytes shaped to
// cost the most per byte, and a rule file, and checks what decoding
// allocates in all (which bounds its peak from above) against the multiple
// of the document docs/design/limits.md states: at most 240 times the document
// (a flow map of empty keys, {a,a,a,...}, the worst shape measured: 225
// times; its peak of live memory, sampled, 190 times), and 48 times for a
// rule file (measured 38 and 41 on 2026-12-02).
func TestDecodeMemoryIsBounded(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("decodes 4 MiB documents; heap figures need no race detector")
	}
	n := DefaultMaxBytes
	tests := []struct {
		name  string
		f     Format
		doc   []byte
		bound float64
	}{
		{"flow map of keys", YAML, []byte("{" + strings.Repeat("a,", n/2-2) + "a}"), 240},
		{"flow list", YAML, []byte("flow: [" + strings.Repeat("a,", n/2-5) + "a]"), 240},
		{"block list", YAML, []byte("flow:\n" + strings.Repeat("- a\n", n/4-2)), 240},
		{"json list", JSON, []byte(`{"flow": [` + strings.Repeat("1,", n/2-7) + `1]}`), 240},
		{"json empty maps", JSON, []byte("[" + strings.Repeat("{},", n/3-1) + "{}]"), 240},
		{"rule file, yaml", YAML, manyRules(9000, YAML), 48},
		{"rule file, json", JSON, manyRules(9000, JSON), 48},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ms runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms)
			before := ms.TotalAlloc
			_, _ = Decode(tt.doc, tt.f)
			runtime.ReadMemStats(&ms)
			ratio := float64(ms.TotalAlloc-before) / float64(len(tt.doc))
			t.Logf("%d bytes: %.0f bytes allocated per byte", len(tt.doc), ratio)
			assert.LessOrEqual(t, ratio, tt.bound, fmt.Sprintf("%s allocates more per byte than docs/design/limits.md states", tt.name))
		})
	}
}
