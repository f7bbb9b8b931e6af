package dashboard_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/cluster"
	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/dashboard"
	"github.com/sluice-go/sluice/rules"
)

// TestBrowserShadowFlip: every kind's form has a shadow checkbox; an
// editor puts an enforced flow rule in shadow mode from the form (Edit,
// tick shadow, add tiers, add, drop the old rule from the text, save), and
// the stored set holds the rule in shadow mode with its tiers; Edit fills
// the form back, tiers included; unticking shadow the same way enforces it
// again.
func TestBrowserShadowFlip(t *testing.T) {
	browserTest(t)
	ctx := newBrowser(t)
	rdb := redistest.Start(t).Client(t)
	rs := sluiceredis.NewRuleStore(rdb, sluiceredis.RuleStoreConfig{Prefix: "shadow"})
	bg := context.Background()
	const seed = "flow:\n  - resource: api\n    threshold: 5\n"
	_, err := rs.Save(bg, "shop", 0, cluster.RuleVersion{Doc: []byte(seed), Author: "seed"})
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
	var boxes int
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(
		`["flow", "system", "circuitBreaker", "param"].filter(k => document.querySelector('#form-' + k + ' input[type="checkbox"][name="shadow"][data-type="bool"]')).length`, &boxes)))
	require.Equal(t, 4, boxes, "a shadow checkbox on every kind's form")

	// flip edits the listed flow rule 0 in the form, sets shadow (and
	// tiers, when given), adds it, drops the old rule from the text (old
	// is its text) and saves.
	flip := func(shadow bool, tiers, old, wantVersion string) rules.Set {
		t.Helper()
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Click(`button.edit[data-kind="flow"][data-index="0"]`, chromedp.ByQuery),
			chromedp.Evaluate(`(() => { const f = document.getElementById("form-flow");
				f.elements.namedItem("shadow").checked = `+map[bool]string{true: "true", false: "false"}[shadow]+`;
				if (`+jsString(tiers)+` !== "") f.elements.namedItem("tiers").value = `+jsString(tiers)+`;
				f.querySelector("button.form-add").click();
				const doc = document.getElementById("doc");
				if (!doc.value.includes(`+jsString(old)+`)) throw new Error("old rule not in the text: " + doc.value);
				doc.value = doc.value.replace(`+jsString(old)+`, "");
				doc.dispatchEvent(new Event("input", { bubbles: true }));
			})()`, nil),
			chromedp.Click("#save", chromedp.ByID),
			chromedp.WaitVisible("#confirm", chromedp.ByID),
			chromedp.Click("#confirm", chromedp.ByID),
			chromedp.WaitVisible(`//strong[@id="version"][text()="`+wantVersion+`"]`, chromedp.BySearch),
		))
		cur, err := rs.Current(bg, "shop")
		require.NoError(t, err)
		set, err := rules.Decode(cur.Doc, rules.YAML)
		require.NoError(t, err, "%s", cur.Doc)
		return set
	}
	tiers := []rules.Tier{{Above: 100, Below: 80, Threshold: 3}}
	set := flip(true, `[{"above": 100, "below": 80, "threshold": 3}]`, "  - resource: api\n    threshold: 5\n", "2")
	require.Equal(t, []rules.Flow{{Resource: "api", Threshold: 5, Shadow: true, Tiers: tiers}}, set.Flow)

	var got map[string]string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click(`button.edit[data-kind="flow"][data-index="0"]`, chromedp.ByQuery),
		chromedp.Evaluate(`(() => { const f = document.getElementById("form-flow"), o = {};
			for (const e of f.querySelectorAll("[data-type]")) {
				if (e.type === "checkbox") { if (e.checked) o[e.name] = "on"; } else if (e.value !== "") o[e.name] = e.value; }
			return o; })()`, &got),
	))
	require.Equal(t, map[string]string{"resource": "api", "threshold": "5", "shadow": "on", "tiers": `[{"above":100,"below":80,"threshold":3}]`}, got)

	var doc string
	require.NoError(t, chromedp.Run(ctx, chromedp.Value("#doc", &doc, chromedp.ByID)))
	set = flip(false, "", doc[len("flow:\n"):], "3")
	require.Equal(t, []rules.Flow{{Resource: "api", Threshold: 5, Tiers: tiers}}, set.Flow)
}
