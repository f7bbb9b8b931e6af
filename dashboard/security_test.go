package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/filestore"
	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/dashboard"
	"github.com/sluice-go/sluice/sluicetest"
	"github.com/sluice-go/sluice/stat"
)

// loginFrom logs in as name with pw from the client address ip, calling
// the handler directly (so that each caller has its own address), and
// returns the status of the POST.
func loginFrom(t *testing.T, h http.Handler, ip, name, pw string) int {
	t.Helper()
	req := httptest.NewRequest("GET", "/login", nil)
	req.RemoteAddr = ip + ":40000"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code)
	m := csrfInput.FindStringSubmatch(rec.Body.String())
	require.NotNil(t, m)
	form := url.Values{"csrf": {m[1]}, "name": {name}, "password": {pw}}
	req = httptest.NewRequest("POST", "/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.RemoteAddr = ip + ":40000"
	for _, ck := range rec.Result().Cookies() {
		req.AddCookie(ck)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}

// plantedLogin posts the login form as a page of another origin would:
// with a login token and its cookie obtained from the dashboard (the
// cookie planted in the victim's browser: cookies ignore ports) and the
// browser's headers hdr.
func plantedLogin(t *testing.T, f *fleet, name string, hdr http.Header) int {
	t.Helper()
	attacker := newClient(t, f.srv)
	_, body := attacker.get("/login")
	tok := csrfInput.FindStringSubmatch(body)[1]
	u, _ := url.Parse(f.srv.URL)
	var planted string
	for _, ck := range attacker.hc.Jar.Cookies(u) {
		if ck.Name == "sluice_login" {
			planted = ck.Value
		}
	}
	require.NotEmpty(t, planted)
	victim := newClient(t, f.srv)
	h := http.Header{"Cookie": {"sluice_login=" + planted}}
	for k, v := range hdr {
		h[k] = v
	}
	code, _, _ := victim.do("POST", "/login", url.Values{"csrf": {tok}, "name": {name}, "password": {password}}, h)
	return code
}

// TestLoginRefusedFromAnotherOrigin: the login form posted by a page of
// another origin, with a login cookie planted by it, is refused by what
// the browser says of the page (Sec-Fetch-Site, else Origin), not by the
// cookie. A request with neither header is not from a page.
func TestLoginRefusedFromAnotherOrigin(t *testing.T) {
	f := newFleet(t, nil)
	u, _ := url.Parse(f.srv.URL)
	other := "http://" + u.Hostname() + ":1" // another port of the same host
	for _, tt := range []struct {
		name string
		hdr  http.Header
		want int
	}{
		{"another port (Origin)", http.Header{"Origin": {other}}, http.StatusForbidden},
		{"another port (both)", http.Header{"Origin": {other}, "Sec-Fetch-Site": {"same-site"}}, http.StatusForbidden},
		{"same-site", http.Header{"Sec-Fetch-Site": {"same-site"}}, http.StatusForbidden},
		{"cross-site", http.Header{"Sec-Fetch-Site": {"cross-site"}, "Origin": {"https://evil.example"}}, http.StatusForbidden},
		{"opaque origin", http.Header{"Origin": {"null"}}, http.StatusForbidden},
		{"another scheme's host", http.Header{"Origin": {"http://evil.example"}}, http.StatusForbidden},
		{"same origin (both)", http.Header{"Origin": {f.srv.URL}, "Sec-Fetch-Site": {"same-origin"}}, http.StatusSeeOther},
		{"same origin (Origin only)", http.Header{"Origin": {f.srv.URL}}, http.StatusSeeOther},
		{"no browser (neither header)", nil, http.StatusSeeOther},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, plantedLogin(t, f, "bill", tt.hdr))
		})
	}
	// The same check guards every other write (see the matrix): here a
	// logout.
	bill := signIn(t, f.srv, "bill")
	code, body, _ := bill.do("POST", "/logout", url.Values{"csrf": {bill.csrf}}, http.Header{"Origin": {other}})
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "another origin")
	code, _ = bill.get("/")
	require.Equal(t, http.StatusOK, code, "still logged in")
}

