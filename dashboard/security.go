package dashboard

import (
	"cmp"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-go/sluice/core"
)

// crossOrigin returns why a request that changes something (the login
// included) is refused as coming from another origin, or "" when it may
// go on. A browser says where a request comes from: Sec-Fetch-Site (every
// current browser) must be "same-origin" (or "none", a request the user
// made, not a page); without it, Origin must name the dashboard's own
// host. A request with neither comes from no browser page (curl, a
// script), which a cross-origin page cannot make; it still needs its CSRF
// token. A page on another port of the same host, or on a parent or
// sibling domain, is "same-site" to the browser and may plant cookies, but
// is refused here: the login does not rest on a cookie.
func (d *Dashboard) crossOrigin(r *http.Request) string {
	const refused = "refused: this request comes from a page of another origin (%s); " +
		"open the dashboard at its own address and try again"
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "same-origin", "none":
		return ""
	case "":
	default:
		return fmt.Sprintf(refused, "Sec-Fetch-Site: "+clip(site))
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return ""
	}
	u, err := url.Parse(origin)
	if err == nil && u.Host != "" && (u.Scheme == "http" || u.Scheme == "https") {
		if strings.EqualFold(u.Host, r.Host) {
			return ""
		}
		// Behind the trusted proxy, the host the browser used may be the
		// proxy's.
		if d.cfg.Proxy != nil && d.fromProxy(r) && strings.EqualFold(u.Host, r.Header.Get("X-Forwarded-Host")) {
			return ""
		}
	}
	return fmt.Sprintf(refused, "Origin: "+clip(origin))
}

// maxAppName bounds an application's name.
const maxAppName = 128

// checkAppName refuses an application name that is not 1 to maxAppName
// characters of [A-Za-z0-9._-] not starting with '.': what a rules
// directory can hold as a file name, and what a page shows as it is. A
// save under another name is refused before the store is asked, so that
// no application is created with it.
func checkAppName(app string) error {
	ok := app != "" && len(app) <= maxAppName && app[0] != '.'
	for i := 0; ok && i < len(app); i++ {
		c := app[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
	}
	if !ok {
		return fmt.Errorf("application name %q: want 1 to %d characters of [A-Za-z0-9._-], not starting with '.'; nothing was saved",
			clip(app), maxAppName)
	}
	return nil
}

// sessionEnded answers a write of the trusted-header mode whose page's
// session has ended (expired, or replaced by newer sessions of the same
// user): nothing is done; the user gets a new session, and a rule
// document being saved is shown again in the editor, to save again.
func (d *Dashboard) sessionEnded(w http.ResponseWriter, r *http.Request, c *call, rt route) {
	c.sess = d.sessions.create(c.user)
	d.setCookie(w, r, sessionCookie, c.sess.id, d.cfg.SessionLifetime)
	msg := fmt.Sprintf("Nothing was changed: the session of the page you sent this from has ended "+
		"(sessions last %v, and each user keeps its %d newest). ", d.cfg.SessionLifetime, maxSessionsPerUser)
	if rt.pattern == "/apps/{app}/rules" && c.user.can(c.app, true) {
		cur, err := d.store.Current(r.Context(), c.app)
		if err == nil {
			v := d.view(c, c.app+": rules")
			base, _ := formInt(r, "base")
			doc := strings.ReplaceAll(r.PostForm.Get("doc"), "\r\n", "\n")
			v.Data = &rulesData{Version: cur, Base: base, Doc: doc, Rules: rowsOf(cur.Doc), Kinds: kindKeys}
			v.Error = msg + "Your text is below: save it again."
			d.render(w, http.StatusForbidden, "rules", v)
			return
		}
	}
	d.fail(w, r, c, http.StatusForbidden, msg+"Reload the page and make the change again.")
}

// attemptLimit admits at most limit attempts per key within any window
// (a minute): an admitted attempt counts for exactly window, and the
// attempt that would be the limit+1st within it is refused, however the
// attempts are spread. (A token bucket, the param rules' way, refills as
// the minute goes: 100 a minute let 197 of 200 attempts spread over 59 s
// through.) Each key keeps the times of its
// admitted attempts of the last window, at most limit; at most maxKeys
// keys are kept. It is safe for concurrent use.
type attemptLimit struct {
	clock   core.Clock
	limit   int
	window  int64
	maxKeys int

	mu   sync.Mutex
	keys map[string]*attemptTimes
}

// attemptTimes are a key's admitted attempts within the window, oldest
// first.
type attemptTimes struct{ at []int64 }

// maxLimitKeys bounds the keys an attemptLimit keeps.
const maxLimitKeys = 100000

func newAttemptLimit(clock core.Clock, limit int64, window time.Duration) *attemptLimit {
	return &attemptLimit{clock: clock, limit: int(limit), window: int64(window), maxKeys: maxLimitKeys,
		keys: map[string]*attemptTimes{}}
}

// allow counts an attempt of key and reports whether it is admitted.
func (l *attemptLimit) allow(key string) bool {
	now := l.clock.Nanotime()
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.keys[key]
	if a == nil {
		if len(l.keys) >= l.maxKeys {
			l.pruneLocked(now)
		}
		a = &attemptTimes{at: make([]int64, 0, min(l.limit, 8))}
		l.keys[key] = a
	}
	n := 0
	for n < len(a.at) && now-a.at[n] >= l.window {
		n++
	}
	if n > 0 {
		a.at = append(a.at[:0], a.at[n:]...)
	}
	if len(a.at) >= l.limit {
		return false
	}
	a.at = append(a.at, now)
	return true
}

// pruneLocked drops the keys without an attempt within the window, or,
// when every key has one, the key whose newest attempt is the oldest.
func (l *attemptLimit) pruneLocked(now int64) {
	var oldest string
	var at int64
	for k, a := range l.keys {
		newest := int64(math.MinInt64)
		if len(a.at) > 0 {
			newest = a.at[len(a.at)-1]
		}
		if newest == math.MinInt64 || now-newest >= l.window {
			delete(l.keys, k)
			continue
		}
		if oldest == "" || newest < at {
			oldest, at = k, newest
		}
	}
	if len(l.keys) >= l.maxKeys {
		delete(l.keys, oldest)
	}
}

// loginBackoff slows the guessing of one name from one address: after
// LoginsPerUser consecutive wrong passwords, the pair waits a minute before its
// next attempt, twice as long after each further wrong one, at most an
// hour. A right password from the pair ends it. Other addresses, the
// name's owner among them, are not slowed by it. It is bounded (maxPairs)
// and safe for concurrent use.
type loginBackoff struct {
	clock core.Clock
	free  int

	mu    sync.Mutex
	pairs map[string]*backoffPair
}

type backoffPair struct {
	failures int
	last     int64 // the last wrong password, on clock
}

const (
	backoffFirst = time.Minute
	backoffMax   = time.Hour
	maxPairs     = 100000
)

func newLoginBackoff(clock core.Clock, free int) *loginBackoff {
	return &loginBackoff{clock: clock, free: free, pairs: map[string]*backoffPair{}}
}

// wait returns how long the pair must still wait, 0 when it may try.
func (b *loginBackoff) wait(key string) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.pairs[key]
	if p == nil || p.failures < b.free {
		return 0
	}
	left := p.last + int64(b.delay(p.failures)) - b.clock.Nanotime()
	if left <= 0 {
		return 0
	}
	return time.Duration(left)
}

