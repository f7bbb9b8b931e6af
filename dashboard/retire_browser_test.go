package dashboard_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/cluster"
)

// TestBrowserFleetApps drives a real Chromium through the applications
// page: an admin sees an application found from the fleet (and a hostile
// name from traffic, shown as text, its handler never run), then retires
// shop, whose instance still reports, by forcing it.
func TestBrowserFleetApps(t *testing.T) {
	browserTest(t)
	ctx := newBrowser(t)
	f := newFleet(t, withRedisTelemetry(t))
	base := f.srv.URL
	now := time.Now().Unix()
	const hostile = `<img src=x onerror="window.__xss=1">`
	for _, app := range []string{"checkout", hostile, "shop"} {
		require.NoError(t, f.tel.Publish(context.Background(), cluster.Frame{App: app, Instance: app + "-1", Second: now}, 5, time.Minute))
	}
	browserLogin(t, ctx, base, "ada")
	var text string
	var xss bool
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(`tr.fleet a[href="/apps/checkout"]`, chromedp.ByQuery),
		chromedp.Text("#apps", &text, chromedp.ByQuery),
		chromedp.Evaluate(`window.__xss === 1`, &xss),
	))
	require.Contains(t, text, "checkout")
	require.Contains(t, text, hostile, "the name is shown as text")
	require.False(t, xss, "a name from traffic ran as HTML")
	shot(t, ctx, "apps")

	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click(`form[action="/apps/shop/retire"] input[name=confirm]`, chromedp.ByQuery),
		chromedp.Click(`form[action="/apps/shop/retire"] button`, chromedp.ByQuery),
		chromedp.WaitVisible("#error", chromedp.ByID),
		chromedp.Text("#error", &text, chromedp.ByID),
	))
	require.Contains(t, text, "shop-1")
	require.Equal(t, int64(1), version(t, f.store, "shop"))

	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(`form[action="/apps/shop/retire"]`, chromedp.ByQuery),
		chromedp.Click(`form[action="/apps/shop/retire"] input[name=confirm]`, chromedp.ByQuery),
		chromedp.Click(`form[action="/apps/shop/retire"] input[name=force]`, chromedp.ByQuery),
		chromedp.Click(`form[action="/apps/shop/retire"] button`, chromedp.ByQuery),
		chromedp.WaitVisible(`div.notice`, chromedp.ByQuery),
		chromedp.Text("main", &text, chromedp.ByQuery),
	))
	require.Contains(t, text, "Application shop retired.")
	require.Equal(t, int64(0), version(t, f.store, "shop"))
}