// TestRefusedLoginsDoNotFlushAudit floods the login with wrong passwords
// and finds the user change made before still in the audit log: refused
// logins are aggregated apart from it (one row per address and name).
func TestRefusedLoginsDoNotFlushAudit(t *testing.T) {
	const auditLen, flood = 50, 200
	rdb := redistest.Start(t).Client(t)
	st := sluiceredis.NewRuleStore(rdb, sluiceredis.RuleStoreConfig{Prefix: "flood", AuditLen: auditLen})
	path := filepath.Join(t.TempDir(), "users.yaml")
	writeUsers(t, path, testUsers(t))
	clk := sluicetest.NewManualClock(0)
	d, err := dashboard.New(dashboard.Config{Rules: st, UsersFile: path, Clock: clk})
	require.NoError(t, err)
	defer d.Close()
	srv := httptest.NewServer(d)
	defer srv.Close()

	ada := signIn(t, srv, "ada")
	code, _ := ada.post("/users/add", url.Values{"name": {"nia"}, "role": {"viewer"}, "apps": {"shop"},
		"password": {"nia's long password"}, "version": {d.UsersVersion()}})
	require.Equal(t, http.StatusSeeOther, code)

	attacker := newClient(t, srv)
	for i := 0; i < flood; i++ {
		code := attacker.loginAs("ada", "guess")
		require.Contains(t, []int{http.StatusUnauthorized, http.StatusTooManyRequests}, code)
	}
	es, err := st.AuditLog(context.Background(), "", auditLen)
	require.NoError(t, err)
	found := false
	for _, e := range es {
		found = found || e.Action == "user-add" && strings.Contains(e.Detail, "nia")
		require.NotEqual(t, "login-failed", e.Action)
	}
	require.True(t, found, "the user change was pushed out of the audit log by %d refused logins (%d entries kept)", flood, len(es))

	// The refused logins: one row, 4 wrong passwords checked (5 a minute
	// for an address and name, ada's own login from there the first) and
	// the rest refused by the limits.
	_, body := ada.get("/audit")
	require.Regexp(t, `<td>127\.0\.0\.1</td><td>ada</td><td>4</td><td>196</td>`, body)
	require.Equal(t, 1, strings.Count(body[strings.Index(body, `id="refused"`):], "<td>127.0.0.1</td>"), "rows of the address")
}

// TestOwnerLogsInWhileAttackerFloods: an attacker guessing ed's password
// from one address, as fast as the limits let it, for ten minutes of the
// manual clock, while ed logs in from her own address once a minute. She
// gets in every time; the attacker's guesses actually checked fall from 5
// a minute to 8 in ten minutes (the backoff of its address and name:
// after 5 wrong ones, 1, 2, 4, 8 minutes).
func TestOwnerLogsInWhileAttackerFloods(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	f := newFleet(t, func(c *dashboard.Config) { c.Clock = clk })
	h := f.dash
	owner, checked := 0, 0
	for minute := 0; minute < 10; minute++ {
		for i := 0; i < 20; i++ {
			switch code := loginFrom(t, h, "10.0.0.66", "ed", "guess"); code {
			case http.StatusUnauthorized:
				checked++
			case http.StatusTooManyRequests:
			default:
				t.Fatalf("attacker: %d", code)
			}
		}
		if loginFrom(t, h, "10.0.0.1", "ed", password) == http.StatusSeeOther {
			owner++
		}
		clk.Advance(time.Minute)
	}
	t.Logf("owner logged in %d times of 10; attacker's guesses checked: %d", owner, checked)
	require.Equal(t, 10, owner, "the owner, from her own address, logs in every minute of the attack")
	require.Equal(t, 8, checked, "5, then one after 1, 2 and 4 minutes of backoff")
	// From the attacker's address, ed waits too (the backoff is of the
	// address and name) until 8 minutes after its last wrong password.
	require.Equal(t, http.StatusTooManyRequests, loginFrom(t, h, "10.0.0.66", "ed", password))
	// Another name from the attacker's address is not slowed by it.
	require.Equal(t, http.StatusSeeOther, loginFrom(t, h, "10.0.0.66", "viv", password))
}

