package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"math"
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

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/filestore"
	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/dashboard"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
	"github.com/sluice-go/sluice/stat"
)

const evil = `<script>alert(1)</script>`

// TestTrafficValuesEscaped puts traffic through a real engine on a resource
// named like a script and reads it back from every page and the JSON API.
func TestTrafficValuesEscaped(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	eng := sluice.New(sluice.WithClock(clk))
	defer eng.Close()
	err := eng.UpdateRules(func(s *rules.Set) { s.Flow = []rules.Flow{{Resource: evil, Threshold: 3}} })
	require.NoError(t, err)
	err = eng.UpdateRules(func(s *rules.Set) {
		s.CircuitBreaker = []rules.CircuitBreaker{{Resource: evil, Strategy: rules.ErrorCount, Threshold: 100, RetryTimeout: time.Second}}
	})
	require.NoError(t, err)
	d, err := dashboard.New(dashboard.Config{Engine: eng, App: "shop", RulesDir: t.TempDir(), Users: testUsers(t), Clock: clk})
	require.NoError(t, err)
	defer d.Close()
	srv := httptest.NewServer(d)
	defer srv.Close()

	for i := 0; i < 5; i++ { // 3 pass, 2 refused by the flow rule
		if p, err := eng.Entry(evil); err == nil {
			p.Exit()
		}
	}
	nextFrame(t, clk, d)

	ed := signIn(t, srv, "ed")
	// A failed login under the same name lands in the audit log.
	require.Equal(t, http.StatusUnauthorized, newClient(t, srv).loginAs(evil, "nope"))

	ada := signIn(t, srv, "ada")
	for _, p := range []string{"/apps/shop", "/apps/shop/rules", "/apps/shop/history?v=1", "/audit"} {
		code, body, h := ada.do("GET", p, nil, nil)
		require.Equal(t, http.StatusOK, code, p)
		require.NotContains(t, body, evil, p)
		require.Contains(t, body, "&lt;script&gt;alert(1)&lt;/script&gt;", p)
		require.Contains(t, h.Get("Content-Security-Policy"), "script-src 'self'", p)
		require.NotContains(t, h.Get("Content-Security-Policy"), "unsafe-inline", p)
		require.Equal(t, "DENY", h.Get("X-Frame-Options"), p)
		require.Equal(t, "nosniff", h.Get("X-Content-Type-Options"), p)
	}
	_, body := ed.get("/users")
	require.Equal(t, http.StatusForbidden, func() int { c, _ := ed.get("/users"); return c }(), body)

	code, body, h := ed.do("GET", "/api/apps/shop/live", nil, nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "application/json", h.Get("Content-Type"))
	require.NotContains(t, body, "<")
	require.Contains(t, body, `\u003cscript\u003e`)
	var l struct {
		Resources []struct {
			Resource string
			Points   []struct {
				Pass, Block uint64
				Blocked     []uint64
			}
		}
		BlockTypes []string
		Breakers   []struct{ Resource, State string }
	}
	require.NoError(t, json.Unmarshal([]byte(body), &l))
	require.Len(t, l.Resources, 1)
	require.Equal(t, evil, l.Resources[0].Resource)
	require.Len(t, l.Resources[0].Points, 1)
	p := l.Resources[0].Points[0]
	require.Equal(t, uint64(3), p.Pass)
	require.Equal(t, uint64(2), p.Block)
	require.Len(t, p.Blocked, len(l.BlockTypes))
	for i, n := range p.Blocked {
		if l.BlockTypes[i] == "flow" {
			require.Equal(t, uint64(2), n)
		} else {
			require.Zero(t, n, l.BlockTypes[i])
		}
	}
	require.Equal(t, []struct{ Resource, State string }{{evil, "closed"}}, l.Breakers)
	for _, p := range []string{"/api/apps/shop/resources?q=script", "/api/apps/shop/resource?name=" + url.QueryEscape(evil)} {
		code, body, h := ed.do("GET", p, nil, nil)
		require.Equal(t, http.StatusOK, code, p)
		require.Equal(t, "application/json", h.Get("Content-Type"), p)
		require.NotContains(t, body, "<", p)
		require.Contains(t, body, `\u003cscript\u003e`, p)
	}

	// The page's script sets names with textContent only.
	code, js, _ := ed.do("GET", "/static/app.js", nil, nil)
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, js, "innerHTML")
	require.NotContains(t, js, "insertAdjacentHTML")
	require.NotContains(t, js, "document.write")
}

