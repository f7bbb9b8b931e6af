package dashboard_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestBrowserUsers drives a real Chromium through the users page: an
// admin adds a viewer of shop, and the viewer logs in with the initial
// password and sees shop.
func TestBrowserUsers(t *testing.T) {
	browserTest(t)
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

// TestBrowserDeleteUserConfirmed: deleting a user takes a confirmation.
// In Chromium, "Delete" alone sends nothing (the form's "sure" box is
// required) and the user stays; checked, the user is deleted. A request
// without the confirmation (a script, a browser ignoring the form's
// rules) deletes nothing either: 400.
func TestBrowserDeleteUserConfirmed(t *testing.T) {
	browserTest(t)
	ctx := newBrowser(t)
	f, path := newUsersFleet(t, nil)
	base := f.srv.URL

	ada := signIn(t, f.srv, "ada")
	code, body := change(ada, f, "/users/delete", url.Values{"name": {"eve"}})
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, "Not deleted")
	require.NotNil(t, userNamed(t, path, "eve"), "not deleted without the confirmation")

	browserLogin(t, ctx, base, "ada")
	row := `tr[data-user="eve"]`
	var valid bool
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"/users"),
		chromedp.WaitVisible(row, chromedp.ByQuery),
		chromedp.Click(row+` form[action="/users/delete"] button.danger`, chromedp.ByQuery),
		// The browser refused to send the form: the page is still this one,
		// its confirmation box invalid.
		chromedp.Evaluate(`document.querySelector('`+row+` form[action="/users/delete"]').checkValidity()`, &valid),
		chromedp.WaitVisible(row, chromedp.ByQuery),
	))
	require.False(t, valid)
	require.NotNil(t, userNamed(t, path, "eve"), "one click deletes nothing")

	var text string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click(row+` input[name="confirm"]`, chromedp.ByQuery),
		chromedp.Click(row+` form[action="/users/delete"] button.danger`, chromedp.ByQuery),
		chromedp.WaitNotPresent(row, chromedp.ByQuery),
		chromedp.Text("main", &text, chromedp.ByQuery),
	))
	require.Nil(t, userNamed(t, path, "eve"), "deleted once confirmed")
	require.Contains(t, text, "eve")
}
