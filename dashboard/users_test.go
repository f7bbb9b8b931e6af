package dashboard_test

import (
	"context"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/dashboard"
	"github.com/sluice-go/sluice/sluicetest"
)

// writeUsers writes us as a users file at path.
func writeUsers(t *testing.T, path string, us []dashboard.User) {
	t.Helper()
	data, err := yaml.Marshal(map[string]any{"users": us})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data, 0o600))
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	if path == "" {
		return ""
	}
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(data)
}

// newUsersFleet is newFleet with the test users in a users file, whose
// path it returns.
func newUsersFleet(t *testing.T, mod func(*dashboard.Config)) (*fleet, string) {
	t.Helper()
	return newUsersFleetWith(t, testUsers(t), mod)
}

// newUsersFleetWith is newUsersFleet with the users us.
func newUsersFleetWith(t *testing.T, us []dashboard.User, mod func(*dashboard.Config)) (*fleet, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "users.yaml")
	writeUsers(t, path, us)
	f := newFleet(t, func(c *dashboard.Config) {
		c.Users = nil
		c.UsersFile = path
		if mod != nil {
			mod(c)
		}
	})
	return f, path
}

// change posts form to an endpoint of the users page with the version the
// page shows now.
func change(c *client, f *fleet, path string, form url.Values) (int, string) {
	c.t.Helper()
	form.Set("version", f.dash.UsersVersion())
	return c.post(path, form)
}

func userNamed(t *testing.T, path, name string) *dashboard.User {
	t.Helper()
	us, err := dashboard.LoadUsers(path)
	require.NoError(t, err)
	for i := range us {
		if us[i].Name == name {
			return &us[i]
		}
	}
	return nil
}

func TestUsersFileRoundTrip(t *testing.T) {
	f, path := newUsersFleet(t, nil)
	require.NoError(t, os.Chmod(path, 0o640))
	ada := signIn(t, f.srv, "ada")

	code, _ := change(ada, f, "/users/add", url.Values{"name": {"nia"}, "role": {"Viewer"}, "apps": {" shop, billing,shop "},
		"password": {"nia's long password"}})
	require.Equal(t, http.StatusSeeOther, code)

	// The file is a users file as LoadUsers reads it, with the others
	// unchanged and the new user's password hashed.
	us, err := dashboard.LoadUsers(path)
	require.NoError(t, err)
	require.Len(t, us, len(testUsers(t))+1)
	for i, u := range testUsers(t) {
		require.Equal(t, u, us[i])
	}
	nia := us[len(us)-1]
	require.Equal(t, "nia", nia.Name)
	require.Equal(t, "viewer", nia.Role)
	require.Equal(t, []string{"shop", "billing"}, nia.Apps)
	require.NoError(t, bcrypt.CompareHashAndPassword([]byte(nia.Hash), []byte("nia's long password")))
	require.NotContains(t, readFile(t, path), "nia's long password")

	// Written atomically: the permissions kept, no temporary file left.
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o640), fi.Mode().Perm())
	ents, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, ents, 1, "files beside the users file: %v", ents)

	// The new user logs in and sees what is granted.
	c := newClient(t, f.srv)
	require.Equal(t, http.StatusSeeOther, c.loginAs("nia", "nia's long password"))
	code, _ = c.get("/apps/billing")
	require.Equal(t, http.StatusOK, code)

	// A new password: the old one stops working, the new one works.
	code, _ = change(ada, f, "/users/password", url.Values{"name": {"nia"}, "password": {"a brand new secret"}})
	require.Equal(t, http.StatusSeeOther, code)
	c = newClient(t, f.srv)
	require.Equal(t, http.StatusUnauthorized, c.loginAs("nia", "nia's long password"))
	require.Equal(t, http.StatusSeeOther, c.loginAs("nia", "a brand new secret"))

	// A second dashboard reading the same file sees the same users.
	us2, err := dashboard.LoadUsers(path)
	require.NoError(t, err)
	require.Equal(t, "nia", us2[len(us2)-1].Name)

	// The page lists users and never shows a hash.
	_, body := ada.get("/users")
	require.Contains(t, body, `data-user="nia"`)
	require.NotContains(t, body, "$2a$")
	require.NotContains(t, body, "$2b$")
}