// TestLocalEngineFollowsSaves: with an Engine, a save loads the rules into
// the engine and writes them to the rules directory.
func TestLocalEngineFollowsSaves(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	eng := sluice.New(sluice.WithClock(clk))
	defer eng.Close()
	dir := t.TempDir()
	d, err := dashboard.New(dashboard.Config{Engine: eng, App: "shop", RulesDir: dir, Users: testUsers(t), Clock: clk})
	require.NoError(t, err)
	defer d.Close()
	srv := httptest.NewServer(d)
	defer srv.Close()
	ed := signIn(t, srv, "ed")
	code, _ := ed.post("/apps/shop/rules", url.Values{"base": {"1"}, "doc": {"flow:\n  - resource: r\n    threshold: 2\n"}})
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, []rules.Flow{{Resource: "r", Threshold: 2}}, eng.Rules().Flow)
	admitted := 0
	for i := 0; i < 5; i++ {
		if p, err := eng.Entry("r"); err == nil {
			admitted++
			p.Exit()
		}
	}
	require.Equal(t, 2, admitted)
	file, err := os.ReadFile(filepath.Join(dir, "shop", "rules.yaml"))
	require.NoError(t, err)
	require.Equal(t, "flow:\n  - resource: r\n    threshold: 2\n", string(file), "the rule file of the version in force")
}

func TestInvalidRuleRefusedNamingField(t *testing.T) {
	f := newFleet(t, nil)
	ed := signIn(t, f.srv, "ed")
	tests := []struct {
		give      string
		wantRule  string
		wantField string
	}{
		{"flow:\n  - resource: GET /api\n    threshold: -5\n", `flow rule 0 (resource &#34;GET /api&#34;)`, "threshold"},
		{"flow:\n  - resource: a\n    threshold: 1\n  - resource: b\n    threshold: 1\n    strategy: warm-up\n", "flow rule 1", "warmUp.period"},
		{"flow:\n  - resource: a\n    treshold: 1\n", "flow rule 0", "treshold"},
		{"flow:\n  - resource: a\n    threshold: [1\n", "", ""}, // not YAML
	}
	for _, tt := range tests {
		code, body := ed.post("/apps/shop/rules", url.Values{"base": {"1"}, "doc": {tt.give}})
		require.Equal(t, http.StatusUnprocessableEntity, code, tt.give)
		if tt.wantRule == "" {
			require.Contains(t, body, "rules: yaml: line 2", tt.give)
		} else {
			require.Contains(t, body, `id="fielderror"`, tt.give)
			require.Contains(t, body, tt.wantRule, tt.give)
			require.Contains(t, body, `<strong class="field">`+tt.wantField+`</strong>`, tt.give)
		}
		// The user's text is kept in the editor.
		require.Contains(t, body, "resource: ", tt.give)
		require.Equal(t, int64(1), version(t, f.store, "shop"), "a refused document is not written")
	}
}

func TestTwoEditorsSavingAtOnce(t *testing.T) {
	t.Run("local", func(t *testing.T) {
		eng := sluice.New()
		defer eng.Close()
		err := eng.UpdateRules(func(s *rules.Set) { s.Flow = []rules.Flow{{Resource: "GET /api", Threshold: 100}} })
		require.NoError(t, err)
		dir := t.TempDir()
		f := newFleet(t, func(c *dashboard.Config) { c.Rules, c.RulesDir, c.Engine, c.App = nil, dir, eng, "shop" })
		rs, err := filestore.Open(dir, filestore.Config{})
		require.NoError(t, err)
		cur := twoEditors(t, f.srv, rs)
		set, err := rules.Decode(cur.Doc, rules.YAML)
		require.NoError(t, err)
		require.Equal(t, set.Flow, eng.Rules().Flow, "the engine runs the version written")
	})
	t.Run("redis", func(t *testing.T) {
		rdb := redistest.Start(t).Client(t)
		rs := sluiceredis.NewRuleStore(rdb, sluiceredis.RuleStoreConfig{Prefix: "editors"})
		_, err := rs.Save(context.Background(), "shop", 0, cluster.RuleVersion{Doc: []byte(shopRules), Author: "seed"})
		require.NoError(t, err)
		f := newFleet(t, func(c *dashboard.Config) { c.Rules = rs })
		twoEditors(t, f.srv, rs)
	})
}

