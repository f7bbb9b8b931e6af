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

	"github.com/sluice-go/sluice"
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
	clock   sluice.Clock
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

func newAttemptLimit(clock sluice.Clock, limit int64, window time.Duration) *attemptLimit {
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
	clock sluice.Clock
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

func newLoginBackoff(clock sluice.Clock, free int) *loginBackoff {
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
// log of changes (which refused logins, however many, never push out). It
// is in memory, bounded whatever clients send, and safe for concurrent
// use. It keeps:
//
//   - totals since the start, never dropped;
//   - per client address, for the maxOffenders addresses with the most
//     refused logins (the top offenders), their counts; a new address,
//     when they are full, takes the place of the one with the fewest, so
//     that a flood from many addresses pushes out none of the busiest;
//   - rows, one per address, name and refusedInterval: at most
//     maxRefusedRows, of which one address holds at most maxRowsPerIP. An
//     address beyond its share drops its own oldest row; when the rows
//     are full, a new one takes the place of the oldest row of the
//     address holding the most. One address cannot evict the rows of
//     another, whatever it sends: the evidence of a brute force stays.
type refusedLogins struct {
	clock sluice.Clock
	now   func() time.Time

	mu        sync.Mutex
	rows      map[refusedKey]*refusedRow
	perIP     map[string]int // rows held by each address
	offenders map[string]*offender
	total     offender // every refused login since the start
	others    offender // those of addresses no longer among the offenders
	dropped   int64    // attempts of rows dropped for room
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

// offender is the refused logins of one address (or of all).
type offender struct {
	IP          string
	First, Last time.Time // wall clock
	Wrong       int64
	Limited     int64
	// Rows counts the rows (names and intervals) the address made.
	Rows int64
	last int64 // on clock
}

func (o *offender) count(wall time.Time, mono int64, limited bool) {
	if o.First.IsZero() {
		o.First = wall
	}
	o.Last, o.last = wall, mono
	if limited {
		o.Limited++
	} else {
		o.Wrong++
	}
}

// Attempts counts the refused logins.
func (o *offender) Attempts() int64 { return o.Wrong + o.Limited }

const (
	refusedInterval = 10 * time.Minute
	maxRefusedRows  = 1000
	maxRowsPerIP    = 50
	maxOffenders    = 1000
)

func newRefusedLogins(clock sluice.Clock, now func() time.Time) *refusedLogins {
	return &refusedLogins{clock: clock, now: now, rows: map[refusedKey]*refusedRow{},
		perIP: map[string]int{}, offenders: map[string]*offender{}}
}

// add counts a refused login of name from ip; limited tells a refusal by
// the limits from a wrong password.
func (l *refusedLogins) add(ip, name string, limited bool) {
	mono, wall := l.clock.Nanotime(), l.now()
	ip = clip(ip)
	k := refusedKey{ip: ip, name: clip(name), slot: mono / int64(refusedInterval)}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total.count(wall, mono, limited)
	row := l.rows[k]
	newRow := row == nil
	if newRow {
		switch {
		case l.perIP[ip] >= maxRowsPerIP:
			l.dropOldestLocked(ip)
		case len(l.rows) >= maxRefusedRows:
			l.dropOldestLocked(l.largestLocked())
		}
		row = &refusedRow{IP: ip, Name: k.name, First: wall}
		l.rows[k] = row
		l.perIP[ip]++
	}
	row.Last, row.last = wall, mono
	if limited {
		row.Limited++
	} else {
		row.Wrong++
	}
	o := l.offenders[ip]
	if o == nil {
		if len(l.offenders) >= maxOffenders {
			l.dropOffenderLocked()
		}
		o = &offender{IP: ip}
		l.offenders[ip] = o
	}
	o.count(wall, mono, limited)
	if newRow {
		o.Rows++
	}
}

// largestLocked returns the address holding the most rows; of those, the
// one with the fewest refused logins counted (the least evidence), then
// the smallest, for a stable choice.
func (l *refusedLogins) largestLocked() string {
	var ip string
	n, att := 0, int64(0)
	for a, m := range l.perIP {
		var aa int64
		if o := l.offenders[a]; o != nil {
			aa = o.Attempts()
		}
		if m > n || m == n && (aa < att || aa == att && a < ip) {
			ip, n, att = a, m, aa
		}
	}
	return ip
}

// dropOldestLocked drops ip's oldest row, counting its attempts dropped.
func (l *refusedLogins) dropOldestLocked(ip string) {
	var oldest refusedKey
	var at *refusedRow
	for k, r := range l.rows {
		if k.ip == ip && (at == nil || r.last < at.last) {
			oldest, at = k, r
		}
	}
	if at == nil {
		return
	}
	l.dropped += at.Wrong + at.Limited
	delete(l.rows, oldest)
	if l.perIP[ip]--; l.perIP[ip] <= 0 {
		delete(l.perIP, ip)
	}
}

// dropOffenderLocked drops the offender with the fewest refused logins
// (of those, the one seen longest ago), adding its counts to others.
func (l *refusedLogins) dropOffenderLocked() {
	var min *offender
	for _, o := range l.offenders {
		if min == nil || o.Attempts() < min.Attempts() || o.Attempts() == min.Attempts() && o.last < min.last {
			min = o
		}
	}
	l.others.Wrong += min.Wrong
	l.others.Limited += min.Limited
	l.others.Rows++ // an address
	delete(l.offenders, min.IP)
}

// refusedSummary is what the audit page shows of the refused logins.
type refusedSummary struct {
	Rows    []refusedRow // the newest first
	Dropped int64        // attempts of rows dropped for room
	// Total counts every refused login since the start; Offenders are the
	// addresses with the most, the most first (at most maxShownOffenders);
	// Tracked how many addresses are counted, and Others the refused
	// logins of addresses no longer counted (Others.Rows: how many).
	Total     offender
	Offenders []offender
	Tracked   int
	Others    offender
}

// maxShownOffenders is the most offenders the page lists.
const maxShownOffenders = 20

// summary returns the rows, the newest first, the totals and the top
// offenders.
func (l *refusedLogins) summary() refusedSummary {
	l.mu.Lock()
	out := refusedSummary{Rows: make([]refusedRow, 0, len(l.rows)), Dropped: l.dropped, Total: l.total,
		Others: l.others, Tracked: len(l.offenders), Offenders: make([]offender, 0, len(l.offenders))}
	for _, r := range l.rows {
		out.Rows = append(out.Rows, *r)
	}
	for _, o := range l.offenders {
		out.Offenders = append(out.Offenders, *o)
	}
	l.mu.Unlock()
	slices.SortFunc(out.Rows, func(a, b refusedRow) int {
		if a.last != b.last {
			return cmp.Compare(b.last, a.last)
		}
		return strings.Compare(a.IP+a.Name, b.IP+b.Name)
	})
	slices.SortFunc(out.Offenders, func(a, b offender) int {
		if c := cmp.Compare(b.Attempts(), a.Attempts()); c != 0 {
			return c
		}
		return strings.Compare(a.IP, b.IP)
	})
	if len(out.Offenders) > maxShownOffenders {
		out.Offenders = out.Offenders[:maxShownOffenders]
	}
	return out
}
