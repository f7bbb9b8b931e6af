package dashboard_test

import (
	"html"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQuotaEditValues: a flow and a param rule with a calendar quota are
// saved from a rule document, and "edit" carries their quota section.
func TestQuotaEditValues(t *testing.T) {
	fl := newFleet(t, nil)
	c := signIn(t, fl.srv, "ed")
	doc := "flow:\n  - resource: api\n    threshold: 10000\n    quota: {period: month, zone: Europe/Berlin}\n" +
		"param:\n  - resource: api\n    threshold: 100\n    quota: {period: week, weekStart: sunday}\n    cluster: {}\n"
	code, body := c.post("/apps/shop/rules", map[string][]string{"doc": {doc}, "base": {"1"}})
	require.Equal(t, 303, code, body)
	code, page := c.get("/apps/shop/rules")
	require.Equal(t, 200, code)
	var vals []string
	for _, m := range regexp.MustCompile(`data-values="([^"]*)"`).FindAllStringSubmatch(page, -1) {
		vals = append(vals, html.UnescapeString(m[1]))
	}
	require.Equal(t, []string{
		`{"quota":"on","quota.period":"month","quota.zone":"Europe/Berlin","resource":"api","threshold":"10000"}`,
		`{"cluster":"on","quota":"on","quota.period":"week","quota.weekStart":"sunday","resource":"api","threshold":"100"}`,
	}, vals)
	// An unknown zone is refused naming the rule and the field.
	code, body = c.post("/apps/shop/rules", map[string][]string{"doc": {"flow:\n  - resource: api\n    threshold: 5\n    quota: {period: day, zone: Mars/Base}\n"}, "base": {"2"}})
	require.NotEqual(t, 303, code)
	require.Contains(t, body, `<strong class="field">quota.zone</strong>`)
	require.Contains(t, body, "unknown time zone")
}