// twoEditors has two editors save different documents over version 1 at
// once: one is written, the other gets the conflict, and nothing is
// overwritten.
func twoEditors(t *testing.T, srv *httptest.Server, rs cluster.RuleStore) cluster.RuleVersion {
	ed, eve := signIn(t, srv, "ed"), signIn(t, srv, "eve")
	docs := map[*client]string{
		ed:  "flow:\n  - resource: GET /api\n    threshold: 50\n",
		eve: "flow:\n  - resource: GET /api\n    threshold: 60\n",
	}
	codes := map[*client]int{}
	bodies := map[*client]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for c, doc := range docs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			code, body := c.post("/apps/shop/rules", url.Values{"base": {"1"}, "doc": {doc}})
			mu.Lock()
			codes[c], bodies[c] = code, body
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	require.ElementsMatch(t, []int{http.StatusSeeOther, http.StatusConflict}, []int{codes[ed], codes[eve]})
	loser, winner := ed, eve
	if codes[ed] == http.StatusSeeOther {
		loser, winner = eve, ed
	}
	require.Contains(t, bodies[loser], "conflict: version 2 was saved by")
	require.Contains(t, bodies[loser], `id="conflict"`, "the version saved meanwhile is shown")
	require.Contains(t, bodies[loser], `name="base" value="2"`, "saving again is against the version seen")
	cur, err := rs.Current(context.Background(), "shop")
	require.NoError(t, err)
	require.Equal(t, int64(2), cur.Version)
	require.Equal(t, docs[winner], string(cur.Doc), "nothing overwritten silently")
	return cur
}

func TestRollbackAndAudit(t *testing.T) {
	f := newFleet(t, nil)
	ed := signIn(t, f.srv, "ed")
	code, _ := ed.post("/apps/shop/rules", url.Values{"base": {"1"}, "doc": {"flow:\n  - resource: GET /api\n    threshold: 9\n"}, "comment": {"lower"}})
	require.Equal(t, http.StatusSeeOther, code)
	code, _ = ed.post("/apps/shop/rollback", url.Values{"base": {"2"}, "version": {"1"}})
	require.Equal(t, http.StatusSeeOther, code)
	cur, err := f.store.Current(context.Background(), "shop")
	require.NoError(t, err)
	require.Equal(t, int64(3), cur.Version)
	require.Equal(t, int64(1), cur.RollbackOf)
	require.Equal(t, shopRules, string(cur.Doc))
	// A rollback against a stale base is a conflict too.
	code, _ = ed.post("/apps/shop/rollback", url.Values{"base": {"2"}, "version": {"1"}})
	require.Equal(t, http.StatusConflict, code)

	es, err := f.store.AuditLog(context.Background(), "shop", 10)
	require.NoError(t, err)
	require.Len(t, es, 3, "the seed's save, ed's save, the rollback")
	require.Equal(t, "rollback", es[0].Action)
	require.Equal(t, int64(3), es[0].Version)
	require.Contains(t, es[0].Detail, "- "+"    threshold: 9\n+     threshold: 100")
	require.Equal(t, "save", es[1].Action)
	require.Equal(t, "ed", es[1].User)
	require.Equal(t, "-     threshold: 100\n+     threshold: 9\n", es[1].Detail)

	_, body := ed.get("/apps/shop/audit")
	require.Contains(t, body, "rollback")
	all, err := f.store.AuditLog(context.Background(), "", 10)
	require.NoError(t, err)
	require.Equal(t, "login", all[len(all)-3].Action, "the seed's saves, then ed's login")
}

func TestDeleteRule(t *testing.T) {
	f := newFleet(t, nil)
	ed := signIn(t, f.srv, "ed")
	code, _ := ed.post("/apps/shop/rules/delete", url.Values{"base": {"1"}, "kind": {"flow"}, "index": {"0"}})
	require.Equal(t, http.StatusSeeOther, code)
	cur, err := f.store.Current(context.Background(), "shop")
	require.NoError(t, err)
	require.Equal(t, "{}\n", string(cur.Doc))
	code, _ = ed.post("/apps/shop/rules/delete", url.Values{"base": {"2"}, "kind": {"flow"}, "index": {"0"}})
	require.Equal(t, http.StatusBadRequest, code, "no such rule")
}

