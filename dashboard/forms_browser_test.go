package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/cluster"
	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/dashboard"
	"github.com/sluice-go/sluice/rules"
)

// hostileResource is a resource name that is YAML, HTML and script at
// once, with characters YAML does not accept unescaped.
const hostileResource = "x\": {y: 1} # <img src=x onerror=\"window.__xss=1\"> \\ ' \u2028 \u0085 - flow: ]"

// TestBrowserRuleForms: an editor fills the flow form with a hostile
// resource name and fields away from their defaults (the cluster section
// included), adds it, reviews and saves it, and the stored rule set holds
// exactly that rule; "Edit" fills the form back from it; the same for a
// param rule with exceptions. A number the form cannot write is refused
// in the form, naming the field, and the text is left as it was.
func TestBrowserRuleForms(t *testing.T) {
	browserTest(t)
	ctx := newBrowser(t)
	rdb := redistest.Start(t).Client(t)
	rs := sluiceredis.NewRuleStore(rdb, sluiceredis.RuleStoreConfig{Prefix: "forms"})
	bg := context.Background()
	_, err := rs.Save(bg, "shop", 0, cluster.RuleVersion{Doc: []byte("flow:\n  - resource: seed\n    threshold: 1\n"), Author: "seed"})
	require.NoError(t, err)
	d, err := dashboard.New(dashboard.Config{Rules: rs, Users: testUsers(t)})
	require.NoError(t, err)
	defer d.Close()
	web := httptest.NewServer(d)
	defer web.Close()
	browserLogin(t, ctx, web.URL, "ed")
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(web.URL+"/apps/shop/rules"),
		chromedp.WaitVisible("#form-flow", chromedp.ByID),
	))

	// fill sets the fields of kind's form (checkboxes by "on") as a user
	// would, choosing the kind first.
	fill := func(kind string, vals map[string]string) {
		t.Helper()
		b, err := json.Marshal(vals)
		require.NoError(t, err)
		require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`(() => {
			const sel = document.getElementById("form-kind"); sel.value = `+jsString(kind)+`; sel.dispatchEvent(new Event("change"));
			const f = document.getElementById("form-" + `+jsString(kind)+`); f.reset();
			for (const [k, v] of Object.entries(`+string(b)+`)) {
				const e = f.elements.namedItem(k);
				if (e.type === "checkbox") e.checked = v === "on"; else e.value = v;
				e.dispatchEvent(new Event("change", { bubbles: true }));
			}
		})()`, nil)))
	}
	var docText, formErr string
	saveAndCheck := func(wantVersion string) rules.Set {
		t.Helper()
		var xss bool
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Click("#save", chromedp.ByID),
			chromedp.WaitVisible("#confirm", chromedp.ByID),
			chromedp.Click("#confirm", chromedp.ByID),
			chromedp.WaitVisible(`//strong[@id="version"][text()="`+wantVersion+`"]`, chromedp.BySearch),
			chromedp.Evaluate(`window.__xss === 1`, &xss),
		))
		require.False(t, xss)
		cur, err := rs.Current(bg, "shop")
		require.NoError(t, err)
		set, err := rules.Decode(cur.Doc, rules.YAML)
		require.NoError(t, err, "%s", cur.Doc)
		return set
	}

	// A threshold that is not a number: refused in the form.
	fill("flow", map[string]string{"resource": "r", "threshold": "12,5"})
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Value("#doc", &docText, chromedp.ByID),
		chromedp.Click("#form-flow button.form-add", chromedp.ByQuery),
		chromedp.WaitVisible("#form-flow .form-error", chromedp.ByQuery),
		chromedp.Text("#form-flow .form-error", &formErr, chromedp.ByQuery),
	))
	require.Equal(t, `threshold: "12,5" is not a number`, formErr)
	var after string
	require.NoError(t, chromedp.Run(ctx, chromedp.Value("#doc", &after, chromedp.ByID)))
	require.Equal(t, docText, after, "the text is left as it was")

	flow := map[string]string{
		"id": "f-1", "resource": hostileResource, "metric": "qps", "threshold": "12.5", "bucket": "on",
		"bucket.burst": "30", "statInterval": "2s",
		"cluster": "on", "cluster.mode": "per-instance", "cluster.fallback": "local", "cluster.localThreshold": "5", "cluster.strict": "on",
	}
	fill("flow", flow)
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click("#form-flow button.form-add", chromedp.ByQuery),
		chromedp.WaitVisible(`#form-what[data-added="1"]`, chromedp.ByQuery),
	))
	shotFull(t, ctx, "rules")
	set := saveAndCheck("2")
	require.Equal(t, []rules.Flow{{
		ID: "f-1", Resource: hostileResource, Metric: rules.QPS, Threshold: 12.5, Bucket: &rules.Bucket{Burst: 30}, StatInterval: 2 * time.Second,
		Cluster: &rules.Cluster{Mode: rules.ClusterPerInstance, Fallback: rules.FallbackLocal, LocalThreshold: 5, Strict: true},
	}, {Resource: "seed", Threshold: 1}}, set.Flow)

	// Edit fills the form back from the listed rule.
	var got map[string]string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click(`button.edit[data-kind="flow"][data-index="0"]`, chromedp.ByQuery),
		chromedp.Evaluate(`(() => { const f = document.getElementById("form-flow"), o = {};
			for (const e of f.querySelectorAll("[data-type]")) {
				if (e.type === "checkbox") { if (e.checked) o[e.name] = "on"; } else if (e.value !== "") o[e.name] = e.value; }
			return o; })()`, &got),
	))
	require.Equal(t, flow, got)

	// A param rule with exceptions whose values are hostile too.
	fill("param", map[string]string{
		"id": "p-1", "resource": hostileResource, "key": "k\"ey", "threshold": "20", "burst": "5", "duration": "2s",
		"exceptions": `{"v\"ip<b>": 50, "a\u2028": 1}`, "capacity": "500",
	})
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click("#form-param button.form-add", chromedp.ByQuery),
		chromedp.WaitVisible(`#form-what[data-added="1"]`, chromedp.ByQuery),
	))
	set = saveAndCheck("3")
	require.Equal(t, []rules.Param{{
		ID: "p-1", Resource: hostileResource, Key: "k\"ey", Threshold: 20, Burst: 5, Duration: 2 * time.Second,
		Exceptions: map[string]int64{"v\"ip<b>": 50, "a\u2028": 1}, Capacity: 500,
	}}, set.Param)
	require.Len(t, set.Flow, 2)
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
