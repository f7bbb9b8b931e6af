package rules

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClusterAppsValidate: Cluster.Apps, on a flow and on a param rule, is
// checked as an authority rule's callers are, and refused on a per-caller
// rule; the error names the rule and the field.
func TestClusterAppsValidate(t *testing.T) {
	many := make([]string, 1<<16+1)
	for i := range many {
		many[i] = fmt.Sprint("app-", i)
	}
	tests := []struct {
		name       string
		apps       []string
		caller     string
		wantReason string // "" for valid
	}{
		{"none", nil, "", ""},
		{"two", []string{"checkout", "billing"}, "", ""},
		{"longest caller", []string{strings.Repeat("x", 256)}, "", ""},
		{"empty caller", []string{"a", ""}, "", "caller 1 is empty"},
		{"caller too long", []string{strings.Repeat("x", 257)}, "", "257 bytes, more than 256"},
		{"control character", []string{"a\tb"}, "", "control character 0x9 at byte 1"},
		{"invalid UTF-8", []string{"a\xff"}, "", "not valid UTF-8"},
		{"twice", []string{"a", "b", "a"}, "", `lists caller "a" twice`},
		{"too many", many, "", "must list at most 65536 callers, got 65537"},
		{"per-caller rule", []string{"a"}, "partner", "has no meaning on a per-caller rule"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			flow := Flow{Resource: "r", Threshold: 10, Caller: tc.caller, Cluster: &Cluster{Apps: tc.apps}}
			sets := map[string]Set{"flow": {Flow: []Flow{{Resource: "x", Threshold: 1}, flow}}}
			if tc.caller == "" {
				sets["param"] = Set{Param: []Param{{Resource: "x", Key: "k", Threshold: 1},
					{Resource: "r", Key: "user", Threshold: 5, Cluster: &Cluster{Apps: tc.apps}}}}
			}
			for kind, s := range sets {
				err := s.Validate()
				if tc.wantReason == "" {
					require.NoError(t, err, kind)
					continue
				}
				var re *Error
				require.True(t, errors.As(err, &re), "%s: %v", kind, err)
				assert.Equal(t, kind, re.Kind)
				assert.Equal(t, 1, re.Index, kind)
				assert.Equal(t, "Cluster.Apps", re.Field, kind)
				assert.Contains(t, re.Error(), tc.wantReason, kind)
			}
		})
	}
}

// TestClusterAppsFile: apps reads from and writes to JSON and YAML.
func TestClusterAppsFile(t *testing.T) {
	doc := `flow:
  - resource: POST /pay
    threshold: 100
    cluster: {strict: true, apps: [checkout, billing]}
param:
  - resource: POST /post
    key: user
    threshold: 5
    cluster:
      apps: [forum]
`
	s, err := Decode([]byte(doc), YAML)
	require.NoError(t, err)
	require.Len(t, s.Flow, 1)
	assert.Equal(t, &Cluster{Strict: true, Apps: []string{"checkout", "billing"}}, s.Flow[0].Cluster)
	assert.Equal(t, []string{"forum"}, s.Param[0].Cluster.Apps)
	for _, f := range []Format{JSON, YAML} {
		b, err := Encode(s, f)
		require.NoError(t, err)
		assert.Contains(t, string(b), "apps")
		back, err := Decode(b, f)
		require.NoError(t, err, "%s", b)
		require.Equal(t, s, back)
	}
	_, err = Decode([]byte(`{"flow": [{"resource": "r", "threshold": 1, "cluster": {"apps": ["a", "a"]}}]}`), JSON)
	var re *Error
	require.True(t, errors.As(err, &re), "%v", err)
	assert.Equal(t, "Cluster.Apps", re.Field)
}