func TestLoginLimitedBySluice(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	f := newFleet(t, func(c *dashboard.Config) { c.Clock = clk; c.LoginsPerUser = 3; c.LoginsPerIP = 5 })
	c := newClient(t, f.srv)
	for i := 0; i < 3; i++ {
		require.Equal(t, http.StatusUnauthorized, c.loginAs("ed", "wrong"), "attempt %d", i)
	}
	require.Equal(t, http.StatusTooManyRequests, c.loginAs("ed", password), "the right password beyond the limit")
	// Another user from the same address: the address's limit (5) is
	// reached after 1 more attempt.
	require.Equal(t, http.StatusSeeOther, c.loginAs("viv", password))
	require.Equal(t, http.StatusTooManyRequests, newClient(t, f.srv).loginAs("ada", password))
	clk.Advance(time.Minute)
	require.Equal(t, http.StatusSeeOther, newClient(t, f.srv).loginAs("ed", password))

	// Refused logins are kept apart from the audit log of changes, one
	// row per address and name: 3 wrong passwords and 1 attempt beyond the
	// limits for ed, 1 beyond them for ada.
	es, err := f.store.AuditLog(context.Background(), "", 20)
	require.NoError(t, err)
	for _, e := range es {
		require.NotEqual(t, "login-failed", e.Action, "a refused login in the audit log of changes")
	}
	_, body := signIn(t, f.srv, "ada").get("/audit")
	require.Regexp(t, `<td>127\.0\.0\.1</td><td>ed</td><td>3</td><td>1</td>`, body)
	require.Regexp(t, `<td>127\.0\.0\.1</td><td>ada</td><td>0</td><td>1</td>`, body)
}

func TestSessions(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	f := newFleet(t, func(c *dashboard.Config) {
		c.Clock = clk
		c.SessionLifetime = time.Hour
		c.MaxSessions = 3
		c.LoginsPerUser = 100
		c.LoginsPerIP = 100
	})
	c := signIn(t, f.srv, "viv")
	code, _, h := c.do("GET", "/", nil, nil)
	require.Equal(t, http.StatusOK, code)
	_ = h
	clk.Advance(time.Hour)
	code, _ = c.get("/")
	require.Equal(t, http.StatusSeeOther, code, "an expired session is gone")

	for i := 0; i < 10; i++ {
		signIn(t, f.srv, "viv")
	}
	require.Equal(t, 3, f.dash.Sessions(), "sessions are bounded")

	// Cookies: HttpOnly, SameSite=Strict; Secure over TLS.
	tls := httptest.NewTLSServer(f.dash)
	defer tls.Close()
	for _, srv := range []*httptest.Server{f.srv, tls} {
		c := newClient(t, srv)
		_, body, _ := c.do("GET", "/login", nil, nil)
		m := csrfInput.FindStringSubmatch(body)
		_, _, h := c.do("POST", "/login", url.Values{"csrf": {m[1]}, "name": {"viv"}, "password": {password}}, nil)
		var ck *http.Cookie
		for _, x := range (&http.Response{Header: h}).Cookies() {
			if x.Name == "sluice_session" {
				ck = x
			}
		}
		require.NotNil(t, ck)
		require.True(t, ck.HttpOnly)
		require.Equal(t, http.SameSiteStrictMode, ck.SameSite)
		require.Equal(t, srv == tls, ck.Secure)
		require.Len(t, ck.Value, 43, "32 random bytes")
	}

	// Logging out ends the session on the server.
	c = signIn(t, f.srv, "viv")
	code, _ = c.post("/logout", nil)
	require.Equal(t, http.StatusSeeOther, code)
	code, _ = c.get("/")
	require.Equal(t, http.StatusSeeOther, code)
}

func TestLoginNeedsItsCSRFToken(t *testing.T) {
	f := newFleet(t, nil)
	c := newClient(t, f.srv)
	code, _, _ := c.do("POST", "/login", url.Values{"name": {"ed"}, "password": {password}}, nil)
	require.Equal(t, http.StatusForbidden, code)
	c.get("/login")
	code, _, _ = c.do("POST", "/login", url.Values{"csrf": {"guess"}, "name": {"ed"}, "password": {password}}, nil)
	require.Equal(t, http.StatusForbidden, code)
}