func TestUsersConcurrentEditsConflict(t *testing.T) {
	us := append(testUsers(t), dashboard.User{Name: "root", Hash: testHash(t), Role: "admin"})
	f, path := newUsersFleetWith(t, us, nil)
	ada := signIn(t, f.srv, "ada")
	root := signIn(t, f.srv, "root")

	// Both load the page: the same version.
	v := f.dash.UsersVersion()
	code, _ := ada.post("/users/update", url.Values{"version": {v}, "name": {"viv"}, "role": {"editor"}, "apps": {"shop"}})
	require.Equal(t, http.StatusSeeOther, code)
	code, body := root.post("/users/update", url.Values{"version": {v}, "name": {"viv"}, "role": {"viewer"}, "apps": {"billing"}})
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, body, "the users changed")
	viv := userNamed(t, path, "viv")
	require.Equal(t, "editor", viv.Role, "the first change stays; the second is not written")
	require.Equal(t, []string{"shop"}, viv.Apps)

	// Many admins at once on the same version: exactly one change is
	// written, every other one is refused with a conflict.
	v = f.dash.UsersVersion()
	const n = 8
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := *ada // the same session; its own copy of the token it reads
			if i%2 == 1 {
				c = *root
			}
			form := url.Values{"version": {v}, "name": {"bill"}, "role": {"editor"}, "apps": {"app" + vs(int64(i))}, "csrf": {c.csrf}}
			codes[i], _, _ = c.do("POST", "/users/update", form, nil)
		}()
	}
	wg.Wait()
	won := -1
	for i, code := range codes {
		if code == http.StatusSeeOther {
			require.Equal(t, -1, won, "two changes on the same version were written: %v", codes)
			won = i
			continue
		}
		require.Equal(t, http.StatusConflict, code, "change %d", i)
	}
	require.NotEqual(t, -1, won, "no change was written: %v", codes)
	require.Equal(t, []string{"app" + vs(int64(won))}, userNamed(t, path, "bill").Apps)
}

func TestUsersHandEditPickedUp(t *testing.T) {
	clock := sluicetest.NewManualClock(0)
	f, path := newUsersFleet(t, func(c *dashboard.Config) { c.Clock = clock })
	viv := signIn(t, f.srv, "viv")
	ada := signIn(t, f.srv, "ada")

	stale := f.dash.UsersVersion()
	// By hand: viv goes, hank comes.
	us := testUsers(t)[1:]
	us = append(us, dashboard.User{Name: "hank", Hash: testHash(t), Role: "viewer", Apps: []string{"billing"}})
	writeUsers(t, path, us)

	// Read again at most once a second: not yet.
	code, _ := viv.get("/apps/shop")
	require.Equal(t, http.StatusOK, code)
	clock.Advance(999 * time.Millisecond)
	code, _ = viv.get("/apps/shop")
	require.Equal(t, http.StatusOK, code)

	clock.Advance(time.Millisecond)
	code, _ = viv.get("/apps/shop")
	require.Equal(t, http.StatusSeeOther, code, "a user deleted by hand is logged out at the next request")
	code, _ = viv.post("/logout", nil)
	require.Equal(t, http.StatusUnauthorized, code)
	hank := newClient(t, f.srv)
	require.Equal(t, http.StatusSeeOther, hank.loginAs("hank", password))
	code, _ = hank.get("/apps/billing")
	require.Equal(t, http.StatusOK, code)

	// A change on the page loaded before the hand edit is refused.
	code, _ = ada.post("/users/delete", url.Values{"confirm": {"yes"}, "version": {stale}, "name": {"hank"}})
	require.Equal(t, http.StatusConflict, code)
	require.NotNil(t, userNamed(t, path, "hank"))

	// A broken hand edit leaves the users in force, and the page says why.
	before := f.dash.UsersVersion()
	require.NoError(t, os.WriteFile(path, []byte("users:\n  - {name: x, hash: plain, role: admin}\n"), 0o600))
	clock.Advance(time.Second)
	code, body := ada.get("/users")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "not in force")
	require.Contains(t, body, "hash")
	require.Equal(t, before, f.dash.UsersVersion())
	code, _ = hank.get("/apps/billing")
	require.Equal(t, http.StatusOK, code)
	// Nor can a change be written over the broken file.
	code, _ = change(ada, f, "/users/delete", url.Values{"confirm": {"yes"}, "name": {"hank"}})
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, readFile(t, path), "hash: plain")
}

