package dashboard

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/filestore"
	"github.com/sluice-go/sluice/dashboard/internal/clock"
	"github.com/sluice-go/sluice/dashboard/internal/memstore"
	"github.com/sluice-go/sluice/fleet"
	"github.com/sluice-go/sluice/rules"
)

//go:embed web
var webFS embed.FS

// Names of the dashboard's cookies.
const (
	sessionCookie = "sluice_session"
	loginCookie   = "sluice_login" // the login form's CSRF token (double submit)
)

// perNameFactor is how many times the per-address-and-name limit the
// attempts for one name may be, from all addresses together, in a minute.
const perNameFactor = 20

// maxForm bounds a request body: a rule document of rules.DefaultMaxBytes
// and the form around it.
const maxForm = rules.DefaultMaxBytes + 64<<10

// Dashboard is the web interface: an http.Handler to mount (at the root
// of a host or under a prefix with http.StripPrefix). Make one with New and
// Close it when done. It is safe for concurrent use.
type Dashboard struct {
	cfg      Config
	store    cluster.RuleStore
	tel      cluster.Telemetry
	accounts *usersStore
	sessions *sessions
	perIP    *attemptLimit  // login attempts per minute per client address,
	perPair  *attemptLimit  // per address and name,
	perName  *attemptLimit  // and per name
	backoff  *loginBackoff  // per address and name, after repeated wrong passwords
	refused  *refusedLogins // refused logins, apart from the change audit
	pages    map[string]*template.Template
	static   http.Handler
	mux      *http.ServeMux
	routes   []route
	local    *localStore   // the Engine's rules; nil without an Engine
	frames   *fleet.Member // publishes the Engine's frames; nil when it publishes none for the dashboard
	window   time.Duration

	ruleCache ruleCache // each application's rules in force, decoded
	stepCache stepCache // the rules of versions saved in the charts' window, decoded
	diffs     diffCache // the rule diffs of saved versions

	reads readHealth // the app page's reads of the store, to date a loss

	once sync.Once
}

// hashCost is the bcrypt cost of the hashes the dashboard makes: a new
// password's and dummyHash. The package's tests lower it to bcrypt.MinCost,
// the cost of their users' hashes (cost 10 takes seconds under -race).
var hashCost = bcrypt.DefaultCost

// dummyHash is compared against when a login names no known user, so that
// an unknown name takes as long as a wrong password. It is made at the
// first such login, not when the package is loaded.
var dummyHash = sync.OnceValue(func() []byte {
	h, _ := bcrypt.GenerateFromPassword([]byte("sluice-dashboard-dummy"), hashCost)
	return h
})