func TestTrustedProxy(t *testing.T) {
	for _, tt := range []struct {
		from string
		want int
	}{
		{"127.0.0.1/32", http.StatusOK},
		{"10.0.0.0/8", http.StatusSeeOther}, // not from the proxy: anonymous
	} {
		f := newFleet(t, func(c *dashboard.Config) {
			c.Users = nil
			c.Proxy = &dashboard.TrustedProxy{From: []netip.Prefix{netip.MustParsePrefix(tt.from)}}
		})
		c := newClient(t, f.srv)
		hdr := http.Header{"X-Sluice-User": {"pat"}, "X-Sluice-Role": {"editor"}, "X-Sluice-Apps": {"shop"}}
		code, body, _ := c.do("GET", "/apps/shop/rules", nil, hdr)
		require.Equal(t, tt.want, code, tt.from)
		if tt.want != http.StatusOK {
			continue
		}
		require.Contains(t, body, `id="editor"`)
		form := url.Values{"base": {"1"}, "doc": {"flow:\n  - resource: x\n    threshold: 1\n"}}
		code, _, _ = c.do("POST", "/apps/shop/rules", form, hdr)
		require.Equal(t, http.StatusForbidden, code, "a write without the CSRF token")
		form.Set("csrf", c.csrf)
		code, _, _ = c.do("POST", "/apps/shop/rules", form, hdr)
		require.Equal(t, http.StatusSeeOther, code)
		cur, _ := f.store.Current(context.Background(), "shop")
		require.Equal(t, "pat", cur.Author)
		// The same session's cookie without the headers is nobody.
		code, _, _ = c.do("GET", "/apps/shop/rules", nil, nil)
		require.Equal(t, http.StatusSeeOther, code)
		// Another app is not granted.
		code, _, _ = c.do("GET", "/apps/billing", nil, hdr)
		require.Equal(t, http.StatusNotFound, code)
	}
}

func TestParseUsers(t *testing.T) {
	h := testHash(t)
	tests := []struct {
		give, wantErr string
	}{
		{"users:\n  - {name: a, hash: '" + h + "', role: viewer, apps: [shop]}\n", ""},
		{"users:\n  - {name: a, hash: '" + h + "', role: boss}\n", `user 0 ("a"): role`},
		{"users:\n  - {name: a, hash: 'plain', role: viewer}\n", `user 0 ("a"): hash`},
		{"users:\n  - {name: a, hash: '" + h + "', role: viewer}\n  - {name: a, hash: '" + h + "', role: viewer}\n", `user 1 ("a"): name: given twice`},
		{"users:\n  - {nme: a}\n", "field nme not found"},
	}
	for _, tt := range tests {
		_, err := dashboard.ParseUsers([]byte(tt.give))
		if tt.wantErr == "" {
			require.NoError(t, err)
			continue
		}
		require.ErrorContains(t, err, tt.wantErr)
	}
}

func TestNewRefusesIncompleteConfig(t *testing.T) {
	_, err := dashboard.New(dashboard.Config{Users: testUsers(t)})
	require.ErrorContains(t, err, "Config needs Rules (or RulesDir) or an Engine")
	f := newFleet(t, nil)
	_, err = dashboard.New(dashboard.Config{Rules: f.store})
	require.ErrorContains(t, err, "Users or a Proxy")
	_, err = dashboard.New(dashboard.Config{Rules: f.store, Proxy: &dashboard.TrustedProxy{}})
	require.ErrorContains(t, err, "Proxy.From")
	_ = strings.TrimSpace
}