// TestLoginLimitsExact checks the limits at their boundaries on the
// manual clock: 5 attempts a minute per address and name, 10 per address,
// 100 (20 times 5) per name from all addresses together; the backoff's
// doubling.
func TestLoginLimitsExact(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	f := newFleet(t, func(c *dashboard.Config) { c.Clock = clk })
	h := f.dash

	// Per name: 20 addresses, 5 wrong guesses each (each address's and
	// pair's limit), is the name's 100; the 101st, from a new address, is
	// refused unchecked, the owner's too, for this minute.
	for a := 0; a < 20; a++ {
		for i := 0; i < 5; i++ {
			require.Equal(t, http.StatusUnauthorized, loginFrom(t, h, "10.1.0."+vs(int64(a)), "ed", "guess"), "address %d attempt %d", a, i)
		}
	}
	require.Equal(t, http.StatusTooManyRequests, loginFrom(t, h, "10.2.0.1", "ed", "guess"))
	require.Equal(t, http.StatusTooManyRequests, loginFrom(t, h, "10.0.0.1", "ed", password),
		"a distributed attack of 20 addresses reaches the name's ceiling (documented)")
	require.Equal(t, http.StatusSeeOther, loginFrom(t, h, "10.0.0.1", "viv", password), "other names are not concerned")
	clk.Advance(time.Minute)
	require.Equal(t, http.StatusSeeOther, loginFrom(t, h, "10.0.0.1", "ed", password), "a minute later")

	// Per address: 10 attempts a minute, whatever the names.
	for i := 0; i < 10; i++ {
		name := []string{"viv", "eve", "bill", "ada", "ed"}[i%5]
		require.Equal(t, http.StatusUnauthorized, loginFrom(t, h, "10.3.0.1", name, "guess"))
	}
	require.Equal(t, http.StatusTooManyRequests, loginFrom(t, h, "10.3.0.1", "viv", password))

	// Backoff: after 5 wrong guesses from 10.1.0.0 (a minute ago), the
	// pair waited 1 minute; one more wrong guess makes it 2 minutes.
	require.Equal(t, http.StatusUnauthorized, loginFrom(t, h, "10.1.0.0", "ed", "guess"))
	clk.Advance(2*time.Minute - time.Nanosecond)
	require.Equal(t, http.StatusTooManyRequests, loginFrom(t, h, "10.1.0.0", "ed", password), "a nanosecond early")
	clk.Advance(time.Nanosecond)
	require.Equal(t, http.StatusSeeOther, loginFrom(t, h, "10.1.0.0", "ed", password), "the backoff is over; a right password ends it")
	clk.Advance(time.Minute) // a new minute for the per-pair limit
	for i := 0; i < 4; i++ {
		require.Equal(t, http.StatusUnauthorized, loginFrom(t, h, "10.1.0.0", "ed", "guess"))
	}
	require.Equal(t, http.StatusSeeOther, loginFrom(t, h, "10.1.0.0", "ed", password), "4 wrong ones after a success: no backoff")
}

// TestProxySessionsPerUser: in the trusted-header mode, a viewer's
// cookie-less requests (a script polling the pages and the API) end no
// other user's session: sessions are bounded per user, and the API makes
// none. A write whose session has ended says so and shows the text again.
func TestProxySessionsPerUser(t *testing.T) {
	const maxSessions, flood = 40, 200
	f := newFleet(t, func(c *dashboard.Config) {
		c.Users = nil
		c.MaxSessions = maxSessions
		c.Proxy = &dashboard.TrustedProxy{From: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	})
	as := func(name, role string) http.Header {
		return http.Header{"X-Sluice-User": {name}, "X-Sluice-Role": {role}, "X-Sluice-Apps": {"shop"}}
	}
	ed := newClient(t, f.srv)
	code, _, _ := ed.do("GET", "/apps/shop/rules", nil, as("ed", "editor"))
	require.Equal(t, http.StatusOK, code)
	require.NotEmpty(t, ed.csrf)

	for i := 0; i < flood; i++ {
		viv := newClient(t, f.srv) // no cookie
		for _, p := range []string{"/apps/shop", "/api/apps/shop/live"} {
			code, _, _ := viv.do("GET", p, nil, as("viv", "viewer"))
			require.Equal(t, http.StatusOK, code)
		}
		code, _, _ := viv.do("HEAD", "/apps/shop", nil, as("viv", "viewer"))
		require.Equal(t, http.StatusOK, code)
	}
	t.Logf("sessions kept after %d cookie-less page loads by one viewer: %d", flood, f.dash.Sessions())
	require.LessOrEqual(t, f.dash.Sessions(), 17, "16 of the viewer's and the editor's")

	form := url.Values{"base": {"1"}, "doc": {"flow:\n  - resource: GET /api\n    threshold: 7\n"}, "csrf": {ed.csrf}}
	code, _, _ = ed.do("POST", "/apps/shop/rules", form, as("ed", "editor"))
	require.Equal(t, http.StatusSeeOther, code, "the editor's session survived the viewer's requests")
	require.Equal(t, int64(2), version(t, f.store, "shop"))

	// Her own 16 newer sessions (pages opened elsewhere) end the page's:
	// the save is refused with the reason and her text, and a new token
	// to save again.
	for i := 0; i < 16; i++ {
		code, _, _ := newClient(t, f.srv).do("GET", "/apps/shop", nil, as("ed", "editor"))
		require.Equal(t, http.StatusOK, code)
	}
	stale := ed.csrf
	form.Set("doc", "flow:\n  - resource: GET /api\n    threshold: 8\n")
	form.Set("base", "2")
	code, body, _ := ed.do("POST", "/apps/shop/rules", form, as("ed", "editor"))
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "session of the page you sent this from has ended")
	require.Contains(t, body, "threshold: 8", "her text is shown again")
	require.NotEqual(t, stale, ed.csrf)
	require.Equal(t, int64(2), version(t, f.store, "shop"), "nothing saved")
	form.Set("csrf", ed.csrf)
	code, _, _ = ed.do("POST", "/apps/shop/rules", form, as("ed", "editor"))
	require.Equal(t, http.StatusSeeOther, code, "saved with the new session")
	require.Equal(t, int64(3), version(t, f.store, "shop"))
}

