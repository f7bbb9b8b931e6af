package dashboard_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/filestore"
	"github.com/sluice-go/sluice/dashboard"
	"github.com/sluice-go/sluice/dashboard/internal/memstore"
	"github.com/sluice-go/sluice/stat"
)

// TestBrowserResourceLimits: the resource table's Adaptive limit, Tier
// and Shadow would block columns show a fleet's figures (blank where the
// resource has no such rule, tier 0 of a tiered rule shown), and so do its
// rows per instance; a hostile resource name carrying them stays text.
func TestBrowserResourceLimits(t *testing.T) {
	browserTest(t)
	ctx := newBrowser(t)
	bg := context.Background()
	tel := memstore.New(time.Now)
	const evil = `<img src=x onerror="window.__xss=1">`
	now := time.Now().Unix()
	for _, id := range []string{"shop-1", "shop-2"} {
		for s := now - 2; s <= now; s++ {
			f := cluster.Frame{App: "shop", Instance: id, Second: s}
			f.Resources = []cluster.ResourceSecond{
				{Resource: evil, Second: stat.Second{Pass: 9, AdaptiveLimit: 12, ShadowBlock: 2}, Tier: 1},
				{Resource: "tiered", Second: stat.Second{Pass: 5}},
				{Resource: "plain", Second: stat.Second{Pass: 3}},
			}
			require.NoError(t, tel.Publish(bg, f, 100, time.Hour))
		}
	}
	rs, err := filestore.Open(t.TempDir(), filestore.Config{})
	require.NoError(t, err)
	doc := "flow:\n  - resource: tiered\n    threshold: 100\n    tiers:\n      - above: 100\n        threshold: 50\n"
	_, err = rs.Save(bg, "shop", 0, cluster.RuleVersion{Doc: []byte(doc), Author: "seed"})
	require.NoError(t, err)
	d, err := dashboard.New(dashboard.Config{Rules: rs, Telemetry: tel, Users: testUsers(t)})
	require.NoError(t, err)
	defer d.Close()
	web := httptest.NewServer(d)
	defer web.Close()
	browserLogin(t, ctx, web.URL, "viv")

	var cells map[string][]string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(web.URL+"/apps/shop"),
		chromedp.WaitVisible(`#resources tbody tr[data-resource="plain"]`, chromedp.ByQuery),
		chromedp.Evaluate(`Object.fromEntries([...document.querySelectorAll("#resources tbody tr[data-resource]")].map((tr) =>
			[tr.dataset.resource, ["adaptive", "tier", "shadow"].map((c) => tr.querySelector("td." + c).textContent)]))`, &cells),
	))
	require.Equal(t, map[string][]string{evil: {"24", "1", "12"}, "tiered": {"", "0", ""}, "plain": {"", "", ""}}, cells)

	var heads, per []string
	// The hostile row's Instances button, found by its dataset (no selector
	// quoting of the name).
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Evaluate(`[...document.querySelectorAll("#resources tbody tr[data-resource]")].find((tr) => tr.dataset.resource === `+jsString(evil)+`).querySelector("button.per-instance-toggle").click()`, nil),
		chromedp.WaitVisible(`tr.instances-of tr[data-instance="shop-2"]`, chromedp.ByQuery),
		chromedp.Evaluate(`[...document.querySelectorAll("tr.instances-of table.per-instance th")].map((th) => th.textContent)`, &heads),
		chromedp.Evaluate(`[...document.querySelectorAll('tr.instances-of tr[data-instance="shop-1"] td')].map((td) => td.textContent)`, &per),
	))
	require.Equal(t, []string{"Instance", "Passed", "Blocked", "Blocked by", "RT (ms)", "In flight", "Adaptive limit", "Tier", "Shadow would block", "Last second"}, heads)
	require.Equal(t, []string{"shop-1", "27", "0", "", "0.00", "0", "12", "1", "6"}, per[:9])
	var xss bool
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`window.__xss === 1`, &xss)))
	require.False(t, xss, "a resource name ran as HTML")
}