// New returns a Dashboard for cfg. With an Engine, it loads the version
// of the Engine's rules in force in the store into the Engine (or seeds the
// store with the Engine's rules as version 1), and, without Telemetry,
// publishes the Engine's frames (fleet.Join) until Close.
//
// complexity: checks and defaults of every Config field, then the engine's first load; a line or two each
func New(cfg Config) (*Dashboard, error) {
	switch {
	case cfg.Rules != nil && cfg.RulesDir != "":
		return nil, errors.New("dashboard: Config has Rules and RulesDir: set one")
	case cfg.Engine != nil && cfg.Rules == nil && cfg.RulesDir == "":
		return nil, errors.New("dashboard: Config.Engine needs RulesDir, the directory where its rules are kept " +
			"across restarts (or Rules, a store of them)")
	case cfg.Rules == nil && cfg.RulesDir == "":
		return nil, errors.New("dashboard: Config needs Rules (or RulesDir) or an Engine")
	}
	if len(cfg.Users) == 0 && cfg.UsersFile == "" && cfg.Proxy == nil {
		return nil, errors.New("dashboard: Config needs Users or a Proxy (or a UsersFile)")
	}
	if len(cfg.Users) > 0 && cfg.UsersFile != "" {
		return nil, errors.New("dashboard: Config has both Users and a UsersFile: give one")
	}
	if cfg.Proxy != nil && len(cfg.Proxy.From) == 0 {
		return nil, errors.New("dashboard: Proxy.From: the proxy's addresses are required")
	}
	if err := validateUsers(cfg.Users); err != nil {
		return nil, err
	}
	if cfg.App == "" {
		cfg.App = "local"
	}
	if cfg.SessionLifetime <= 0 {
		cfg.SessionLifetime = 8 * time.Hour
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 10000
	}
	if cfg.LoginsPerIP <= 0 {
		cfg.LoginsPerIP = 10
	}
	if cfg.LoginsPerUser <= 0 {
		cfg.LoginsPerUser = 5
	}
	if cfg.Window <= 0 {
		cfg.Window = 5 * time.Minute
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RulesDir != "" {
		fs, err := filestore.Open(cfg.RulesDir, filestore.Config{Now: cfg.Now})
		if err != nil {
			return nil, fmt.Errorf("dashboard: RulesDir: %w", err)
		}
		cfg.Rules = fs
	}
	d := &Dashboard{cfg: cfg, store: cfg.Rules, tel: cfg.Telemetry, window: cfg.Window}
	accounts, err := newUsersStore(cfg.Users, cfg.UsersFile, cfg.Clock)
	if err != nil {
		return nil, err
	}
	d.accounts = accounts
	d.sessions = newSessions(cfg.Clock, cfg.SessionLifetime, cfg.MaxSessions)

	if cfg.Engine != nil {
		d.local = &localStore{RuleStore: cfg.Rules, eng: cfg.Engine, app: cfg.App}
		d.store = d.local
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		err := d.local.start(ctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("dashboard: the engine's rules: %w", err)
		}
		if d.tel == nil {
			frames := memstore.New(cfg.Now)
			m, err := fleet.Join(cfg.Engine, fleet.Config{App: cfg.App, Telemetry: frames, Keep: int(cfg.Window / time.Second)})
			if err != nil {
				return nil, fmt.Errorf("dashboard: the engine's frames: %w", err)
			}
			d.tel, d.frames = frames, m
		}
	}

	d.backoff = newLoginBackoff(cfg.Clock, int(cfg.LoginsPerUser))
	d.refused = newRefusedLogins(cfg.Clock, cfg.Now)
	d.perIP = newAttemptLimit(cfg.Clock, cfg.LoginsPerIP, time.Minute)
	d.perPair = newAttemptLimit(cfg.Clock, cfg.LoginsPerUser, time.Minute)
	d.perName = newAttemptLimit(cfg.Clock, perNameFactor*cfg.LoginsPerUser, time.Minute)

	pages, err := parsePages()
	if err != nil {
		d.Close()
		return nil, err
	}
	d.pages = pages
	static, _ := fs.Sub(webFS, "web/static")
	d.static = http.StripPrefix("/static/", http.FileServerFS(static))
	d.mux = http.NewServeMux()
	d.routes = d.routeTable()
	for _, rt := range d.routes {
		d.mux.Handle(rt.method+" "+rt.pattern, d.guard(rt))
	}
	return d, nil
}

// Close stops the Engine's frames. It is safe to
// call more than once.
func (d *Dashboard) Close() error {
	d.once.Do(func() {
		if d.frames != nil {
			d.frames.Close()
		}
	})
	return nil
}

// ServeHTTP serves the dashboard.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if r.TLS != nil {
		h.Set("Strict-Transport-Security", "max-age=31536000")
	}
	d.mux.ServeHTTP(w, r)
}

// access is what a route requires.
type access uint8

const (
	public   access = iota // anyone (login, static files)
	read                   // a session; the application granted when the route names one
	write                  // read, a CSRF token, and the right to change the application's rules
	admin                  // an admin
	signedIn               // a session and a CSRF token (logout)
)

// route is one endpoint of the dashboard.
type route struct {
	method, pattern string
	access          access
	api             bool // answers JSON: 401 instead of a redirect to the login page
	handle          func(w http.ResponseWriter, r *http.Request, c *call)
}