// TestPasswordSessionsPerUser: logging in ends the browser's previous
// session, and one user's sessions are bounded without ending another's.
func TestPasswordSessionsPerUser(t *testing.T) {
	f := newFleet(t, func(c *dashboard.Config) { c.MaxSessions = 30; c.LoginsPerIP = 1000; c.LoginsPerUser = 1000 })
	viv := signIn(t, f.srv, "viv")
	u, _ := url.Parse(f.srv.URL)
	cookie := func(c *client) string {
		for _, ck := range c.hc.Jar.Cookies(u) {
			if ck.Name == "sluice_session" {
				return ck.Value
			}
		}
		return ""
	}
	first := cookie(viv)
	require.Equal(t, http.StatusSeeOther, viv.loginAs("viv", password))
	require.NotEqual(t, first, cookie(viv))
	code, _, _ := newClient(t, f.srv).do("GET", "/", nil, http.Header{"Cookie": {"sluice_session=" + first}})
	require.Equal(t, http.StatusSeeOther, code, "the session before the new login has ended")
	code, _ = viv.get("/")
	require.Equal(t, http.StatusOK, code)

	ed := signIn(t, f.srv, "ed")
	for i := 0; i < 40; i++ {
		signIn(t, f.srv, "viv")
	}
	code, _ = ed.get("/")
	require.Equal(t, http.StatusOK, code, "another user's logins end none of ed's sessions")
	require.Equal(t, 17, f.dash.Sessions())
	// An ended session's write says why.
	code, body := viv.post("/logout", nil)
	require.Equal(t, http.StatusUnauthorized, code)
	require.Contains(t, body, "your session has ended")
}

// TestAnonymousHeadRedirects: HEAD of a page answers like GET: the login
// redirect.
func TestAnonymousHeadRedirects(t *testing.T) {
	f := newFleet(t, nil)
	for _, p := range []string{"/", "/apps/shop", "/users"} {
		code, _, h := newClient(t, f.srv).do("HEAD", p, nil, nil)
		require.Equal(t, http.StatusSeeOther, code, p)
		require.Equal(t, "/login", h.Get("Location"), p)
	}
	code, _, _ := newClient(t, f.srv).do("HEAD", "/api/apps/shop/live", nil, nil)
	require.Equal(t, http.StatusUnauthorized, code)
}

