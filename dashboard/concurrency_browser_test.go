package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/filestore"
	"github.com/sluice-go/sluice/dashboard"
	"github.com/sluice-go/sluice/dashboard/internal/memstore"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// TestBrowserConcurrencyForm: concurrency flow rules have a form of their
// own (the fields that apply to requests in flight, the metric written
// for the user): a threshold that is not a whole number, or below 1, is
// refused in the form naming its label; a rule the server refuses (an
// adaptive section whose max is below its min) is shown with the form's
// field label; a valid one is saved as a flow rule of the concurrency
// metric for a hostile resource name, and "Edit" opens it in that form.
// The views name it "concurrency 8 in flight" and its refusals "blocked
// by concurrency limit", not "flow".
func TestBrowserConcurrencyForm(t *testing.T) {
	browserTest(t)
	ctx := newBrowser(t)
	bg := context.Background()
	tel := memstore.New(time.Now)
	now := time.Now().Unix()
	for s := now - 5; s <= now; s++ {
		f := cluster.Frame{App: "shop", Instance: "shop-1", Second: s}
		rs := cluster.ResourceSecond{Resource: hostileResource, Second: stat.Second{Pass: 8, Block: 3}, Concurrency: 8}
		rs.BlockedBy[sluice.BlockFlow] = 3
		f.Resources = []cluster.ResourceSecond{rs}
		require.NoError(t, tel.Publish(bg, f, 100, time.Hour))
	}
	rs, err := filestore.Open(t.TempDir(), filestore.Config{})
	require.NoError(t, err)
	_, err = rs.Save(bg, "shop", 0, cluster.RuleVersion{Doc: []byte("flow:\n  - resource: seed\n    threshold: 1\n"), Author: "seed"})
	require.NoError(t, err)
	d, err := dashboard.New(dashboard.Config{Rules: rs, Telemetry: tel, Users: testUsers(t)})
	require.NoError(t, err)
	defer d.Close()
	web := httptest.NewServer(d)
	defer web.Close()
	browserLogin(t, ctx, web.URL, "ed")

	var options, inputs []string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(web.URL+"/apps/shop/rules"),
		chromedp.WaitVisible("#form-flow", chromedp.ByID),
		chromedp.Evaluate(`[...document.querySelectorAll("#form-kind option")].map((o) => o.value + "=" + o.textContent)`, &options),
		chromedp.Evaluate(`[...document.querySelectorAll("#form-concurrency [name]")].map((e) => e.name)`, &inputs),
	))
	require.Contains(t, options, "concurrency=concurrency (requests in flight)")
	require.Equal(t, []string{"metric", "id", "resource", "threshold", "refResource", "cluster", "cluster.fallback",
		"cluster.localThreshold", "cluster.apps", "shadow", "adaptive", "adaptive.min", "adaptive.max",
		"adaptive.initial", "adaptive.window", "adaptive.tolerance", "adaptive.probeInterval"}, inputs)

	// fill chooses the concurrency form and sets its fields as a user
	// would, then adds the rule to the text; it returns the form's error.
	fill := func(vals map[string]string) string {
		t.Helper()
		var msg string
		js := `(() => {
			const sel = document.getElementById("form-kind"); sel.value = "concurrency"; sel.dispatchEvent(new Event("change"));
			const f = document.getElementById("form-concurrency"); f.reset();
			for (const [k, v] of Object.entries(` + mustJSON(t, vals) + `)) {
				const e = f.elements.namedItem(k);
				if (e.type === "checkbox") e.checked = v === "on"; else e.value = v;
				e.dispatchEvent(new Event("change", { bubbles: true }));
			}
			f.querySelector("button.form-add").click();
			const m = f.querySelector(".form-error");
			return m.hidden ? "" : m.textContent;
		})()`
		require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(js, &msg)))
		return msg
	}
	var docText string
	require.NoError(t, chromedp.Run(ctx, chromedp.Value("#doc", &docText, chromedp.ByID)))
	before := docText
	require.Equal(t, `threshold (most in flight): "2.5" is not a whole number`, fill(map[string]string{"resource": "x", "threshold": "2.5"}))
	require.Equal(t, `threshold (most in flight): must be at least 1, got 0`, fill(map[string]string{"resource": "x", "threshold": "0"}))
	require.Equal(t, `threshold (most in flight): set it (or the adaptive section)`, fill(map[string]string{"resource": "x"}))
	require.NoError(t, chromedp.Run(ctx, chromedp.Value("#doc", &docText, chromedp.ByID)))
	require.Equal(t, before, docText, "a refused form leaves the text as it was")

	// Refused by the server: the field named by its label in the form.
	require.Equal(t, "", fill(map[string]string{"resource": "y", "adaptive": "on", "adaptive.min": "5", "adaptive.max": "2"}))
	var errText string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click("#save", chromedp.ByID),
		chromedp.WaitVisible("#fielderror", chromedp.ByID),
		chromedp.Text("#fielderror", &errText, chromedp.ByID),
	))
	require.Contains(t, errText, "Field: adaptive.max")
	require.Contains(t, errText, "must be at least min (5), got 2")
	require.NotContains(t, errText, "Adaptive")

	// A valid one, saved.
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(web.URL+"/apps/shop/rules"),
		chromedp.WaitVisible("#form-flow", chromedp.ByID),
	))
	require.Equal(t, `cluster.localThreshold (most in flight here while the store fails): "1.5" is not a whole number`,
		fill(map[string]string{"resource": "x", "threshold": "8", "cluster": "on", "cluster.localThreshold": "1.5"}))
	// A fleet-wide one (cluster section) beside a local one.
	require.Equal(t, "", fill(map[string]string{"resource": "export", "threshold": "50", "cluster": "on", "cluster.fallback": "local", "cluster.localThreshold": "5"}))
	require.Equal(t, "", fill(map[string]string{"resource": hostileResource, "threshold": "8", "shadow": "on"}))
	var xss bool
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click("#save", chromedp.ByID),
		chromedp.WaitVisible("#confirm", chromedp.ByID),
		chromedp.Click("#confirm", chromedp.ByID),
		chromedp.WaitVisible(`//strong[@id="version"][text()="2"]`, chromedp.BySearch),
		chromedp.Evaluate(`window.__xss === 1`, &xss),
	))
	require.False(t, xss)
	cur, err := rs.Current(bg, "shop")
	require.NoError(t, err)
	set, err := rules.Decode(cur.Doc, rules.YAML)
	require.NoError(t, err, "%s", cur.Doc)
	require.ElementsMatch(t, []rules.Flow{{Resource: hostileResource, Metric: rules.Concurrency, Threshold: 8, Shadow: true},
		{Resource: "export", Metric: rules.Concurrency, Threshold: 50, Cluster: &rules.Cluster{Fallback: rules.FallbackLocal, LocalThreshold: 5}},
		{Resource: "seed", Threshold: 1}}, set.Flow)

	// "Edit" opens it in the concurrency form.
	var shown string
	var vals map[string]any
	require.NoError(t, chromedp.Run(ctx,
		chromedp.WaitVisible(`button.edit[data-form="concurrency"]`, chromedp.ByQuery),
		// The local rule's button (the fleet-wide one is listed too).
		chromedp.Evaluate(`[...document.querySelectorAll('button.edit[data-form="concurrency"]')].find((b) => JSON.parse(b.dataset.values).resource === `+mustJSON(t, hostileResource)+`).click()`, nil),
		chromedp.Evaluate(`document.getElementById("form-kind").value`, &shown),
		chromedp.Evaluate(`(() => { const f = document.getElementById("form-concurrency");
			return { hidden: f.hidden, resource: f.elements.namedItem("resource").value, threshold: f.elements.namedItem("threshold").value,
				shadow: f.elements.namedItem("shadow").checked }; })()`, &vals),
	))
	require.Equal(t, "concurrency", shown)
	require.Equal(t, map[string]any{"hidden": false, "resource": hostileResource, "threshold": "8", "shadow": true}, vals)

	// The views.
	var summary, legend, reasons string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(web.URL+"/apps/shop"),
		chromedp.WaitVisible(`#resources tbody tr[data-resource] td.reasons`, chromedp.ByQuery),
		chromedp.Poll(`document.querySelector("section.chart .legend.keys") && document.querySelector("section.chart .legend.keys").textContent.includes("blocked by")`, nil),
		chromedp.Evaluate(`[...document.querySelectorAll("#resources tbody tr[data-resource]")].find((tr) => tr.dataset.resource === `+jsString(hostileResource)+`).textContent`, &summary),
		chromedp.Evaluate(`[...document.querySelectorAll("#resources tbody tr[data-resource]")].find((tr) => tr.dataset.resource === `+jsString(hostileResource)+`).querySelector("td.reasons").textContent`, &reasons),
		chromedp.Evaluate(`document.querySelector("section.chart .legend.keys").textContent + " | " + document.querySelector("section.chart .summary").textContent`, &legend),
	))
	require.Contains(t, summary, "concurrency 8 in flight")
	require.NotContains(t, summary, "flow 8")
	require.Regexp(t, `^concurrency limit \d+$`, reasons)
	require.Contains(t, legend, "blocked by concurrency limit")
	require.Contains(t, legend, "(concurrency limit 3)")
	require.NotContains(t, legend, "by flow")
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`window.__xss === 1`, &xss)))
	require.False(t, xss)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