// A change made after a hand edit that the dashboard has not read yet is
// refused too: the file on disk is what the version is compared with.
func TestUsersHandEditNotYetRead(t *testing.T) {
	clock := sluicetest.NewManualClock(0)
	f, path := newUsersFleet(t, func(c *dashboard.Config) { c.Clock = clock })
	ada := signIn(t, f.srv, "ada")
	shown := f.dash.UsersVersion()
	us := append(testUsers(t), dashboard.User{Name: "hank", Hash: testHash(t), Role: "viewer"})
	writeUsers(t, path, us)
	handEdit := readFile(t, path)
	code, body := ada.post("/users/update", url.Values{"version": {shown}, "name": {"viv"}, "role": {"admin"}})
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, body, `data-user="hank"`, "the page shows the users as they are now")
	require.Equal(t, handEdit, readFile(t, path), "the hand edit is not overwritten")
	code, _ = change(ada, f, "/users/update", url.Values{"name": {"viv"}, "role": {"admin"}})
	require.Equal(t, http.StatusSeeOther, code, "made again on the page as it is now")
	require.NotNil(t, userNamed(t, path, "hank"))
	require.Equal(t, "admin", userNamed(t, path, "viv").Role)
}

func TestUsersLastAdmin(t *testing.T) {
	f, path := newUsersFleet(t, nil)
	ada := signIn(t, f.srv, "ada")
	before := readFile(t, path)
	for _, tt := range []struct {
		path string
		form url.Values
	}{
		{"/users/delete", url.Values{"confirm": {"yes"}, "name": {"ada"}}},
		{"/users/update", url.Values{"name": {"ada"}, "role": {"editor"}, "apps": {"*"}}},
		{"/users/update", url.Values{"name": {"ada"}, "role": {"viewer"}}},
	} {
		code, body := change(ada, f, tt.path, tt.form)
		require.Equal(t, http.StatusUnprocessableEntity, code, "%s %v", tt.path, tt.form)
		require.Contains(t, body, "ada is the last admin")
		require.Equal(t, before, readFile(t, path))
	}
	// With a second admin, the first may step down, then the second is
	// the last.
	code, _ := change(ada, f, "/users/update", url.Values{"name": {"ed"}, "role": {"admin"}})
	require.Equal(t, http.StatusSeeOther, code)
	code, _ = change(ada, f, "/users/update", url.Values{"name": {"ada"}, "role": {"viewer"}, "apps": {"shop"}})
	require.Equal(t, http.StatusSeeOther, code)
	code, _ = ada.get("/users")
	require.Equal(t, http.StatusForbidden, code, "ada is a viewer from her next request")
	ed := signIn(t, f.srv, "ed")
	code, body := change(ed, f, "/users/delete", url.Values{"confirm": {"yes"}, "name": {"ed"}})
	require.Equal(t, http.StatusUnprocessableEntity, code)
	require.Contains(t, body, "ed is the last admin")
}

