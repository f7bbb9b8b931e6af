package dashboard_test

import (
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// writeEndpoint is one endpoint that changes something, with a request
// that would succeed for an editor of shop.
type writeEndpoint struct {
	pattern string // as registered
	path    string // for application shop
	form    url.Values
	// anyUser: every signed-in user may call it (logout); the matrix then
	// expects success, not 403, for a viewer and an editor of another
	// application.
	anyUser bool
	// admin: only an admin may call it (the users endpoints), on a
	// dashboard with a users file; an editor of shop is refused too.
	admin bool
}

func writeEndpoints() []writeEndpoint {
	return []writeEndpoint{
		{pattern: "/apps/{app}/rules", path: "/apps/shop/rules",
			form: url.Values{"base": {"1"}, "doc": {"flow:\n  - resource: GET /api\n    threshold: 7\n"}}},
		{pattern: "/apps/{app}/rules/delete", path: "/apps/shop/rules/delete",
			form: url.Values{"base": {"1"}, "kind": {"flow"}, "index": {"0"}}},
		{pattern: "/apps/{app}/rollback", path: "/apps/shop/rollback",
			form: url.Values{"base": {"1"}, "version": {"1"}}},
		{pattern: "/logout", path: "/logout", anyUser: true},
		{pattern: "/users/add", path: "/users/add", admin: true,
			form: url.Values{"name": {"newbie"}, "role": {"viewer"}, "apps": {"shop"}, "password": {"twelve chars!"}}},
		{pattern: "/users/update", path: "/users/update", admin: true,
			form: url.Values{"name": {"viv"}, "role": {"editor"}, "apps": {"shop, billing"}}},
		{pattern: "/users/password", path: "/users/password", admin: true,
			form: url.Values{"name": {"viv"}, "password": {"another long one"}}},
		{pattern: "/users/delete", path: "/users/delete", admin: true, form: url.Values{"confirm": {"yes"}, "name": {"eve"}}},
		{pattern: "/apps/{app}/retire", path: "/apps/shop/retire", admin: true, form: url.Values{"confirm": {"yes"}}},
	}
}

// readEndpoints are the GET endpoints of one application, and the
// admin-only ones.
var (
	appReads = []string{"/apps/{app}", "/apps/{app}/rules", "/apps/{app}/history", "/apps/{app}/audit", "/api/apps/{app}/live",
		"/api/apps/{app}/resources", "/api/apps/{app}/resource", "/api/apps/{app}/buckets"}
	adminReads = []string{"/audit", "/users"}
	otherReads = []string{"/{$}"} // signed-in users; no application
	publicOnes = []string{"GET /static/", "GET /login", "POST /login"}
)

// TestEndpointListsComplete fails when the router has an endpoint the
// matrix below does not try, so that a new endpoint cannot be forgotten.
func TestEndpointListsComplete(t *testing.T) {
	f := newFleet(t, nil)
	var got, want []string
	for _, r := range f.dash.Routes() {
		got = append(got, r[0]+" "+r[1]+" "+r[2])
	}
	for _, e := range writeEndpoints() {
		acc := "write"
		if e.anyUser {
			acc = "signed-in"
		}
		if e.admin {
			acc = "admin"
		}
		want = append(want, "POST "+e.pattern+" "+acc)
	}
	for _, p := range appReads {
		want = append(want, "GET "+p+" read")
	}
	for _, p := range otherReads {
		want = append(want, "GET "+p+" read")
	}
	for _, p := range adminReads {
		want = append(want, "GET "+p+" admin")
	}
	for _, p := range publicOnes {
		want = append(want, p+" public")
	}
	sort.Strings(got)
	sort.Strings(want)
	require.Equal(t, want, got, "the router's endpoints and the authorization matrix's lists differ")
}

func TestWriteAuthorizationMatrix(t *testing.T) {
	for _, e := range writeEndpoints() {
		t.Run(e.path, func(t *testing.T) {
			var f *fleet
			var usersFile string
			if e.admin {
				f, usersFile = newUsersFleet(t, nil)
				e.form.Set("version", f.dash.UsersVersion())
			} else {
				f = newFleet(t, nil)
			}
			state := func() string { return vs(version(t, f.store, "shop")) + "\n" + readFile(t, usersFile) }
			before, v0 := state(), version(t, f.store, "shop")
			unchanged := func(who string) {
				t.Helper()
				require.Equal(t, before, state(), "%s changed shop's rules or the users", who)
			}
			send := func(c *client, csrf string) int {
				t.Helper()
				form := url.Values{}
				for k, v := range e.form {
					form[k] = v
				}
				if csrf != "" {
					form.Set("csrf", csrf)
				}
				code, _, _ := c.do("POST", e.path, form, nil)
				return code
			}

			anon := newClient(t, f.srv)
			require.Equal(t, http.StatusUnauthorized, send(anon, "x"), "anonymous")
			unchanged("anonymous")

			forged := newClient(t, f.srv)
			code, _, _ := forged.do("POST", e.path, e.form, http.Header{"Cookie": {"sluice_session=" + strings.Repeat("A", 43)}})
			require.Equal(t, http.StatusUnauthorized, code, "forged session cookie")
			unchanged("a forged session")

			ed := signIn(t, f.srv, "ed")
			require.Equal(t, http.StatusForbidden, send(ed, ""), "editor without a CSRF token")
			require.Equal(t, http.StatusForbidden, send(ed, "wrong-token"), "editor with a wrong CSRF token")
			eve := signIn(t, f.srv, "eve")
			require.Equal(t, http.StatusForbidden, send(ed, eve.csrf), "editor with another session's CSRF token")
			unchanged("a write without the session's CSRF token")

			// The user the endpoint is for, with the right token, from a
			// page of another origin (another port of the same host, which
			// may plant cookies): refused.
			who := map[bool]string{true: "ada", false: "ed"}[e.admin]
			if e.anyUser {
				who = "viv"
			}
			right := signIn(t, f.srv, who)
			for _, hdr := range []http.Header{
				{"Origin": {"http://127.0.0.1:1"}},
				{"Sec-Fetch-Site": {"same-site"}, "Origin": {"http://127.0.0.1:1"}},
				{"Sec-Fetch-Site": {"cross-site"}},
			} {
				form := url.Values{"csrf": {right.csrf}}
				for k, v := range e.form {
					form[k] = v
				}
				code, _, _ := right.do("POST", e.path, form, hdr)
				require.Equal(t, http.StatusForbidden, code, "%s from another origin: %v", who, hdr)
				unchanged("a request from another origin")
			}

			viv := signIn(t, f.srv, "viv")
			bill := signIn(t, f.srv, "bill")
			if e.anyUser {
				require.Equal(t, http.StatusSeeOther, send(viv, viv.csrf), "viewer")
				require.Equal(t, http.StatusSeeOther, send(bill, bill.csrf), "editor of another application")
				return
			}
			require.Equal(t, http.StatusForbidden, send(viv, viv.csrf), "viewer of shop")
			unchanged("a viewer")
			require.Equal(t, http.StatusForbidden, send(bill, bill.csrf), "editor of billing")
			unchanged("an editor of another application")
			if e.admin {
				require.Equal(t, http.StatusForbidden, send(ed, ed.csrf), "editor of shop")
				unchanged("an editor")
				ada := signIn(t, f.srv, "ada")
				require.Equal(t, http.StatusSeeOther, send(ada, ada.csrf), "admin")
				require.NotEqual(t, before, state(), "the admin's change is written")
				return
			}

			// The same request by an editor of shop with its token passes:
			// the refusals above are not an endpoint that always refuses.
			require.Equal(t, http.StatusSeeOther, send(ed, ed.csrf), "editor of shop")
			require.Equal(t, v0+1, version(t, f.store, "shop"))
		})
	}
}

func TestReadAuthorization(t *testing.T) {
	f := newFleet(t, nil)
	anon := newClient(t, f.srv)
	viv := signIn(t, f.srv, "viv") // viewer of shop
	ada := signIn(t, f.srv, "ada")
	for _, p := range appReads {
		own := strings.ReplaceAll(p, "{app}", "shop")
		other := strings.ReplaceAll(p, "{app}", "billing")
		t.Run(p, func(t *testing.T) {
			code, _ := viv.get(own)
			require.Equal(t, http.StatusOK, code, "viewer of shop reads %s", own)
			code, body := viv.get(other)
			require.Equal(t, http.StatusNotFound, code, "viewer of shop reads %s", other)
			require.NotContains(t, body, "GET /api", "a refusal shows none of billing's rules")
			code, _ = ada.get(other)
			require.Equal(t, http.StatusOK, code, "admin reads %s", other)
			code, _ = anon.get(own)
			if strings.HasPrefix(p, "/api/") {
				require.Equal(t, http.StatusUnauthorized, code, "anonymous reads %s", own)
			} else {
				require.Equal(t, http.StatusSeeOther, code, "anonymous reads %s: to the login page", own)
			}
		})
	}
	for _, p := range adminReads {
		code, _ := viv.get(p)
		require.Equal(t, http.StatusForbidden, code, "viewer reads %s", p)
		code, _ = ada.get(p)
		require.Equal(t, http.StatusOK, code, "admin reads %s", p)
	}
	// The application list shows only what is granted.
	_, body := viv.get("/")
	require.Contains(t, body, `href="/apps/shop"`)
	require.NotContains(t, body, "billing")
}

func TestViewerSeesNoEditControls(t *testing.T) {
	f := newFleet(t, nil)
	viv := signIn(t, f.srv, "viv")
	_, body := viv.get("/apps/shop/rules")
	require.NotContains(t, body, `id="editor"`)
	require.NotContains(t, body, "/rules/delete")
	_, body = viv.get("/apps/shop/history")
	require.NotContains(t, body, "/rollback")
	ed := signIn(t, f.srv, "ed")
	_, body = ed.get("/apps/shop/rules")
	require.Contains(t, body, `id="editor"`)
}
