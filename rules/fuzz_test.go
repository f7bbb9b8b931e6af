package rules

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
