package dashboard_test

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/rules"
)

// TestRuleSkeletonsValid: each "add a rule" button of the editor inserts a
// rule that decodes once its resource is named.
func TestRuleSkeletonsValid(t *testing.T) {
	js, err := os.ReadFile("web/static/app.js")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?s)const skeletons = \{(.*?)\};`).FindSubmatch(js)
	require.NotNil(t, m)
	entries := regexp.MustCompile(`(\w+): ("(?:[^"\\]|\\.)*")`).FindAllSubmatch(m[1], -1)
	var kinds []string
	for _, e := range entries {
		kind := string(e[1])
		text, err := strconv.Unquote(string(e[2]))
		require.NoError(t, err, kind)
		doc := kind + ":\n" + strings.ReplaceAll(text, "NAME", "GET /x")
		set, err := rules.Decode([]byte(doc), rules.YAML)
		require.NoError(t, err, doc)
		require.Equal(t, 1, len(set.Flow)+len(set.System)+len(set.CircuitBreaker)+len(set.Param), doc)
		kinds = append(kinds, kind)
	}
	require.Equal(t, []string{"flow", "system", "circuitBreaker", "param"}, kinds)
}
