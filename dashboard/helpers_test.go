package dashboard_test

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-go/sluice/cluster"
	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/dashboard"
	"github.com/sluice-go/sluice/dashboard/internal/memstore"
	"github.com/sluice-go/sluice/sluicetest"
)

// password is every test user's password.
const password = "correct horse battery staple"

var (
	hashOnce sync.Once
	hash     string
)

func testHash(t testing.TB) string {
	hashOnce.Do(func() {
		h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
		if err != nil {
			panic(err)
		}
		hash = string(h)
	})
	return hash
}

// testUsers: a viewer and an editor of shop, an editor of billing, an
// admin.
func testUsers(t testing.TB) []dashboard.User {
	h := testHash(t)
	return []dashboard.User{
		{Name: "viv", Hash: h, Role: "viewer", Apps: []string{"shop"}},
		{Name: "ed", Hash: h, Role: "editor", Apps: []string{"shop"}},
		{Name: "eve", Hash: h, Role: "editor", Apps: []string{"shop"}},
		{Name: "bill", Hash: h, Role: "editor", Apps: []string{"billing"}},
		{Name: "ada", Hash: h, Role: "admin"},
	}
}

const shopRules = "flow:\n  - resource: GET /api\n    threshold: 100\n"

// fleet is a dashboard over a rule store and telemetry in memory holding
// rules of shop and billing, served on loopback.
type fleet struct {
	store cluster.RuleStore
	tel   cluster.Telemetry
	dash  *dashboard.Dashboard
	srv   *httptest.Server
}

func newFleet(t *testing.T, mod func(*dashboard.Config)) *fleet {
	t.Helper()
	st, _ := sluicetest.NewRuleStore(nil)
	tel := memstore.New(nil)
	ctx := context.Background()
	for _, app := range []string{"shop", "billing"} {
		_, err := st.Save(ctx, app, 0, cluster.RuleVersion{Doc: []byte(shopRules), Author: "seed"})
		require.NoError(t, err)
	}
	cfg := dashboard.Config{Rules: st, Telemetry: tel, Users: testUsers(t)}
	if mod != nil {
		mod(&cfg)
	}
	d, err := dashboard.New(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(d)
	t.Cleanup(func() {
		srv.Close()
		d.Close()
	})
	return &fleet{store: cfg.Rules, tel: cfg.Telemetry, dash: d, srv: srv}
}

// withRedisTelemetry gives a fleet Redis's telemetry, which lists the
// applications that publish frames (the telemetry in memory does not).
func withRedisTelemetry(t *testing.T) func(*dashboard.Config) {
	rdb := redistest.Start(t).Client(t)
	return func(cfg *dashboard.Config) {
		cfg.Telemetry = sluiceredis.NewTelemetry(rdb, sluiceredis.TelemetryConfig{Prefix: "dash"})
	}
}

// client is a browser-like HTTP client: cookies kept, redirects not
// followed.
type client struct {
	t    *testing.T
	base string
	hc   *http.Client
	csrf string // the session's token, read from the last page
}

func newClient(t *testing.T, srv *httptest.Server) *client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	hc := &http.Client{Transport: srv.Client().Transport, Jar: jar}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	hc.Timeout = 10 * time.Second
	return &client{t: t, base: srv.URL, hc: hc}
}

var (
	csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	csrfBody  = regexp.MustCompile(`data-csrf="([^"]*)"`)
)

// do sends a request and returns the status and body.
func (c *client) do(method, path string, form url.Values, header http.Header) (int, string, http.Header) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.base+path, body)
	require.NoError(c.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := c.hc.Do(req)
	require.NoError(c.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(c.t, err)
	if m := csrfBody.FindStringSubmatch(string(b)); m != nil && m[1] != "" {
		c.csrf = html.UnescapeString(m[1])
	}
	return res.StatusCode, string(b), res.Header
}

func (c *client) get(path string) (int, string) {
	c.t.Helper()
	code, body, _ := c.do("GET", path, nil, nil)
	return code, body
}

// post sends form with the session's CSRF token.
func (c *client) post(path string, form url.Values) (int, string) {
	c.t.Helper()
	f := url.Values{}
	for k, v := range form {
		f[k] = v
	}
	f.Set("csrf", c.csrf)
	code, body, _ := c.do("POST", path, f, nil)
	return code, body
}

// login logs in as name and returns the status of the POST.
func (c *client) loginAs(name, pw string) int {
	c.t.Helper()
	code, body := c.get("/login")
	require.Equal(c.t, http.StatusOK, code)
	m := csrfInput.FindStringSubmatch(body)
	require.NotNil(c.t, m, "login form without a CSRF token")
	code, _, _ = c.do("POST", "/login", url.Values{"csrf": {html.UnescapeString(m[1])}, "name": {name}, "password": {pw}}, nil)
	return code
}

// signIn logs in as name (which must succeed) and loads a page, so that
// the client holds the session's CSRF token.
func signIn(t *testing.T, srv *httptest.Server, name string) *client {
	t.Helper()
	c := newClient(t, srv)
	require.Equal(t, http.StatusSeeOther, c.loginAs(name, password), "login as %s", name)
	code, _ := c.get("/")
	require.Equal(t, http.StatusOK, code)
	require.NotEmpty(t, c.csrf)
	return c
}

func version(t *testing.T, st cluster.RuleStore, app string) int64 {
	t.Helper()
	v, err := st.Current(context.Background(), app)
	require.NoError(t, err)
	return v.Version
}

func vs(n int64) string { return fmt.Sprint(n) }