// TestAppNameChecked: a save to an application whose name is not
// [A-Za-z0-9._-] (at most 128) is refused with 400 before the store is
// asked, in the Redis and the directory mode, and creates nothing; a
// valid new name is how an admin starts an application.
func TestAppNameChecked(t *testing.T) {
	doc := url.Values{"base": {"0"}, "doc": {shopRules}}
	check := func(t *testing.T, srv *httptest.Server, st cluster.RuleStore) {
		ada := signIn(t, srv, "ada")
		for _, name := range []string{"<b>x</b>", "a b", ".hidden", strings.Repeat("a", 129), "é"} {
			code, body := ada.post("/apps/"+url.PathEscape(name)+"/rules", doc)
			require.Equal(t, http.StatusBadRequest, code, "%q", name)
			require.Contains(t, body, "application name")
		}
		apps, err := st.Apps(context.Background())
		require.NoError(t, err)
		require.NotContains(t, strings.Join(apps, " "), "<b>")
		for _, a := range apps {
			require.Regexp(t, regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]*$`), a)
		}
		code, _ := ada.post("/apps/new-app_1.2/rules", doc)
		require.Equal(t, http.StatusSeeOther, code)
		require.Equal(t, int64(1), version(t, st, "new-app_1.2"))
	}
	t.Run("redis", func(t *testing.T) {
		f := newFleet(t, nil)
		check(t, f.srv, f.store)
	})
	t.Run("directory", func(t *testing.T) {
		dir := t.TempDir()
		d, err := dashboard.New(dashboard.Config{RulesDir: dir, Users: testUsers(t)})
		require.NoError(t, err)
		defer d.Close()
		srv := httptest.NewServer(d)
		defer srv.Close()
		st, err := filestore.Open(dir, filestore.Config{}) // the same directory, read beside the dashboard
		require.NoError(t, err)
		check(t, srv, st)
	})
}

// TestUsersFileMode: a users file others may read or write, or its group
// write, is refused at start (naming the mode and the fix) and on reload
// (the users in force stay); a group-readable one is taken with a warning
// on the users page.
func TestUsersFileMode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "users.yaml")
	writeUsers(t, path, testUsers(t))
	for _, mode := range []os.FileMode{0o644, 0o604, 0o660, 0o666} {
		require.NoError(t, os.Chmod(path, mode))
		_, err := dashboard.New(dashboard.Config{RulesDir: t.TempDir(), UsersFile: path})
		require.ErrorContains(t, err, fmt.Sprintf("has mode %04o", mode), "%o", mode)
		require.ErrorContains(t, err, "chmod 600")
		_, err = dashboard.LoadUsers(path)
		require.Error(t, err)
	}
	require.NoError(t, os.Chmod(path, 0o640))
	clk := sluicetest.NewManualClock(0)
	d, err := dashboard.New(dashboard.Config{RulesDir: t.TempDir(), UsersFile: path, Clock: clk})
	require.NoError(t, err)
	defer d.Close()
	srv := httptest.NewServer(d)
	defer srv.Close()
	ada := signIn(t, srv, "ada")
	_, body := ada.get("/users")
	require.Contains(t, body, `id="mode-warning"`)
	require.NoError(t, os.Chmod(path, 0o600))
	_, body = ada.get("/users")
	require.NotContains(t, body, `id="mode-warning"`)

	require.NoError(t, os.Chmod(path, 0o666))
	clk.Advance(time.Second)
	_, body = ada.get("/users")
	require.Contains(t, body, "has mode 0666")
	require.Equal(t, http.StatusSeeOther, newClient(t, srv).loginAs("viv", password), "the users in force stay")
}

// TestLiveHealthAndGaps: each instance's last-seen second and health
// (healthy within 5 s, stale within 60 s, lost beyond; none when only
// reported), and a resource's points: 0 in a second some instance
// published a frame for, nothing (a gap) in a second without any frame.
func TestLiveHealthAndGaps(t *testing.T) {
	const now = 1_800_000_000
	f := newFleet(t, func(c *dashboard.Config) { c.Now = func() time.Time { return time.Unix(now, 0) } })
	ctx := context.Background()
	pub := func(id string, sec int64, pass uint64) {
		fr := cluster.Frame{App: "shop", Instance: id, Second: sec}
		if pass > 0 {
			fr.Resources = []cluster.ResourceSecond{{Resource: "r", Second: stat.Second{Pass: pass}}}
		}
		require.NoError(t, f.tel.Publish(ctx, fr, 300, time.Hour))
	}
	pub("a", now-20, 5)
	pub("a", now-19, 6)
	pub("a", now-17, 0) // a frame without r: r had no traffic
	pub("a", now-5, 7)  // none from anyone from now-16 to now-6: a gap
	pub("b", now-6, 0)
	pub("b", now-60, 0)
	pub("c", now-61, 0)
	require.NoError(t, f.store.Report(ctx, "shop", cluster.RuleReport{Instance: "d", Version: 1}, time.Hour))

	viv := signIn(t, f.srv, "viv")
	code, body := viv.get("/api/apps/shop/live")
	require.Equal(t, http.StatusOK, code)
	var l struct {
		HealthyWithin, LostAfter int64
		Instances                []struct {
			ID       string
			LastSeen int64
			Health   string
		}
		Resources []struct{ Points []struct{ T, Pass int64 } }
	}
	require.NoError(t, json.Unmarshal([]byte(body), &l))
	require.Equal(t, int64(5), l.HealthyWithin)
	require.Equal(t, int64(60), l.LostAfter)
	got := map[string]string{}
	for _, in := range l.Instances {
		got[in.ID] = fmt.Sprintf("%d %s", in.LastSeen-now, in.Health)
		if in.LastSeen == 0 {
			got[in.ID] = "never " + in.Health
		}
	}
	require.Equal(t, map[string]string{"a": "-5 healthy", "b": "-6 stale", "c": "-61 lost", "d": "never "}, got)
	require.Len(t, l.Resources, 1)
	var pts []string
	for _, p := range l.Resources[0].Points {
		pts = append(pts, fmt.Sprintf("%d:%d", p.T-now, p.Pass))
	}
	require.Equal(t, []string{"-61:0", "-60:0", "-20:5", "-19:6", "-17:0", "-6:0", "-5:7"}, pts)
}

// TestLoginLimitsConcurrent: 25 addresses guess ed's password at once, 5
// times each, within one minute of the manual clock: exactly 100 guesses
// (the name's ceiling) are checked, the other 25 refused unchecked.
func TestLoginLimitsConcurrent(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	f := newFleet(t, func(c *dashboard.Config) { c.Clock = clk })
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for a := 0; a < 25; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5; i++ {
				code := loginFrom(t, f.dash, fmt.Sprintf("10.9.0.%d", a), "ed", "guess")
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Equal(t, map[int]int{http.StatusUnauthorized: 100, http.StatusTooManyRequests: 25}, codes)
}

// TestProxySessionsConcurrent: four users of the trusted-header mode load
// pages without cookies from eight goroutines at once; each keeps its 16
// newest sessions, no more, and the store stays consistent (-race).
func TestProxySessionsConcurrent(t *testing.T) {
	f := newFleet(t, func(c *dashboard.Config) {
		c.Users = nil
		c.Proxy = &dashboard.TrustedProxy{From: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				req := httptest.NewRequest("GET", "/", nil)
				req.RemoteAddr = "127.0.0.1:5000"
				req.Header.Set("X-Sluice-User", fmt.Sprintf("user%d", g%4))
				req.Header.Set("X-Sluice-Role", "viewer")
				rec := httptest.NewRecorder()
				f.dash.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					t.Errorf("status %d", rec.Code)
					return
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 4*16, f.dash.Sessions())
}

// TestLoginPerNameLimitOverAMinute: the per-name limit counts the
// attempts of the last minute, however they are spread: 200 wrong
// passwords for ed from 200 addresses, one every 295 ms (the last at
// 58.7 s), are 100 checked and 100 refused (before: the limit refilled
// as the minute went, and 117 of the first 200 were checked in 59 s).
// An attempt counts for exactly a minute: the first frees its place at
// 60 s, not a nanosecond before.
func TestLoginPerNameLimitOverAMinute(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	f := newFleet(t, func(c *dashboard.Config) { c.Clock = clk })
	h := f.dash
	checked := 0
	for i := 0; i < 200; i++ {
		clk.Set(int64(i) * int64(295*time.Millisecond))
		code := loginFrom(t, h, fmt.Sprintf("10.4.%d.%d", i/250, i%250), "ed", "guess")
		require.Contains(t, []int{http.StatusUnauthorized, http.StatusTooManyRequests}, code)
		if code == http.StatusUnauthorized {
			checked++
		}
		require.Equal(t, i < 100, code == http.StatusUnauthorized, "attempt %d at %v: %d", i+1, time.Duration(clk.Nanotime()), code)
	}
	require.Equal(t, 100, checked, "attempts checked in 58.7 s")
	clk.Set(int64(time.Minute) - 1)
	require.Equal(t, http.StatusTooManyRequests, loginFrom(t, h, "10.5.0.1", "ed", password), "a nanosecond before the first attempt is a minute old")
	clk.Set(int64(time.Minute))
	require.Equal(t, http.StatusSeeOther, loginFrom(t, h, "10.5.0.1", "ed", password), "the first attempt is a minute old: one place")
	require.Equal(t, http.StatusTooManyRequests, loginFrom(t, h, "10.5.0.2", "ed", password), "only one")
}

// TestLoginPerNameLimitConcurrent: 300 attempts for one name at once,
// from 300 addresses, are 100 checked; 300 more half a minute later are
// all refused (the first 100 are still within the minute).
func TestLoginPerNameLimitConcurrent(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	f := newFleet(t, func(c *dashboard.Config) { c.Clock = clk })
	burst := func(from int) (checked int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := 0; i < 300; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code := loginFrom(t, f.dash, fmt.Sprintf("10.6.%d.%d", (from+i)/250, (from+i)%250), "ed", "guess")
				if code == http.StatusUnauthorized {
					mu.Lock()
					checked++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return checked
	}
	require.Equal(t, 100, burst(0), "attempts checked of 300 at once")
	clk.Advance(30 * time.Second)
	require.Equal(t, 0, burst(300), "attempts checked of 300 more half a minute later")
	clk.Advance(30 * time.Second)
	require.Equal(t, 100, burst(600), "a minute after the first: 100 again")
}

// TestRefusedLoginsFloodKeepsEvidence: a brute force of ed from one
// address (5 wrong passwords), then a flood of 5,000 refused logins with
// 5,000 names from another address (which used to push every other row
// out of the 1,000 in 2.1 s), then 3,000 addresses guessing ed once each.
// The brute force's row stays (an address drops only its own rows beyond
// its share of 50; when the rows are full, the address holding the most,
// with the least evidence, drops its oldest), the totals count every
// refused login, and the top offenders list the flooder and the brute
// force, with exact counts. Memory stays bounded: at most 1,000 rows, 50
// of one address.
func TestRefusedLoginsFloodKeepsEvidence(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	f := newFleet(t, func(c *dashboard.Config) { c.Clock = clk })
	h := f.dash
	for i := 0; i < 5; i++ {
		require.Equal(t, http.StatusUnauthorized, loginFrom(t, h, "10.9.0.1", "ed", "guess"))
	}
	for i := 0; i < 5000; i++ {
		loginFrom(t, h, "10.66.6.6", fmt.Sprintf("u%d", i), "guess")
	}
	for i := 0; i < 3000; i++ {
		loginFrom(t, h, fmt.Sprintf("10.7.%d.%d", i/250, i%250), "ed", "guess")
	}
	_, body := signIn(t, f.srv, "ada").get("/audit")
	refused := body[strings.Index(body, `id="refused"`):]
	require.True(t, strings.Contains(refused, `<td>10.9.0.1</td><td>ed</td><td>5</td><td>0</td>`), "the brute force's row was pushed out")
	rows := strings.Count(refused, "<tr><td>")
	require.LessOrEqual(t, rows, 1000, "rows kept")
	require.LessOrEqual(t, strings.Count(refused, "<td>10.66.6.6</td>"), 50, "rows of the flooding address")
	t.Logf("rows kept: %d, of the flooder: %d", rows, strings.Count(refused, "<td>10.66.6.6</td>"))

	// Every refused login is counted: 5 + 10 wrong passwords (the
	// flooder's address limit is 10 a minute), then the name's limit of
	// 100 leaves 95 for the 3,000 addresses.
	require.Contains(t, body, "Since the dashboard started: 110 wrong passwords and 7895 attempts refused by the limits")
	offenders := body[strings.Index(body, `id="offenders"`):strings.Index(body, `id="refused"`)]
	require.Regexp(t, `<tr><td>10\.66\.6\.6</td><td>[^<]+</td><td>[^<]+</td><td>10</td><td>4990</td><td>5000</td></tr>`, offenders)
	require.Regexp(t, `<tr><td>10\.9\.0\.1</td><td>[^<]+</td><td>[^<]+</td><td>5</td><td>0</td><td>1</td></tr>`, offenders)
	require.Less(t, strings.Index(offenders, "10.66.6.6"), strings.Index(offenders, "10.9.0.1"), "the most first")
	require.Contains(t, body, "2002 addresses with fewer were let go", "3,002 addresses, 1,000 counted")
}