// TestInstancesAndRefusedVersions: instances come from reports and frames;
// one that refused a version shows it with the error.
func TestInstancesAndRefusedVersions(t *testing.T) {
	f := newFleet(t, func(c *dashboard.Config) { c.Now = func() time.Time { return time.Unix(1_800_000_000, 0) } })
	ctx := context.Background()
	require.NoError(t, f.store.Report(ctx, "shop", cluster.RuleReport{Instance: "shop-1", Version: 1}, time.Hour))
	require.NoError(t, f.store.Report(ctx, "shop", cluster.RuleReport{Instance: "shop-2", Version: 1, Refused: 2,
		Err: `rules: flow rule 0 (resource "<b>x</b>"): Threshold: must be a positive number, got -1`}, time.Hour))
	require.NoError(t, f.tel.Publish(ctx, cluster.Frame{App: "shop", Instance: "shop-3", Second: 1_800_000_000 - 1, RuleVersion: 1,
		ClusterMode: "fallback", Shedding: true, System: stat.System{Load1: math.NaN(), CPUUsage: 0.25},
		Breakers: []cluster.BreakerFrame{{Resource: "GET /search", State: stat.BreakerOpen}}}, 10, time.Hour))
	viv := signIn(t, f.srv, "viv")
	code, body := viv.get("/apps/shop")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "shop-1")
	require.Contains(t, body, `refused version 2: rules: flow rule 0 (resource &#34;&lt;b&gt;x&lt;/b&gt;&#34;): Threshold: must be a positive number, got -1`)
	// A figure not measured is a dash that says why, never a blank cell.
	unknown := `<td class="unknown" title="not measured yet: an instance samples load, CPU and memory once it has a system rule on load1 or CPU usage">–</td>`
	require.Regexp(t, `shop-3</td><td class="health health-healthy">healthy · now</td><td></td>\s*<td>version 1</td>\s*<td>fallback</td><td>shedding</td>\s*`+
		regexp.QuoteMeta(unknown)+`\s*<td>25%</td>\s*`+regexp.QuoteMeta(unknown)+`</tr>`, body)
	require.Contains(t, body, `<td class="state-open">open</td>`)
	_, js := viv.get("/api/apps/shop/live")
	require.Contains(t, js, `"refused":2`)
	require.Contains(t, js, `"load1":null`, "NaN is no number in JSON")
	require.Contains(t, js, `"memory":0`)
	require.Contains(t, js, `"notMeasured":"not measured yet: an instance samples load, CPU and memory once it has a system rule on load1 or CPU usage"`,
		"the script's title for a dash")
	require.Contains(t, js, `"blockLabels":["other","flow",`)
	require.Contains(t, js, `"circuit breaker"`)
	code, _ = viv.get("/static/")
	require.Equal(t, http.StatusNotFound, code, "no listing")
}

// TestBoundedWhateverClientsSend: a body beyond the rule document limit is
// refused before it is read whole, and failed logins keep no session.
func TestBoundedWhateverClientsSend(t *testing.T) {
	f := newFleet(t, func(c *dashboard.Config) { c.LoginsPerIP = 1000; c.LoginsPerUser = 1000 })
	ed := signIn(t, f.srv, "ed")
	huge := strings.Repeat("a", rules.DefaultMaxBytes+128<<10)
	code, _ := ed.post("/apps/shop/rules", url.Values{"base": {"1"}, "doc": {huge}})
	require.Equal(t, http.StatusRequestEntityTooLarge, code)
	require.Equal(t, int64(1), version(t, f.store, "shop"))

	before := f.dash.Sessions()
	c := newClient(t, f.srv)
	for i := 0; i < 10; i++ { // each costs a bcrypt comparison, as a known user's would
		require.Equal(t, http.StatusUnauthorized, c.loginAs(fmt.Sprint("nobody-", i), "x"))
	}
	require.Equal(t, before, f.dash.Sessions(), "failed logins make no session")
}

// TestLiveSince: the page's later polls ask only for the last seconds.
func TestLiveSince(t *testing.T) {
	const now = 1_800_000_000
	f := newFleet(t, func(c *dashboard.Config) { c.Now = func() time.Time { return time.Unix(now, 0) } })
	ctx := context.Background()
	for s := int64(now - 10); s < now; s++ {
		for _, id := range []string{"a", "b"} {
			require.NoError(t, f.tel.Publish(ctx, cluster.Frame{App: "shop", Instance: id, Second: s,
				Resources: []cluster.ResourceSecond{{Resource: "r", Second: stat.Second{Pass: uint64(s - now + 20)}}}}, 100, time.Hour))
		}
	}
	viv := signIn(t, f.srv, "viv")
	type answer struct {
		Since     int64
		Resources []struct {
			Points []struct{ T, Pass int64 }
		}
	}
	tests := []struct {
		give      string
		wantSince int64
		wantFirst int64
		wantN     int
	}{
		{"", now - 300, now - 10, 10},
		{"?since=" + fmt.Sprint(now-3), now - 3, now - 3, 3},
		{"?since=1", now - 300, now - 10, 10}, // before the window: the window
		{"?since=junk", now - 300, now - 10, 10},
	}
	for _, tt := range tests {
		code, body := viv.get("/api/apps/shop/live" + tt.give)
		require.Equal(t, http.StatusOK, code)
		var a answer
		require.NoError(t, json.Unmarshal([]byte(body), &a))
		require.Equal(t, tt.wantSince, a.Since, tt.give)
		require.Len(t, a.Resources, 1, tt.give)
		require.Len(t, a.Resources[0].Points, tt.wantN, tt.give)
		require.Equal(t, tt.wantFirst, a.Resources[0].Points[0].T, tt.give)
		require.Equal(t, 2*(tt.wantFirst-now+20), a.Resources[0].Points[0].Pass, "two instances added up")
	}
}