// delay is the wait after n consecutive wrong passwords (n >= free).
func (b *loginBackoff) delay(n int) time.Duration {
	d := backoffFirst
	for i := b.free; i < n && d < backoffMax; i++ {
		d *= 2
	}
	return min(d, backoffMax)
}

// failed counts a wrong password of the pair.
func (b *loginBackoff) failed(key string) {
	now := b.clock.Nanotime()
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.pairs[key]
	if p == nil {
		if len(b.pairs) >= maxPairs {
			b.pruneLocked(now)
		}
		p = &backoffPair{}
		b.pairs[key] = p
	}
	p.failures++
	p.last = now
}

// pruneLocked drops the pairs whose wait is over, or, when none is, the
// one that failed longest ago.
func (b *loginBackoff) pruneLocked(now int64) {
	var oldest string
	var at int64
	for k, p := range b.pairs {
		if p.failures < b.free || now-p.last >= int64(b.delay(p.failures)) {
			delete(b.pairs, k)
			continue
		}
		if oldest == "" || p.last < at {
			oldest, at = k, p.last
		}
	}
	if len(b.pairs) >= maxPairs {
		delete(b.pairs, oldest)
	}
}

// succeeded ends the pair's backoff.
func (b *loginBackoff) succeeded(key string) {
	b.mu.Lock()
	delete(b.pairs, key)
	b.mu.Unlock()
}

// refusedLogins is the log of refused logins, kept apart from the audit
// log of changes (which refused logins, however many, never push out): one
// row per client address, name and refusedInterval, counting the
// attempts; at most maxRefusedRows rows, the oldest dropped first. It is
// in memory, and safe for concurrent use.
type refusedLogins struct {
	clock core.Clock
	now   func() time.Time

	mu      sync.Mutex
	rows    map[refusedKey]*refusedRow
	dropped int64 // attempts of rows dropped for room
}

type refusedKey struct {
	ip, name string
	slot     int64 // the interval, on clock
}

// refusedRow is one address and name in one interval.
type refusedRow struct {
	IP, Name    string
	First, Last time.Time // wall clock
	Wrong       int64     // wrong name or password
	Limited     int64     // refused by the limits, the password not checked
	last        int64     // on clock
}

const (
	refusedInterval = 10 * time.Minute
	maxRefusedRows  = 1000
)

func newRefusedLogins(clock core.Clock, now func() time.Time) *refusedLogins {
	return &refusedLogins{clock: clock, now: now, rows: map[refusedKey]*refusedRow{}}
}

// add counts a refused login of name from ip; limited tells a refusal by
// the limits from a wrong password.
func (l *refusedLogins) add(ip, name string, limited bool) {
	mono, wall := l.clock.Nanotime(), l.now()
	k := refusedKey{ip: ip, name: clip(name), slot: mono / int64(refusedInterval)}
	l.mu.Lock()
	defer l.mu.Unlock()
	row := l.rows[k]
	if row == nil {
		if len(l.rows) >= maxRefusedRows {
			var oldest refusedKey
			var at *refusedRow
			for k, r := range l.rows {
				if at == nil || r.last < at.last {
					oldest, at = k, r
				}
			}
			l.dropped += at.Wrong + at.Limited
			delete(l.rows, oldest)
		}
		row = &refusedRow{IP: ip, Name: k.name, First: wall}
		l.rows[k] = row
	}
	row.Last, row.last = wall, mono
	if limited {
		row.Limited++
	} else {
		row.Wrong++
	}
}

// list returns the rows, the newest first, and the attempts of rows
// dropped for room.
func (l *refusedLogins) list() ([]refusedRow, int64) {
	l.mu.Lock()
	out := make([]refusedRow, 0, len(l.rows))
	for _, r := range l.rows {
		out = append(out, *r)
	}
	dropped := l.dropped
	l.mu.Unlock()
	slices.SortFunc(out, func(a, b refusedRow) int {
		if a.last != b.last {
			return cmp.Compare(b.last, a.last)
		}
		return strings.Compare(a.IP+a.Name, b.IP+b.Name)
	})
	return out, dropped
}
