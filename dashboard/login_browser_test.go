package dashboard_test

import (
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestBrowserLoginCSRFFromAnotherPort: a page on another port of the
// dashboard's host (another origin, but the same site: cookies ignore
// ports) gets a login token and its cookie from the dashboard as the
// attacker, plants the cookie in the victim's browser, and posts the login
// form with the attacker's name and password. The real browser sends it
// all; the dashboard refuses it by the browser's Sec-Fetch-Site and
// Origin, and the victim stays logged out. Her own login still works.
func TestBrowserLoginCSRFFromAnotherPort(t *testing.T) {
	browserTest(t)
	ctx := newBrowser(t)
	f := newFleet(t, nil)
	dash := f.srv.URL

	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A login form of the dashboard, fetched by the attacker.
		res, err := http.Get(dash + "/login")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		tok := csrfInput.FindStringSubmatch(string(body))[1]
		for _, ck := range res.Cookies() {
			if ck.Name == "sluice_login" {
				// Planted for the host, whatever its port.
				http.SetCookie(w, &http.Cookie{Name: ck.Name, Value: ck.Value, Path: "/"})
			}
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>cute cats</title>
<form id="f" method="post" action="%s/login">
<input name="csrf" value="%s"><input name="name" value="bill"><input name="password" value="%s">
</form><script>document.getElementById("f").submit()</script>`, dash, tok, html.EscapeString(password))
	}))
	defer attacker.Close()
	require.True(t, strings.HasPrefix(attacker.URL, "http://127.0.0.1:") && strings.HasPrefix(dash, "http://127.0.0.1:"))
	require.NotEqual(t, attacker.URL, dash, "two ports of one host")

	// The form posts itself; the browser lands on the dashboard's answer.
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(attacker.URL)))
	var page struct{ Origin, State, H1, Who, Error string }
	require.Eventually(t, func() bool {
		err := chromedp.Run(ctx, chromedp.Evaluate(`({origin: location.origin, state: document.readyState,
			h1: (document.querySelector("h1") || {}).textContent || "",
			who: (document.querySelector("header .who") || {}).textContent || "",
			error: (document.querySelector("#error") || {}).textContent || ""})`, &page))
		return err == nil && page.Origin == dash && page.State == "complete"
	}, 15*time.Second, 50*time.Millisecond, "the form did not reach the dashboard: %+v", page)
	require.Empty(t, strings.TrimSpace(page.Who), "the victim's browser is logged in as the attacker: %+v", page)
	require.Equal(t, "Forbidden", page.H1)
	require.Contains(t, page.Error, "another origin")
	var who string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(dash+"/"),
		chromedp.WaitVisible("#name", chromedp.ByID), // the login page: not logged in
	))

	// The victim logs in herself, in the same browser, with the planted
	// cookie gone or not: that works.
	browserLogin(t, ctx, dash, "ed")
	require.NoError(t, chromedp.Run(ctx, chromedp.Text("header .who", &who, chromedp.ByQuery)))
	require.Contains(t, who, "ed")
}