// TestRulesInFileFormat: the rules page lists each rule as the editor's
// text has it (durations like "10s", enums by name), not as Go's JSON of
// the struct (nanoseconds, numbers).
func TestRulesInFileFormat(t *testing.T) {
	f := newFleet(t, nil)
	const doc = "flow:\n  - resource: GET /api\n    threshold: 50\n    behavior: throttle\n    maxQueueing: 500ms\n" +
		"circuitBreaker:\n  - resource: GET /api\n    strategy: error-count\n    threshold: 1000\n    retryTimeout: 10s\n" +
		"system:\n  - metric: load1\n    threshold: 8\n" +
		"param:\n  - resource: \"POST /orders: a\"\n    key: user\n    threshold: 10\n    duration: 1m0s\n    exceptions:\n      vip: 100\n      bot: 1\n"
	_, err := f.store.Save(context.Background(), "shop", 1, cluster.RuleVersion{Doc: []byte(doc), Author: "seed"})
	require.NoError(t, err)
	viv := signIn(t, f.srv, "viv")
	code, body := viv.get("/apps/shop/rules")
	require.Equal(t, http.StatusOK, code)
	rows := regexp.MustCompile(`(?s)<pre class="rule">(.*?)</pre>`).FindAllStringSubmatch(body, -1)
	var got []string
	for _, m := range rows {
		got = append(got, m[1])
	}
	require.Equal(t, []string{
		"resource: GET /api\nthreshold: 50\nthrottle:\n  maxQueueing: 500ms",
		"metric: load1\nthreshold: 8",
		"resource: GET /api\nstrategy: error-count\nthreshold: 1000\nretryTimeout: 10s",
		"resource: &#34;POST /orders: a&#34;\nkey: user\nthreshold: 10\nduration: 1m0s\nexceptions:\n  bot: 1\n  vip: 100",
	}, got)
	require.NotContains(t, body, "10000000000")
	require.NotContains(t, body, `"retryTimeout"`)
	// Each text, as a list item under its kind, is the rule again.
	var again strings.Builder
	for i, kind := range []string{"flow", "system", "circuitBreaker", "param"} {
		again.WriteString(kind + ":\n  - " + strings.ReplaceAll(html.UnescapeString(got[i]), "\n", "\n    ") + "\n")
	}
	want, err := rules.Decode([]byte(doc), rules.YAML)
	require.NoError(t, err)
	have, err := rules.Decode([]byte(again.String()), rules.YAML)
	require.NoError(t, err, again.String())
	require.Equal(t, want, have)
}

// TestLegendKeysForEveryBlockType: every block type the live answer names
// has a line colour in the script and a legend key in the stylesheet, so
// whatever reason refuses requests, its line is named in its colour.
func TestLegendKeysForEveryBlockType(t *testing.T) {
	f := newFleet(t, nil)
	viv := signIn(t, f.srv, "viv")
	_, body := viv.get("/api/apps/shop/live")
	var l struct{ BlockTypes, BlockLabels []string }
	require.NoError(t, json.Unmarshal([]byte(body), &l))
	require.Len(t, l.BlockLabels, len(l.BlockTypes))
	_, js := viv.get("/static/app.js")
	_, css := viv.get("/static/style.css")
	for _, n := range append([]string{"pass", "block"}, l.BlockTypes...) {
		m := regexp.MustCompile(`\b` + n + `: "(#[0-9a-f]{6})"`).FindStringSubmatch(js)
		require.NotNil(t, m, "no colour for %s in app.js", n)
		require.Regexp(t, `\.k\.`+n+`::before \{[^}]*`+m[1]+`[; ]`, css, "the legend's key of %s is not %s", n, m[1])
	}
}
