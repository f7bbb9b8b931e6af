package rules

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAuthorityValidate(t *testing.T) {
	tests := []struct {
		name       string
		give       Authority
		wantField  string // "" for valid
		wantReason string
	}{
		{"allow list", Authority{Resource: "r", Allow: []string{"a", "b"}}, "", ""},
		{"deny list", Authority{Resource: "r", Deny: []string{"a"}}, "", ""},
		{"strict alone", Authority{Resource: "r", Strict: true}, "", ""},
		{"strict allow list", Authority{Resource: "r", Allow: []string{"a"}, Strict: true}, "", ""},
		{"longest caller", Authority{Resource: "r", Allow: []string{strings.Repeat("x", 256)}}, "", ""},
		{"no resource", Authority{Allow: []string{"a"}}, "Resource", "must not be empty"},
		{"both lists", Authority{Resource: "r", Allow: []string{"a"}, Deny: []string{"b"}}, "Deny", "must be empty when Allow is set"},
		{"refuses nothing", Authority{Resource: "r"}, "Allow", "refuses nothing"},
		{"empty caller", Authority{Resource: "r", Allow: []string{"a", ""}}, "Allow", "caller 1 is empty"},
		{"caller too long", Authority{Resource: "r", Deny: []string{strings.Repeat("x", 257)}}, "Deny", "257 bytes, more than 256"},
		{"control character", Authority{Resource: "r", Allow: []string{"a\tb"}}, "Allow", "control character 0x9 at byte 1"},
		{"twice", Authority{Resource: "r", Allow: []string{"a", "b", "a"}}, "Allow", `lists caller "a" twice`},
		{"invalid UTF-8", Authority{Resource: "r", Allow: []string{"a\xff"}}, "Allow", "not valid UTF-8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := (&Set{Authority: []Authority{tc.give}}).Validate()
			if tc.wantField == "" {
				require.NoError(t, err)
				return
			}
			var re *Error
			require.True(t, errors.As(err, &re), "%v", err)
			assert.Equal(t, "authority", re.Kind)
			assert.Equal(t, 0, re.Index)
			assert.Equal(t, tc.wantField, re.Field)
			assert.Contains(t, re.Error(), tc.wantReason)
		})
	}
}

func TestAuthorityOnePerResource(t *testing.T) {
	err := (&Set{Authority: []Authority{{Resource: "r", Strict: true}, {Resource: "s", Strict: true}, {Resource: "r", Deny: []string{"x"}}}}).Validate()
	var re *Error
	require.True(t, errors.As(err, &re))
	assert.Equal(t, 2, re.Index)
	assert.Contains(t, re.Error(), "duplicates rule 0")
}

// TestAuthorityFile: an authority rule reads from and writes to JSON and
// YAML, and an unknown field is refused with a suggestion.
func TestAuthorityFile(t *testing.T) {
	doc := `authority:
  - id: pay-callers
    resource: POST /pay
    allow: [checkout, billing]
    strict: true
  - resource: GET /reports
    deny: [scraper]
`
	s, err := Decode([]byte(doc), YAML)
	require.NoError(t, err)
	want := []Authority{
		{ID: "pay-callers", Resource: "POST /pay", Allow: []string{"checkout", "billing"}, Strict: true},
		{Resource: "GET /reports", Deny: []string{"scraper"}},
	}
	require.Equal(t, want, s.Authority)
	for _, f := range []Format{JSON, YAML} {
		b, err := Encode(s, f)
		require.NoError(t, err)
		back, err := Decode(b, f)
		require.NoError(t, err, "%s", b)
		require.Equal(t, s, back)
	}
	_, err = Decode([]byte(`{"authority": [{"resource": "r", "alow": ["a"]}]}`), JSON)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "allow")
	_, err = Decode([]byte(`{"authority": [{"resource": "r", "allow": ["a"], "deny": ["b"]}]}`), JSON)
	var re *Error
	require.True(t, errors.As(err, &re), "%v", err)
	assert.Equal(t, "Deny", re.Field)
}
