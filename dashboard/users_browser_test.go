package dashboard_test

import (
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestBrowserUsers drives a real Chromium through the users page: an
// admin adds a viewer of shop, and the viewer logs in with the initial
// password and sees shop.
func TestBrowserUsers(t *testing.T) {
	ctx := newBrowser(t)
	f, path := newUsersFleet(t, nil)
	base := f.srv.URL

	browserLogin(t, ctx, base, "ada")
	var text string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"/users"),
		chromedp.WaitVisible("#add-user", chromedp.ByID),
		chromedp.SendKeys("#add-name", "nia", chromedp.ByID),
		chromedp.SetValue("#add-role", "viewer", chromedp.ByID),
		chromedp.SendKeys("#add-apps", "shop", chromedp.ByID),
		chromedp.SendKeys("#add-password", "nia's first password", chromedp.ByID),
		chromedp.Click("#add-submit", chromedp.ByID),
		chromedp.WaitVisible(`tr[data-user="nia"]`, chromedp.ByQuery),
		chromedp.Text("main", &text, chromedp.ByQuery),
	))
	require.Contains(t, text, "User nia added.")
	shot(t, ctx, "users")
	nia := userNamed(t, path, "nia")
	require.NotNil(t, nia, "nia is in the users file")
	require.Equal(t, "viewer", nia.Role)
	require.NoError(t, chromedp.Run(ctx, chromedp.Click("form.logout button", chromedp.ByQuery), chromedp.WaitVisible("#name", chromedp.ByID)))

	require.NoError(t, chromedp.Run(ctx,
		chromedp.SendKeys("#name", "nia", chromedp.ByID),
		chromedp.SendKeys("#password", "nia's first password", chromedp.ByID),
		chromedp.Click("#login", chromedp.ByID),
		chromedp.WaitVisible(`a[href="/apps/shop"]`, chromedp.ByQuery),
		chromedp.Text("header .who", &text, chromedp.ByQuery),
	))
	require.Contains(t, text, "nia")
	require.Contains(t, text, "viewer")
}