func TestUsersChangesApplyToSessions(t *testing.T) {
	f, _ := newUsersFleet(t, nil)
	ada := signIn(t, f.srv, "ada")
	viv := signIn(t, f.srv, "viv")
	ed := signIn(t, f.srv, "ed")

	// A grant added: viv reads billing at her next request.
	code, _ := viv.get("/apps/billing")
	require.Equal(t, http.StatusNotFound, code)
	code, _ = change(ada, f, "/users/update", url.Values{"name": {"viv"}, "role": {"viewer"}, "apps": {"shop, billing"}})
	require.Equal(t, http.StatusSeeOther, code)
	code, _ = viv.get("/apps/billing")
	require.Equal(t, http.StatusOK, code)

	// A role taken: ed, made a viewer, may no longer save.
	code, _ = change(ada, f, "/users/update", url.Values{"name": {"ed"}, "role": {"viewer"}, "apps": {"shop"}})
	require.Equal(t, http.StatusSeeOther, code)
	code, _ = ed.post("/apps/shop/rules", url.Values{"base": {"1"}, "doc": {shopRules}})
	require.Equal(t, http.StatusForbidden, code)

	// A user deleted: the session is refused at the next request.
	code, _ = change(ada, f, "/users/delete", url.Values{"confirm": {"yes"}, "name": {"viv"}})
	require.Equal(t, http.StatusSeeOther, code)
	code, _ = viv.get("/apps/shop")
	require.Equal(t, http.StatusSeeOther, code)
	code, _ = viv.post("/logout", nil)
	require.Equal(t, http.StatusUnauthorized, code)
	require.Equal(t, http.StatusUnauthorized, newClient(t, f.srv).loginAs("viv", password))

	// Re-added under the same name, the old session stays ended.
	code, _ = change(ada, f, "/users/add", url.Values{"name": {"viv"}, "role": {"viewer"}, "apps": {"shop"}, "password": {"twelve chars!"}})
	require.Equal(t, http.StatusSeeOther, code)
	code, _ = viv.get("/apps/shop")
	require.Equal(t, http.StatusSeeOther, code)
}

func TestUsersAudit(t *testing.T) {
	f, _ := newUsersFleet(t, nil)
	ada := signIn(t, f.srv, "ada")
	secret, secret2 := "first password!", "second password!"
	for _, tt := range []struct {
		path string
		form url.Values
	}{
		{"/users/add", url.Values{"name": {"nia"}, "role": {"editor"}, "apps": {"shop"}, "password": {secret}}},
		{"/users/update", url.Values{"name": {"nia"}, "role": {"viewer"}, "apps": {"shop, billing"}}},
		{"/users/password", url.Values{"name": {"nia"}, "password": {secret2}}},
		{"/users/delete", url.Values{"confirm": {"yes"}, "name": {"nia"}}},
	} {
		code, _ := change(ada, f, tt.path, tt.form)
		require.Equal(t, http.StatusSeeOther, code, tt.path)
	}
	es, err := f.store.AuditLog(context.Background(), "", 100)
	require.NoError(t, err)
	var got []cluster.AuditEntry
	for _, e := range es {
		if strings.HasPrefix(e.Action, "user-") {
			require.NotContains(t, e.Detail, secret)
			require.NotContains(t, e.Detail, secret2)
			require.NotContains(t, e.Detail, "$2a$")
			e.At = time.Time{}
			got = append(got, e)
		}
	}
	require.Equal(t, []cluster.AuditEntry{
		{User: "ada", Action: "user-delete", Detail: "deleted nia (role viewer)"},
		{User: "ada", Action: "user-password", Detail: "new password for nia"},
		{User: "ada", Action: "user-update", Detail: "changed nia: role editor -> viewer; applications shop -> applications shop, billing"},
		{User: "ada", Action: "user-add", Detail: "added nia: role editor, applications shop"},
	}, got)
}