// call is what the guard learned about a request.
type call struct {
	user *principal
	sess *session
	app  string // the {app} of the route, "" when none
}

func (d *Dashboard) routeTable() []route {
	return []route{
		{"GET", "/static/", public, false, d.staticFile},
		{"GET", "/login", public, false, d.loginPage},
		{"POST", "/login", public, false, d.login},
		{"POST", "/logout", signedIn, false, d.logout},
		{"GET", "/{$}", read, false, d.appsPage},
		{"GET", "/apps/{app}", read, false, d.appPage},
		{"GET", "/apps/{app}/rules", read, false, d.rulesPage},
		{"POST", "/apps/{app}/rules", write, false, d.saveRules},
		{"POST", "/apps/{app}/rules/delete", write, false, d.deleteRule},
		{"GET", "/apps/{app}/history", read, false, d.historyPage},
		{"POST", "/apps/{app}/rollback", write, false, d.rollback},
		{"GET", "/apps/{app}/audit", read, false, d.auditPage},
		{"POST", "/apps/{app}/retire", admin, false, d.retire},
		{"GET", "/api/apps/{app}/live", read, true, d.live},
		{"GET", "/api/apps/{app}/resources", read, true, d.resources},
		{"GET", "/api/apps/{app}/resource", read, true, d.resource},
		{"GET", "/api/apps/{app}/buckets", read, true, d.buckets},
		{"GET", "/audit", admin, false, d.auditPage},
		{"GET", "/users", admin, false, d.usersPage},
		{"POST", "/users/add", admin, false, d.addUser},
		{"POST", "/users/update", admin, false, d.updateUser},
		{"POST", "/users/password", admin, false, d.resetPassword},
		{"POST", "/users/delete", admin, false, d.deleteUser},
	}
}

// guard checks who calls, their CSRF token on writes, and their right to
// the route and its application, before the handler runs.
//
// complexity: who calls, CSRF on writes, the route's role and the application's, each a refusal of its own
func (d *Dashboard) guard(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		c := &call{app: r.PathValue("app")}
		reading := r.Method == http.MethodGet || r.Method == http.MethodHead
		if !reading {
			// Before anything else, the login included: a write comes
			// from a page of the dashboard or from no page at all.
			if why := d.crossOrigin(r); why != "" {
				d.fail(w, r, c, http.StatusForbidden, why)
				return
			}
		}
		if rt.access == public {
			rt.handle(w, r, c)
			return
		}
		c.user, c.sess = d.who(w, r, rt)
		if c.user == nil {
			if reading && !rt.api {
				http.Redirect(w, r, "/login", http.StatusSeeOther)
				return
			}
			msg := "log in first"
			if !reading && d.sessionCookie(r) != "" {
				msg = "Nothing was changed: your session has ended (it expired, you logged out or logged in again, " +
					"or newer sessions of yours replaced it). Log in again and make the change again."
			}
			d.fail(w, r, c, http.StatusUnauthorized, msg)
			return
		}
		if !reading {
			if err := r.ParseForm(); err != nil {
				d.fail(w, r, c, http.StatusRequestEntityTooLarge, formTooLarge(err))
				return
			}
			tok := r.PostForm.Get("csrf")
			if tok == "" {
				tok = r.Header.Get("X-CSRF-Token")
			}
			if !equalToken(tok, c.sess.csrf) {
				if c.sess.id == "" && tok != "" {
					// The trusted-header mode: the page's session has
					// ended. Say so, with a new session to try again.
					d.sessionEnded(w, r, c, rt)
					return
				}
				d.fail(w, r, c, http.StatusForbidden, "missing or wrong CSRF token: reload the page and try again")
				return
			}
		}
		switch rt.access {
		case admin:
			if c.user.role != Admin {
				d.fail(w, r, c, http.StatusForbidden, "for admins only")
				return
			}
		case read, write:
			if rt.access == read && c.app != "" && !c.user.can(c.app, false) {
				// Not granted: as if it did not exist.
				d.fail(w, r, c, http.StatusNotFound, "no such application")
				return
			}
			if rt.access == write && !c.user.can(c.app, true) {
				d.fail(w, r, c, http.StatusForbidden, "you may not change the rules of this application")
				return
			}
			if rt.access == write {
				if err := checkAppName(c.app); err != nil {
					d.fail(w, r, c, http.StatusBadRequest, err.Error())
					return
				}
			}
		}
		rt.handle(w, r, c)
	})
}

