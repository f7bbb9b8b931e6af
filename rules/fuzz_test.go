package rules

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FuzzDecode feeds arbitrary documents to Decode in both formats. Decode must
// never panic; a document it accepts must validate, and encoding the result
// and decoding that again must give the same Set. The seed corpus is
// testdata/seed/* (JSON and YAML rule files, good and bad) plus
// testdata/fuzz/FuzzDecode.
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
		if err != nil {
			assert.Equal(t, Set{}, s)
			return
		}
		require.NoError(t, s.Validate(), "Decode accepted an invalid set")
		for _, out := range []Format{JSON, YAML} {
			enc, err := Encode(s, out)
			require.NoError(t, err, "Encode(%v) of a decoded set", out)
			again, err := Decode(enc, out)
			require.NoError(t, err, "Decode of the %v encoding:\n%s", out, enc)
			require.Equal(t, s, again, "round trip through %v:\n%s", out, enc)
		}
	})
}