func TestUsersBadInput(t *testing.T) {
	f, path := newUsersFleet(t, nil)
	ada := signIn(t, f.srv, "ada")
	before := readFile(t, path)
	long := strings.Repeat("x", 73)
	tests := []struct {
		path    string
		form    url.Values
		wantErr string
	}{
		{"/users/add", url.Values{"role": {"viewer"}, "password": {"twelve chars!"}}, "name: required"},
		{"/users/add", url.Values{"name": {"a b"}, "role": {"viewer"}, "password": {"twelve chars!"}}, "name: at most 64"},
		{"/users/add", url.Values{"name": {"a\x00b"}, "role": {"viewer"}, "password": {"twelve chars!"}}, "name: at most 64"},
		{"/users/add", url.Values{"name": {strings.Repeat("n", 65)}, "role": {"viewer"}, "password": {"twelve chars!"}}, "name: at most 64"},
		{"/users/add", url.Values{"name": {"nia"}, "role": {"root"}, "password": {"twelve chars!"}}, "role: &#34;root&#34;"},
		{"/users/add", url.Values{"name": {"nia"}, "role": {"viewer"}, "password": {"eleven char"}}, "password: at least 12 characters"},
		{"/users/add", url.Values{"name": {"nia"}, "role": {"viewer"}, "password": {long}}, "password: at most 72 bytes"},
		{"/users/add", url.Values{"name": {"nia"}, "role": {"viewer"}, "apps": {"sh op"}, "password": {"twelve chars!"}}, "apps: &#34;sh op&#34;"},
		{"/users/add", url.Values{"name": {"viv"}, "role": {"viewer"}, "password": {"twelve chars!"}}, "name: viv exists already"},
		{"/users/update", url.Values{"name": {"nobody"}, "role": {"viewer"}}, "name: no user nobody"},
		{"/users/password", url.Values{"name": {"viv"}, "password": {"short"}}, "password: at least 12"},
		{"/users/delete", url.Values{"confirm": {"yes"}, "name": {"nobody"}}, "name: no user nobody"},
	}
	for _, tt := range tests {
		code, body := change(ada, f, tt.path, tt.form)
		require.Equal(t, http.StatusUnprocessableEntity, code, "%s %v", tt.path, tt.form)
		require.Contains(t, body, tt.wantErr, "%s %v", tt.path, tt.form)
		require.Equal(t, before, readFile(t, path), "%s %v changed the file", tt.path, tt.form)
	}
	// Too many grants: refused, memory bounded.
	apps := make([]string, 101)
	for i := range apps {
		apps[i] = "a" + vs(int64(i))
	}
	code, body := change(ada, f, "/users/update", url.Values{"name": {"viv"}, "role": {"viewer"}, "apps": {strings.Join(apps, ",")}})
	require.Equal(t, http.StatusUnprocessableEntity, code)
	require.Contains(t, body, "apps: more than 100")

	// Names from the form are escaped on the page.
	evil := "<script>alert(1)</script>"
	code, _ = change(ada, f, "/users/add", url.Values{"name": {evil}, "role": {"viewer"}, "apps": {"<b>x</b>"}, "password": {"twelve chars!"}})
	require.Equal(t, http.StatusSeeOther, code)
	_, body = ada.get("/users")
	require.NotContains(t, body, evil)
	require.NotContains(t, body, "<b>x</b>")
	require.Contains(t, body, "&lt;script&gt;alert(1)&lt;/script&gt;")
	_, body = ada.get("/users?done=add&user=" + url.QueryEscape(evil))
	require.NotContains(t, body, evil)
}

func TestUsersReadOnly(t *testing.T) {
	t.Run("config", func(t *testing.T) {
		f := newFleet(t, nil)
		ada := signIn(t, f.srv, "ada")
		_, body := ada.get("/users")
		require.Contains(t, body, `id="users-managed"`)
		require.Contains(t, body, "given in the dashboard's configuration")
		require.NotContains(t, body, `action="/users/add"`)
		code, body := ada.post("/users/delete", url.Values{"confirm": {"yes"}, "name": {"viv"}, "version": {""}})
		require.Equal(t, http.StatusConflict, code)
		require.Contains(t, body, "cannot be changed here")
		code, _ = signIn(t, f.srv, "viv").get("/")
		require.Equal(t, http.StatusOK, code)
	})
	t.Run("proxy", func(t *testing.T) {
		f := newFleet(t, func(c *dashboard.Config) {
			c.Users = nil
			c.Proxy = &dashboard.TrustedProxy{From: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
		})
		c := newClient(t, f.srv)
		hdr := http.Header{"X-Sluice-User": {"pat"}, "X-Sluice-Role": {"admin"}}
		code, body, _ := c.do("GET", "/users", nil, hdr)
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, "The proxy in front of the dashboard names the users")
		require.NotContains(t, body, `action="/users/add"`)
	})
}

func TestUsersFileConfig(t *testing.T) {
	dir := t.TempDir()
	store := newFleet(t, nil).store
	_, err := dashboard.New(dashboard.Config{Rules: store, UsersFile: filepath.Join(dir, "missing.yaml")})
	require.ErrorContains(t, err, "missing.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("users:\n  - {name: a, hash: plain, role: viewer}\n"), 0o600))
	_, err = dashboard.New(dashboard.Config{Rules: store, UsersFile: bad})
	require.ErrorContains(t, err, "hash")
	_, err = dashboard.New(dashboard.Config{Rules: store, UsersFile: bad, Users: testUsers(t)})
	require.ErrorContains(t, err, "both Users and a UsersFile")
}
