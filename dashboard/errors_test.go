package dashboard_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/rules"
)

// TestErrorsNameFormLabels: a refused rule names the field as the form
// and the rule file label it ("tiers", "cluster.localThreshold"), its
// reason too, never a Go field or a library setting.
func TestErrorsNameFormLabels(t *testing.T) {
	f := newFleet(t, nil)
	ed := signIn(t, f.srv, "ed")
	tests := []struct {
		give, wantField, wantReason string
	}{
		{"flow:\n  - resource: a\n    threshold: 10\n    metric: concurrency\n    tiers: [{above: 100, below: 80, threshold: 5}]\n", "tiers", ""},
		{"flow:\n  - resource: a\n    threshold: 10\n    maxQueueing: 1s\n", "maxQueueing", "write throttle: {maxQueueing: 1s}"},
		{"flow:\n  - resource: a\n    threshold: 10\n    throttle: {maxQueueing: 2h}\n", "throttle.maxQueueing", "must be in [0, 1h]"},
		{"flow:\n  - resource: a\n    threshold: 10\n    bucket: {}\n    warmUp: {period: 1m}\n", "warmUp", "contradicts bucket"},
		{"flow:\n  - resource: a\n    threshold: 10\n    cluster: {localThreshold: 0.5}\n", "cluster.localThreshold", ""},
		{"flow:\n  - resource: a\n    metric: concurrency\n    threshold: 4\n    adaptive: {min: 5, max: 2}\n", "adaptive.max", "must be at least min"},
	}
	for _, tt := range tests {
		code, body := ed.post("/apps/shop/rules", url.Values{"base": {"1"}, "doc": {tt.give}})
		require.Equal(t, http.StatusUnprocessableEntity, code, tt.give)
		require.Contains(t, body, `<strong class="field">`+tt.wantField+`</strong>`, tt.give)
		if tt.wantReason != "" {
			require.Contains(t, body, tt.wantReason, tt.give)
		}
		for _, goName := range []string{"Tiers", "MaxQueueing", "LocalThreshold", "Adaptive.Max", "Behavior", "Min (", "Bucket", "WarmUp"} {
			require.NotContains(t, body, goName, tt.give)
		}
	}
	// A library's limit is named plainly.
	many := "flow:\n" + strings.Repeat("  - {resource: a, threshold: 1}\n", rules.DefaultMaxRules+1)
	_, body := ed.post("/apps/shop/rules", url.Values{"base": {"1"}, "doc": {many}})
	require.NotContains(t, body, "DecodeLimits")
	require.NotContains(t, body, "WithDecodeLimits")
	require.Equal(t, int64(1), version(t, f.store, "shop"))
}

// TestRefusedDocumentNotEchoed: a document over the limit is refused
// with the limit in plain words, and neither it nor a large invalid one
// comes back whole: the page quotes its beginning and the editor holds
// the version in force.
func TestRefusedDocumentNotEchoed(t *testing.T) {
	f := newFleet(t, nil)
	ed := signIn(t, f.srv, "ed")
	line := "#" + strings.Repeat("x", 998) + "\n" // little to escape in the form
	over := "flow:\n  - {resource: a, threshold: 1}\n" + strings.Repeat(line, rules.DefaultMaxBytes/len(line)+10)
	code, body := ed.post("/apps/shop/rules", url.Values{"base": {"1"}, "doc": {over}})
	require.Equal(t, http.StatusUnprocessableEntity, code)
	require.Contains(t, body, "the document is 4.0 MiB, larger than the limit of 4 MiB")
	require.NotContains(t, body, "DecodeLimits")
	require.Less(t, len(body), 64<<10, "the document is not echoed back")
	require.Contains(t, body, `id="refused-doc"`)
	require.Contains(t, body, "resource: a, threshold: 1", "its beginning is quoted")
	require.Contains(t, body, "GET /api", "the editor holds the version in force")

	// A request over the form's limit: refused before it is read whole.
	code, body = ed.post("/apps/shop/rules", url.Values{"base": {"1"}, "doc": {strings.Repeat("a", rules.DefaultMaxBytes+128<<10)}})
	require.Equal(t, http.StatusRequestEntityTooLarge, code)
	require.Contains(t, body, "a rule document may have 4 MiB")
	require.Less(t, len(body), 64<<10)

	// 1 MiB within the limit, with an invalid rule at its end.
	bad := "flow:\n  - {resource: a, threshold: 1}\n" + strings.Repeat(line, 1<<20/len(line)) + "  - {resource: b, threshold: -1}\n"
	code, body = ed.post("/apps/shop/rules", url.Values{"base": {"1"}, "doc": {bad}})
	require.Equal(t, http.StatusUnprocessableEntity, code)
	require.Contains(t, body, `<strong class="field">threshold</strong>`)
	require.Less(t, len(body), 64<<10, "the document is not echoed back")
	require.Equal(t, int64(1), version(t, f.store, "shop"))

	// A small refused document is kept in the editor to fix.
	_, body = ed.post("/apps/shop/rules", url.Values{"base": {"1"}, "doc": {"flow:\n  - resource: kept\n    threshold: -1\n"}})
	require.Contains(t, body, "resource: kept")
	require.NotContains(t, body, `id="refused-doc"`)
}