// sessionCookie returns the session cookie's value, "" when none.
func (d *Dashboard) sessionCookie(r *http.Request) string {
	if ck, err := r.Cookie(sessionCookie); err == nil {
		return ck.Value
	}
	return ""
}

// who returns the caller and its session, or nil. In the trusted-header
// mode a page read by the proxy's user gets a session of that user when it
// has none (its forms need the session's CSRF token); the JSON API, HEAD
// and writes make none.
func (d *Dashboard) who(w http.ResponseWriter, r *http.Request, rt route) (*principal, *session) {
	var ss *session
	if id := d.sessionCookie(r); id != "" {
		ss = d.sessions.get(id)
	}
	if d.cfg.Proxy == nil {
		if ss == nil {
			return nil, nil
		}
		// The user as the users are now: a deleted user's session ends, a
		// changed role or grant applies from the next request.
		p := d.accounts.current().princ[ss.user.name]
		if p == nil {
			d.sessions.delete(ss.id)
			return nil, nil
		}
		return p, ss
	}
	p := d.proxyUser(r)
	if p == nil {
		return nil, nil
	}
	if ss != nil && ss.user.name == p.name && ss.user.role == p.role {
		// The headers' grants, which may change from request to request;
		// the session gives the CSRF token.
		return p, ss
	}
	if r.Method != http.MethodGet || rt.api {
		// A write needs the CSRF token of a session made by an earlier
		// page; the API and HEAD need none.
		return p, &session{}
	}
	ss = d.sessions.create(p)
	d.setCookie(w, r, sessionCookie, ss.id, d.cfg.SessionLifetime)
	return p, ss
}

// proxyUser reads the user from the trusted proxy's headers, or nil when
// the request is not from the proxy or names no valid user.
func (d *Dashboard) proxyUser(r *http.Request) *principal {
	if !d.fromProxy(r) {
		return nil
	}
	uh, rh, ah := d.cfg.Proxy.headers()
	name := strings.TrimSpace(r.Header.Get(uh))
	role, err := ParseRole(r.Header.Get(rh))
	if name == "" || len(name) > 256 || err != nil {
		return nil
	}
	p := &principal{name: name, role: role, apps: map[string]bool{}}
	for _, a := range strings.Split(r.Header.Get(ah), ",") {
		if a = strings.TrimSpace(a); a != "" && len(p.apps) < 1000 {
			p.apps[a] = true
		}
	}
	return p
}

// fromProxy reports whether r comes from one of the trusted proxy's
// addresses.
func (d *Dashboard) fromProxy(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	addr = addr.Unmap()
	for _, p := range d.cfg.Proxy.From {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

func (d *Dashboard) setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge time.Duration) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: int(maxAge / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil || d.cfg.SecureCookies})
}

// clientIP is the address a request came from: the proxy's when behind
// one (the login page is not used in the trusted-header mode).
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// audit records e, best effort: a store that fails to record it does not
// undo what was done (the error is shown on the page that did it).
func (d *Dashboard) audit(ctx context.Context, e cluster.AuditEntry) error {
	return d.store.Audit(ctx, e)
}

// staticFile serves the embedded script and stylesheet (no listings).
func (d *Dashboard) staticFile(w http.ResponseWriter, r *http.Request, c *call) {
	if strings.HasSuffix(r.URL.Path, "/") {
		http.NotFound(w, r)
		return
	}
	d.static.ServeHTTP(w, r)
}
