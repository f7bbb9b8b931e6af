package dashboard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/dashboard/internal/linediff"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// Limits of the lists pages show.
const (
	historyLimit = 50
	auditLimit   = 200
)

// view is what every page template receives.
type view struct {
	Title   string
	User    string
	Role    string
	IsAdmin bool
	CanEdit bool // the user may change App's rules
	CSRF    string
	App     string
	Error   string
	Notice  string
	Data    any
}

func (d *Dashboard) view(c *call, title string) *view {
	v := &view{Title: title, App: c.app}
	if c.user != nil {
		v.User, v.Role, v.IsAdmin = c.user.name, c.user.role.String(), c.user.role == Admin
		v.CanEdit = c.app != "" && c.user.can(c.app, true)
	}
	if c.sess != nil {
		v.CSRF = c.sess.csrf
	}
	return v
}

func (d *Dashboard) render(w http.ResponseWriter, status int, name string, v *view) {
	var buf bytes.Buffer
	if err := d.pages[name].ExecuteTemplate(&buf, "layout", v); err != nil {
		http.Error(w, "dashboard: rendering "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// fail answers an error: a page, or plain text for the API.
func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, c *call, status int, msg string) {
	if strings.HasPrefix(r.URL.Path, "/api/") {
		http.Error(w, msg, status)
		return
	}
	v := d.view(c, http.StatusText(status))
	v.Error = msg
	d.render(w, status, "error", v)
}

// ---- login ----

func (d *Dashboard) loginPage(w http.ResponseWriter, r *http.Request, c *call) {
	d.renderLogin(w, r, c, http.StatusOK, "")
}

func (d *Dashboard) renderLogin(w http.ResponseWriter, r *http.Request, c *call, status int, msg string) {
	if d.cfg.Proxy != nil && len(d.accounts.current().list) == 0 {
		d.fail(w, r, c, http.StatusNotFound, "this dashboard takes its users from the proxy in front of it")
		return
	}
	tok := randomID()
	d.setCookie(w, r, loginCookie, tok, time.Hour)
	v := d.view(c, "Log in")
	v.CSRF, v.Error = tok, msg
	d.render(w, status, "login", v)
}

func (d *Dashboard) login(w http.ResponseWriter, r *http.Request, c *call) {
	if err := r.ParseForm(); err != nil {
		d.fail(w, r, c, http.StatusRequestEntityTooLarge, "request too large")
		return
	}
	ck, err := r.Cookie(loginCookie)
	if err != nil || !equalToken(r.PostForm.Get("csrf"), ck.Value) {
		d.fail(w, r, c, http.StatusForbidden, "missing or wrong CSRF token: reload the login page and try again")
		return
	}
	name, password := r.PostForm.Get("name"), r.PostForm.Get("password")
	ctx := r.Context()
	ip := clientIP(r)
	pair := ip + "\x00" + clip(name)
	// A refused login goes to the log of refused logins, aggregated per
	// address and name, never to the audit log of changes.
	//
	// Every attempt counts per client address; then a name guessed from
	// this address waits out its backoff; then attempts count per address
	// and name, and per name (a ceiling much higher, so that an attacker
	// does not lock the name's owner out), each within the last minute.
	// Beyond the limits the password is not even checked.
	limit := func(l *attemptLimit, key string) bool {
		if !l.allow(key) {
			d.refused.add(ip, name, true)
			d.renderLogin(w, r, c, http.StatusTooManyRequests, "too many login attempts: wait a minute")
			return false
		}
		return true
	}
	if !limit(d.perIP, ip) {
		return
	}
	if wait := d.backoff.wait(pair); wait > 0 {
		d.refused.add(ip, name, true)
		d.renderLogin(w, r, c, http.StatusTooManyRequests, fmt.Sprintf(
			"too many wrong passwords for this name from your address: wait %v", wait.Round(time.Second)))
		return
	}
	if !limit(d.perPair, pair) || !limit(d.perName, clip(name)) {
		return
	}
	u := d.accounts.current().byName[name]
	hash := dummyHash()
	if u != nil {
		hash = []byte(u.Hash)
	}
	if err := bcrypt.CompareHashAndPassword(hash, []byte(password)); err != nil || u == nil {
		d.backoff.failed(pair)
		d.refused.add(ip, name, false)
		d.renderLogin(w, r, c, http.StatusUnauthorized, "wrong name or password")
		return
	}
	d.backoff.succeeded(pair)
	role, _ := ParseRole(u.Role)
	p := &principal{name: u.Name, role: role, apps: map[string]bool{}}
	for _, a := range u.Apps {
		p.apps[a] = true
	}
	// A login ends the session this browser had (of whichever user).
	if old := d.sessionCookie(r); old != "" {
		d.sessions.delete(old)
	}
	ss := d.sessions.create(p)
	d.setCookie(w, r, sessionCookie, ss.id, d.cfg.SessionLifetime)
	d.setCookie(w, r, loginCookie, "", -time.Second)
	d.audit(ctx, cluster.AuditEntry{User: u.Name, Action: "login", Detail: "from " + ip})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request, c *call) {
	d.sessions.delete(c.sess.id)
	d.setCookie(w, r, sessionCookie, "", -time.Second)
	d.audit(r.Context(), cluster.AuditEntry{User: c.user.name, Action: "logout"})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// ---- applications ----

type appRow struct {
	Name    string
	Version int64
	CanEdit bool
	// Fleet: found from the fleet's frames or heartbeats, without rules.
	Fleet bool
	// CanRetire: the user is an admin and the application has rules.
	CanRetire bool
	// Health is its instances, stores and traffic; nil beyond
	// maxAppHealth rows.
	Health *appHealth
}

// apps returns the applications c's user may see.
func (d *Dashboard) apps(ctx context.Context, c *call) ([]string, error) {
	names, err := d.store.Apps(ctx)
	if err != nil {
		return nil, err
	}
	names = append(names, d.cfg.Apps...)
	if d.cfg.Engine != nil {
		names = append(names, d.cfg.App)
	}
	sort.Strings(names)
	names = slices.Compact(names)
	return slices.DeleteFunc(names, func(a string) bool { return !c.user.can(a, false) }), nil
}

func (d *Dashboard) appsPage(w http.ResponseWriter, r *http.Request, c *call) {
	v := d.view(c, "Applications")
	d.fillApps(r.Context(), c, v)
	if a := r.URL.Query().Get("retired"); a != "" && c.user.role == Admin {
		stays := slices.ContainsFunc(v.Data.([]appRow), func(row appRow) bool { return row.Name == a && !row.Fleet })
		if !stays {
			v.Notice = "Application " + a + " retired."
		}
	}
	d.render(w, http.StatusOK, "apps", v)
}

// fillApps puts into v the applications c's user may see: those with rules
// (or configured), then those found from the fleet (frames or heartbeats)
// without rules.
func (d *Dashboard) fillApps(ctx context.Context, c *call, v *view) {
	names, err := d.apps(ctx, c)
	if err != nil {
		v.Error = "the rule store: " + err.Error()
	}
	stored, _ := d.store.Apps(ctx)
	var rows []appRow
	for _, a := range names {
		cur, err := d.store.Current(ctx, a)
		if err != nil {
			v.Error = "the rule store: " + err.Error()
		}
		rows = append(rows, appRow{Name: a, Version: cur.Version, CanEdit: c.user.can(a, true),
			CanRetire: c.user.role == Admin && slices.Contains(stored, a) && (d.local == nil || a != d.local.app)})
	}
	fleet, errs := d.fleetApps(ctx)
	for _, a := range fleet {
		if slices.Contains(names, a) || !c.user.can(a, false) {
			continue
		}
		rows = append(rows, appRow{Name: a, Fleet: true, CanEdit: c.user.can(a, true) && checkAppName(a) == nil})
	}
	if len(errs) > 0 && v.Error == "" {
		v.Error = strings.Join(errs, "; ")
	}
	for i := range rows[:min(len(rows), maxAppHealth)] {
		rows[i].Health = d.healthOf(ctx, rows[i].Name)
	}
	v.Data = rows
}

// instance is one instance of an application as the dashboard sees it.
type instance struct {
	ID          string `json:"id"`
	Host        string `json:"host,omitempty"`
	Version     int64  `json:"version"`
	Refused     int64  `json:"refused,omitempty"`
	Err         string `json:"error,omitempty"`
	ClusterMode string `json:"clusterMode,omitempty"`
	LastSecond  int64  `json:"lastSecond,omitempty"`
	// LastSeen is the Unix second the instance was last seen: its newest
	// frame, or now when its heartbeat is live (Members); 0 when neither.
	LastSeen int64 `json:"lastSeen"`
	// Health is "healthy" (seen within healthyWithin), "stale" (within
	// lostAfter), "lost" (longer ago) or "" (never seen, only reported).
	Health   string   `json:"health"`
	Shedding bool     `json:"shedding"`
	Load1    *float64 `json:"load1"`
	CPU      *float64 `json:"cpu"`
	Memory   uint64   `json:"memory"`
}

type breaker struct {
	Instance string `json:"instance"`
	Resource string `json:"resource"`
	State    string `json:"state"`
}

type point struct {
	T     int64  `json:"t"`
	Pass  uint64 `json:"pass"`
	Block uint64 `json:"block"`
	// Blocked counts the refusals by block type, as live.BlockTypes names
	// them; nil when none.
	Blocked []uint64 `json:"blocked,omitempty"`
	RTms    float64  `json:"rt"`
	InFlt   int64    `json:"inflight"`
}

type series struct {
	Resource string  `json:"resource"`
	Points   []point `json:"points"`
	// Instances counts the instances whose frames have the resource in the
	// window: a rule each instance has limits the sum to that many times
	// its threshold.
	Instances int `json:"instances"`
	// Rules are the rules on the resource; the charts draw their limits.
	Rules []appliedRule `json:"rules"`
	// LimitSteps are the rules on the resource in each version in force
	// over the window, oldest first, on an answer for the whole window
	// when versions were saved in it: the charts draw each limit as it
	// was at each second.
	LimitSteps []limitStep `json:"limitSteps,omitempty"`
}

// versionMark is a rule version saved within the window: the charts mark
// it.
type versionMark struct {
	Version int64  `json:"version"`
	At      int64  `json:"at"` // Unix second
	Author  string `json:"author"`
	Comment string `json:"comment,omitempty"`
}

// live is an application's state: the app page shows it and refreshes it
// every second from the JSON API.
type live struct {
	App       string     `json:"app"`
	Version   int64      `json:"version"`
	Now       int64      `json:"now"`
	Since     int64      `json:"since"` // the first second the figures cover
	Window    int64      `json:"window"`
	Instances []instance `json:"instances"`
	Resources []series   `json:"resources"`
	Breakers  []breaker  `json:"breakers"`
	// BlockTypes names the elements of a point's Blocked.
	BlockTypes []string `json:"blockTypes"`
	// BlockLabels are the legend's names of the block types, by index
	// ("circuit breaker" for degrade).
	BlockLabels []string `json:"blockLabels"`
	// NotMeasured explains an instance's Load, CPU or Memory without a
	// figure (null, or zero memory).
	NotMeasured string `json:"notMeasured"`
	// HealthyWithin and LostAfter are the health thresholds, in seconds,
	// for the page to age instances while the store cannot be read.
	HealthyWithin int64 `json:"healthyWithin"`
	LostAfter     int64 `json:"lostAfter"`
	// Versions are the rule versions saved within the window, on an
	// answer for the whole window; nil on an answer for the last seconds.
	Versions []versionMark `json:"versions,omitempty"`
	// TableSeconds is how many seconds the resource table adds up.
	TableSeconds int64 `json:"tableSeconds"`
	// Chosen: the series are the resources asked for (?r=), not the
	// busiest.
	Chosen bool `json:"chosen"`
	// Errors are the store's failures in this answer: the page shows a
	// banner and keeps what it read last.
	Errors []string `json:"errors,omitempty"`
	// LostSince, with Errors, is when the first of the reads that failed
	// since the last that did not began, and LastRead when that one began
	// (Unix milliseconds, 0 when none since the dashboard started): the
	// banner dates the loss from the reads, not from the answer, which
	// comes after the store's timeouts.
	LostSince int64 `json:"lostSince,omitempty"`
	LastRead  int64 `json:"lastRead,omitempty"`
}

// readHealth dates the loss of the store from the app page's reads (its
// poll and its resource table): the first read that failed after the
// newest that did not. It is safe for
// concurrent use.
type readHealth struct {
	mu     sync.Mutex
	lastOK time.Time // the start of the newest read without errors
	lost   time.Time // the start of the first read with errors after it; zero when none
}

// ok notes a read without errors begun at start.
func (h *readHealth) ok(start time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if start.After(h.lastOK) {
		h.lastOK = start
	}
	if !h.lost.IsZero() && start.After(h.lost) {
		h.lost = time.Time{}
	}
}

// failed notes a read with errors begun at start and returns when the
// loss began and the start of the last read without errors (zero when
// none).
func (h *readHealth) failed(start time.Time) (since, lastOK time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if start.Before(h.lastOK) {
		return start, h.lastOK // a read older than one that succeeded since
	}
	if h.lost.IsZero() || start.Before(h.lost) {
		h.lost = start
	}
	return h.lost, h.lastOK
}

func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// Health thresholds of an instance, by the age of what was last seen of
// it. Frames come every second and may be a second or two late: healthy
// within 5 s. Beyond a minute (when Sentinel's dashboard calls a machine
// unhealthy) it is lost.
const (
	healthyWithin = 5
	lostAfter     = 60
)

// health names the state of an instance last seen at lastSeen.
func health(now, lastSeen int64) string {
	switch age := now - lastSeen; {
	case lastSeen == 0:
		return ""
	case age <= healthyWithin:
		return "healthy"
	case age <= lostAfter:
		return "stale"
	}
	return "lost"
}

// blockTypes names the block types, by index.
var blockTypes = func() []string {
	out := make([]string, len(stat.Snapshot{}.BlockedBy))
	for i := range out {
		out[i] = blockName(i)
	}
	return out
}()

// blockLabels names the block types in the charts' legends.
var blockLabels = func() []string {
	out := slices.Clone(blockTypes)
	for i, n := range out {
		if n == "degrade" {
			out[i] = "circuit breaker"
		}
	}
	return out
}()

// maxSeries bounds the resources the charts show: those chosen in the
// resource table (?r=), or else the defaultSeries busiest.
const (
	maxSeries     = 12
	defaultSeries = 4
)

func finite(f float64) *float64 {
	if f != f || f > 1e300 || f < -1e300 {
		return nil
	}
	return &f
}

// live answers the app page's poll. With ?since=S (a Unix second) it
// covers only the seconds from S on: the page asks for the whole window
// once, then for the last seconds, and merges.
func (d *Dashboard) live(w http.ResponseWriter, r *http.Request, c *call) {
	q := r.URL.Query()
	from, _ := strconv.ParseInt(q.Get("since"), 10, 64)
	chosen := q["r"]
	if len(chosen) > maxSeries {
		chosen = chosen[:maxSeries]
	}
	l := d.liveState(r.Context(), c.app, from, chosen...)
	w.Header().Set("Content-Type", "application/json")
	enc := newJSON(w)
	enc.Encode(l)
}

// liveState returns app's state, with the figures of the seconds from
// from (the whole window when from is before it, or 0), the series of the
// chosen resources (the busiest when none).
//
// complexity: one pass over the window's frames gathering every figure the live page shows; split, each figure walks the frames again
func (d *Dashboard) liveState(ctx context.Context, app string, from int64, chosen ...string) *live {
	start := d.cfg.Now()
	now := start.Unix()
	win := int64(d.window / time.Second)
	since := now - win
	if from > since && from <= now {
		since = from
	}
	l := &live{App: app, Now: now, Since: since, Window: win, Instances: []instance{}, Resources: []series{},
		Breakers: []breaker{}, BlockTypes: blockTypes, BlockLabels: blockLabels, NotMeasured: notMeasured,
		HealthyWithin: healthyWithin, LostAfter: lostAfter, TableSeconds: min(win, tableSeconds)}
	cur, err := d.store.Current(ctx, app)
	if err != nil {
		l.Errors = append(l.Errors, "rule store: "+err.Error())
	}
	l.Version = cur.Version
	ix := d.rulesOf(app, cur)
	var stepFroms []int64
	var stepRules []*ruleIndex
	if since == now-win {
		// The whole window: the versions saved in it, for the charts to
		// mark.
		vs, err := d.store.History(ctx, app, historyLimit)
		if err != nil {
			l.Errors = append(l.Errors, "rule store: "+err.Error())
		}
		l.Versions = []versionMark{}
		for _, v := range vs {
			if at := v.At.Unix(); at >= since && at <= now {
				l.Versions = append(l.Versions, versionMark{Version: v.Version, At: at, Author: v.Author, Comment: v.Comment})
			}
		}
		if err == nil {
			stepFroms, stepRules = d.limitSteps(ctx, app, since, now, vs)
		}
	}
	byID := map[string]*instance{}
	get := func(id string) *instance {
		in := byID[id]
		if in == nil {
			in = &instance{ID: id}
			byID[id] = in
		}
		return in
	}
	if d.cfg.Members != nil {
		ms, err := d.cfg.Members.Members(ctx, app)
		if err != nil {
			l.Errors = append(l.Errors, "members: "+err.Error())
		}
		for _, m := range ms {
			in := get(m.ID)
			in.Host = m.Host
			in.LastSeen = now // a live heartbeat
			in.Version, _ = strconv.ParseInt(m.RuleVersion, 10, 64)
		}
	}
	reps, err := d.store.Reports(ctx, app)
	if err != nil {
		l.Errors = append(l.Errors, "reports: "+err.Error())
	}
	for _, rep := range reps {
		in := get(rep.Instance)
		in.Version, in.Refused, in.Err = rep.Version, rep.Refused, rep.Err
	}
	if d.local != nil && app == d.local.app {
		st := d.local.state()
		in := get(d.cfg.Engine.InstanceID())
		in.Version, in.Refused, in.Err = st.Version, st.Refused, st.Err
	}
	var frames []cluster.Frame
	if d.tel != nil {
		frames, err = d.tel.Frames(ctx, app, since)
		if err != nil {
			l.Errors = append(l.Errors, "telemetry: "+err.Error())
		}
	}
	// Frames come by instance then second; a frame published twice counts
	// once.
	frames = byInstanceSecond(frames)
	last := map[string]*cluster.Frame{}
	totals := map[string]uint64{}
	// The seconds some instance published a frame for: a resource without
	// figures in such a second had none (0); a second without any frame is
	// a gap, which the charts draw as one.
	covered := make([]bool, now-since+1)
	for i := range frames {
		f := &frames[i]
		last[f.Instance] = f // the newest, by the order above
		if f.Second < since || f.Second > now {
			continue
		}
		covered[f.Second-since] = true
		for j := range f.Resources {
			rs := &f.Resources[j]
			if _, ok := totals[rs.Resource]; ok || len(totals) < 100000 { // bounded whatever instances publish
				totals[rs.Resource] += rs.Pass + rs.Block
			}
		}
	}
	// The busiest resources get a series each: one accumulator per second
	// of the window.
	type acc struct {
		point
		blocked [len(stat.Snapshot{}.BlockedBy)]uint64
		rtSum   float64
		rtN     uint64
		seen    bool
	}
	var names []string
	if len(chosen) > 0 {
		l.Chosen = true
		for _, n := range chosen {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	} else {
		names = make([]string, 0, len(totals))
		for n := range totals {
			names = append(names, n)
		}
		sort.Slice(names, func(i, j int) bool {
			a, b := names[i], names[j]
			return totals[a] > totals[b] || totals[a] == totals[b] && a < b
		})
		if len(names) > defaultSeries {
			names = names[:defaultSeries]
		}
	}
	accs := make(map[string][]acc, len(names))
	for _, n := range names {
		accs[n] = make([]acc, now-since+1)
	}
	// The instances publishing each series' resource.
	publishing := make(map[string]map[string]bool, len(names))
	for i := range frames {
		f := &frames[i]
		if f.Second < since || f.Second > now {
			continue
		}
		for j := range f.Resources {
			rs := &f.Resources[j]
			a := accs[rs.Resource]
			if a == nil {
				continue
			}
			p := &a[f.Second-since]
			p.seen = true
			p.Pass += rs.Pass
			p.Block += rs.Block
			p.InFlt += rs.Concurrency
			for bt, n := range apportion(rs.Block, rs.BlockedBy) {
				p.blocked[bt] += n
			}
			if publishing[rs.Resource] == nil {
				publishing[rs.Resource] = map[string]bool{}
			}
			publishing[rs.Resource][f.Instance] = true
			p.rtSum += float64(rs.AvgRT) * float64(rs.Complete)
			p.rtN += rs.Complete
		}
	}
	for _, n := range names {
		s := series{Resource: n, Points: []point{}, Instances: len(publishing[n]), Rules: ix.byRes[n], LimitSteps: stepsOf(n, stepFroms, stepRules)}
		if s.Rules == nil {
			s.Rules = []appliedRule{}
		}
		for k := range accs[n] {
			p := &accs[n][k]
			if !p.seen && !covered[k] {
				continue
			}
			p.T = since + int64(k)
			if p.rtN > 0 {
				p.RTms = p.rtSum / float64(p.rtN) / float64(time.Millisecond)
			}
			if p.Block > 0 {
				p.Blocked = slices.Clone(p.blocked[:])
			}
			s.Points = append(s.Points, p.point)
		}
		l.Resources = append(l.Resources, s)
	}
	for id, f := range last {
		in := get(id)
		in.LastSecond, in.ClusterMode, in.Shedding = f.Second, f.ClusterMode, f.Shedding
		in.LastSeen = max(in.LastSeen, f.Second)
		if in.Version == 0 {
			in.Version = f.RuleVersion
		}
		in.Load1, in.CPU, in.Memory = finite(f.System.Load1), finite(f.System.CPUUsage), f.System.Memory
		for _, b := range f.Breakers {
			l.Breakers = append(l.Breakers, breaker{Instance: id, Resource: b.Resource, State: b.State.String()})
		}
	}
	for _, in := range byID {
		in.Health = health(now, in.LastSeen)
		l.Instances = append(l.Instances, *in)
	}
	if len(l.Errors) > 0 {
		since, ok := d.reads.failed(start)
		l.LostSince, l.LastRead = unixMilli(since), unixMilli(ok)
	} else {
		d.reads.ok(start)
	}
	sort.Slice(l.Instances, func(i, j int) bool { return l.Instances[i].ID < l.Instances[j].ID })
	sort.Slice(l.Breakers, func(i, j int) bool {
		a, b := l.Breakers[i], l.Breakers[j]
		return a.Resource < b.Resource || a.Resource == b.Resource && a.Instance < b.Instance
	})
	return l
}

// blockName names a block type in the charts.
func blockName(bt int) string {
	if bt == 0 {
		return "other"
	}
	return sluice.BlockType(bt).String()
}

func (d *Dashboard) appPage(w http.ResponseWriter, r *http.Request, c *call) {
	v := d.view(c, c.app)
	// The charts of the resources the address chooses (?chart=, as the
	// page keeps them), or else the busiest.
	chosen := r.URL.Query()["chart"]
	v.Data = d.liveState(r.Context(), c.app, 0, chosen[:min(len(chosen), maxSeries)]...)
	d.render(w, http.StatusOK, "app", v)
}

// ---- rules ----

// ruleRow is one rule in the rules page's lists.
type ruleRow struct {
	Kind     string // the file key
	Index    int
	Resource string
	Text     string // the rule as a rule file writes it (rules.Encode, YAML)
	Values   string // its fields as the kind's form holds them (formValues)
	Form     string // the form that edits it when not the kind's: "concurrency"
}

type rulesData struct {
	Version   cluster.RuleVersion
	Base      int64
	Doc       string // the editor's text
	Rules     map[string][]ruleRow
	List      *ruleList // the listing's search and page; nil when all are listed
	Kinds     []string
	Comment   string               // the comment of the text being saved
	Rollout   int64                // the version just saved, whose rollout the page follows
	Now       int64                // the server's Unix second
	Conflict  *cluster.RuleVersion // the version saved meanwhile
	ErrRule   string               // the rule the error names, "flow rule 2 (resource x)"
	ErrField  string
	ErrReason string
	// RefusedHead is the beginning of a refused document too large to
	// show again (maxShownDoc), of RefusedSize.
	RefusedHead, RefusedSize string
	// Buckets is the rule store's metadata of the listed resources (a
	// BucketStore's), BucketsErr its failure.
	Buckets    []BucketInfo
	BucketsErr string
}

var kindKeys = []string{"flow", "system", "circuitBreaker", "param", "authority"}

// maxRuleRows bounds the rules listed per kind on the rules page: a
// 10,000-rule document lists a page of each kind (searched by resource),
// and the editor holds the whole document.
const maxRuleRows = 100

// ruleList is the rules of each kind the rules page lists: those whose
// resource contains Query (any case), from Offset, at most maxRuleRows.
type ruleList struct {
	Rows   map[string][]ruleRow
	Total  map[string]int // the rules of each kind that match
	Query  string
	Offset int
	Max    int
}

func rowsOf(doc []byte) map[string][]ruleRow {
	if len(bytes.TrimSpace(doc)) == 0 {
		return map[string][]ruleRow{}
	}
	set, err := rules.Decode(doc, rules.YAML)
	if err != nil {
		return map[string][]ruleRow{}
	}
	return listRules(set, "", 0).Rows
}

// listRules lists set's rules as the rules page shows them; each listed
// rule is written as the editor's text (rules.Encode), those not listed
// are not.
func listRules(set rules.Set, q string, offset int) *ruleList {
	l := &ruleList{Rows: map[string][]ruleRow{}, Total: map[string]int{}, Query: q, Offset: max(offset, 0), Max: maxRuleRows}
	lq := strings.ToLower(q)
	form := ""
	add := func(kind string, i int, res string, one func() rules.Set) {
		if lq != "" && !strings.Contains(strings.ToLower(res), lq) {
			return
		}
		n := l.Total[kind]
		l.Total[kind]++
		if n < l.Offset || n >= l.Offset+maxRuleRows {
			return
		}
		s := one()
		l.Rows[kind] = append(l.Rows[kind], ruleRow{Kind: kind, Index: i, Resource: res, Text: ruleText(s), Values: oneValues(s), Form: form})
	}
	for i, r := range set.Flow {
		if form = ""; r.Metric == rules.Concurrency {
			form = "concurrency"
		}
		add("flow", i, r.Resource, func() rules.Set { return rules.Set{Flow: []rules.Flow{r}} })
	}
	form = ""
	for i, r := range set.System {
		add("system", i, "", func() rules.Set { return rules.Set{System: []rules.System{r}} })
	}
	for i, r := range set.CircuitBreaker {
		add("circuitBreaker", i, r.Resource, func() rules.Set { return rules.Set{CircuitBreaker: []rules.CircuitBreaker{r}} })
	}
	for i, r := range set.Param {
		add("param", i, r.Resource, func() rules.Set { return rules.Set{Param: []rules.Param{r}} })
	}
	for i, r := range set.Authority {
		add("authority", i, r.Resource, func() rules.Set { return rules.Set{Authority: []rules.Authority{r}} })
	}
	return l
}

// ruleText is the one rule of one as the editor's text has it: the YAML
// rules.Encode writes (durations as "10s", enums by name), without the
// kind's key and the list's dash, its lines unindented.
func ruleText(one rules.Set) string {
	doc, err := rules.Encode(one, rules.YAML)
	if err != nil {
		return "(cannot be written: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(doc), "\n"), "\n")
	if len(lines) < 2 {
		return strings.Join(lines, "\n")
	}
	// "kind:", then "  - first: ...", then "    next: ..." (SetIndent(2)).
	lines = lines[1:]
	for i, l := range lines {
		if i == 0 {
			l = strings.TrimPrefix(strings.TrimLeft(l, " "), "- ")
		} else if len(l) >= 4 && strings.TrimLeft(l[:4], " ") == "" {
			l = l[4:]
		}
		lines[i] = l
	}
	return strings.Join(lines, "\n")
}

func (d *Dashboard) rulesPage(w http.ResponseWriter, r *http.Request, c *call) {
	v := d.view(c, c.app+": rules")
	cur, err := d.store.Current(r.Context(), c.app)
	if err != nil {
		d.fail(w, r, c, http.StatusBadGateway, "the rule store: "+err.Error())
		return
	}
	q := r.URL.Query()
	if len(q.Get("q")) > maxQuery {
		q.Set("q", strings.ToValidUTF8(q.Get("q")[:maxQuery], ""))
	}
	offset, _ := strconv.Atoi(q.Get("offset"))
	// The rules in force, decoded once a version (d.rulesOf).
	list := listRules(d.rulesOf(c.app, cur).set, q.Get("q"), offset)
	rd := &rulesData{Version: cur, Base: cur.Version, Doc: string(cur.Doc), Rules: list.Rows, List: list, Kinds: kindKeys, Now: d.cfg.Now().Unix()}
	rd.Buckets, rd.BucketsErr = d.bucketsOf(r.Context(), c.app, listedResources(list))
	if n, err := strconv.ParseInt(r.URL.Query().Get("saved"), 10, 64); err == nil && n > 0 && n <= cur.Version {
		v.Notice = fmt.Sprintf("Version %d saved.", n)
		if r.URL.Query().Get("auditerr") != "" {
			v.Notice += " The audit log could not record it."
		}
		rd.Rollout = n
	}
	v.Data = rd
	d.render(w, http.StatusOK, "rules", v)
}

// describe splits a validation error into the rule, the field and the
// reason, for the page to show them apart.
func describe(err error, rd *rulesData) string {
	var re *rules.Error
	if errors.As(err, &re) {
		rule := re.Kind + " rule"
		if re.Index >= 0 {
			rule += " " + strconv.Itoa(re.Index)
		}
		if re.Resource != "" {
			rule += " (resource " + strconv.Quote(re.Resource) + ")"
		}
		rd.ErrRule, rd.ErrField, rd.ErrReason = rule, fieldLabel(re.Kind, re.Field), plainReason(re.Kind, re.Field, re.Reason)
	}
	return plainLimits(err.Error())
}

// save writes doc as the version after base, recording it in the audit log
// with action and a diff against prev; on a refusal it renders the rules
// page with the error and the user's text.
func (d *Dashboard) save(w http.ResponseWriter, r *http.Request, c *call, base int64, doc []byte, comment, action string, rollbackOf int64) {
	ctx := r.Context()
	// The store validates too; checking here first tells a refused
	// document from a failing store whatever the store wraps errors in.
	_, verr := rules.Decode(doc, rules.YAML)
	big := tooLargeDoc(doc)
	if verr == nil && r.PostForm.Get("preview") == "1" {
		d.confirm(w, r, c, base, doc, comment)
		return
	}
	var saved cluster.RuleVersion
	err := verr
	if err == nil {
		saved, err = d.store.Save(ctx, c.app, base, cluster.RuleVersion{Doc: doc, Author: c.user.name, Comment: comment, RollbackOf: rollbackOf})
	}
	if err == nil {
		aerr := d.auditSave(ctx, c.app, base, saved, action)
		target := "/apps/" + pathEscape(c.app) + "/rules?saved=" + strconv.FormatInt(saved.Version, 10)
		if aerr != nil {
			target += "&auditerr=1"
		}
		http.Redirect(w, r, target, http.StatusSeeOther)
		return
	}
	prev, cerr := d.store.Current(ctx, c.app)
	if cerr != nil {
		d.fail(w, r, c, http.StatusBadGateway, "the rule store: "+cerr.Error())
		return
	}
	v := d.view(c, c.app+": rules")
	rd := &rulesData{Version: prev, Base: base, Doc: string(doc), Rules: rowsOf(prev.Doc), Kinds: kindKeys, Comment: comment}
	if len(doc) > maxShownDoc {
		// Not echoed back whole: its first lines, and the editor holds
		// the version in force.
		rd.Doc, rd.RefusedHead, rd.RefusedSize = string(prev.Doc), headOf(doc), size(len(doc))
	}
	v.Data = rd
	status := http.StatusUnprocessableEntity
	switch {
	case big != "":
		v.Error = big
	case errors.Is(err, cluster.ErrConflict):
		status = http.StatusConflict
		rd.Conflict = &prev
		rd.Base = prev.Version
		v.Error = fmt.Sprintf("conflict: version %d was saved by %s since version %d you edited; nothing was written. "+
			"Compare it with your text below and save again.", prev.Version, prev.Author, base)
	case verr != nil || isValidation(err):
		v.Error = describe(err, rd)
		if rd.ErrRule != "" {
			v.Error = "Not saved: a rule is invalid (below); the rules in force are unchanged."
		}
	default:
		status = http.StatusBadGateway
		v.Error = "the rule store: " + err.Error()
	}
	d.render(w, status, "rules", v)
}

// confirmData is the confirmation of a save, a deletion or a rollback:
// what it changes, and the same request again without preview.
type confirmData struct {
	What    string // "save", "delete", "rollback"
	Base    int64  // the version changed
	Current int64  // the version in force now (another when saved since)
	Changes []string
	Diff    string // the line diff
	Target  string // the endpoint to post to
	Fields  []formField
	Comment string
}

type formField struct{ Name, Value string }

// confirm renders what saving doc over version base changes, and a form
// that makes the change (the request again, without preview=1).
func (d *Dashboard) confirm(w http.ResponseWriter, r *http.Request, c *call, base int64, doc []byte, comment string) {
	ctx := r.Context()
	cur, err := d.store.Current(ctx, c.app)
	if err != nil {
		d.fail(w, r, c, http.StatusBadGateway, "the rule store: "+err.Error())
		return
	}
	var before []byte
	if base > 0 {
		bv, err := d.store.Version(ctx, c.app, base)
		if err != nil {
			d.fail(w, r, c, http.StatusConflict, fmt.Sprintf("version %d: %v", base, err))
			return
		}
		before = bv.Doc
	}
	cd := &confirmData{Base: base, Current: cur.Version, Target: r.URL.Path, Comment: comment, Diff: linediff.Lines(before, doc)}
	switch {
	case strings.HasSuffix(r.URL.Path, "/rules/delete"):
		cd.What = "delete"
	case strings.HasSuffix(r.URL.Path, "/rollback"):
		cd.What = "rollback"
	default:
		cd.What = "save"
	}
	if cd.Changes, err = diffDocs(before, doc); err != nil {
		cd.Changes = []string{"(the version edited cannot be read as rules: " + err.Error() + ")"}
	}
	keys := make([]string, 0, len(r.PostForm))
	for k := range r.PostForm {
		if k != "csrf" && k != "preview" && k != "edit" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		cd.Fields = append(cd.Fields, formField{Name: k, Value: r.PostForm.Get(k)})
	}
	v := d.view(c, c.app+": confirm the "+map[string]string{"save": "save", "delete": "deletion", "rollback": "rollback"}[cd.What])
	v.Data = cd
	d.render(w, http.StatusOK, "confirm", v)
}

// isValidation reports whether err is the refusal of a document.
func isValidation(err error) bool {
	var re *rules.Error
	var pe *rules.PathError
	return errors.As(err, &re) || errors.As(err, &pe) || errors.Is(err, cluster.ErrInvalidRules) ||
		strings.HasPrefix(err.Error(), "rules: ")
}

func formInt(r *http.Request, name string) (int64, error) {
	n, err := strconv.ParseInt(r.PostForm.Get(name), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("field %s: want a version number", name)
	}
	return n, nil
}

func (d *Dashboard) saveRules(w http.ResponseWriter, r *http.Request, c *call) {
	base, err := formInt(r, "base")
	if err != nil {
		d.fail(w, r, c, http.StatusBadRequest, err.Error())
		return
	}
	doc := strings.ReplaceAll(r.PostForm.Get("doc"), "\r\n", "\n")
	if r.PostForm.Get("edit") == "1" {
		// Back from the confirmation to the editor, the text kept.
		prev, err := d.store.Current(r.Context(), c.app)
		if err != nil {
			d.fail(w, r, c, http.StatusBadGateway, "the rule store: "+err.Error())
			return
		}
		v := d.view(c, c.app+": rules")
		v.Data = &rulesData{Version: prev, Base: base, Doc: doc, Rules: rowsOf(prev.Doc), Kinds: kindKeys, Comment: clip(r.PostForm.Get("comment"))}
		d.render(w, http.StatusOK, "rules", v)
		return
	}
	d.save(w, r, c, base, []byte(doc), clip(r.PostForm.Get("comment")), "save", 0)
}

func (d *Dashboard) deleteRule(w http.ResponseWriter, r *http.Request, c *call) {
	base, err := formInt(r, "base")
	if err != nil {
		d.fail(w, r, c, http.StatusBadRequest, err.Error())
		return
	}
	idx, err := formInt(r, "index")
	if err != nil {
		d.fail(w, r, c, http.StatusBadRequest, "field index: want a rule index")
		return
	}
	kind := r.PostForm.Get("kind")
	cur, err := d.store.Version(r.Context(), c.app, base)
	if err != nil {
		d.fail(w, r, c, http.StatusConflict, fmt.Sprintf("version %d: %v", base, err))
		return
	}
	set, err := rules.Decode(cur.Doc, rules.YAML)
	if err != nil {
		d.fail(w, r, c, http.StatusConflict, err.Error())
		return
	}
	i := int(idx)
	ok := true
	switch kind {
	case "flow":
		set.Flow, ok = without(set.Flow, i)
	case "system":
		set.System, ok = without(set.System, i)
	case "circuitBreaker":
		set.CircuitBreaker, ok = without(set.CircuitBreaker, i)
	case "param":
		set.Param, ok = without(set.Param, i)
	case "authority":
		set.Authority, ok = without(set.Authority, i)
	default:
		ok = false
	}
	if !ok {
		d.fail(w, r, c, http.StatusBadRequest, fmt.Sprintf("no %s rule %d in version %d", clip(kind), i, base))
		return
	}
	doc, err := rules.Encode(set, rules.YAML)
	if err != nil {
		d.fail(w, r, c, http.StatusInternalServerError, err.Error())
		return
	}
	d.save(w, r, c, base, doc, fmt.Sprintf("delete %s rule %d", kind, i), "save", 0)
}

func without[T any](s []T, i int) ([]T, bool) {
	if i < 0 || i >= len(s) {
		return s, false
	}
	return slices.Delete(slices.Clone(s), i, i+1), true
}

// ---- history ----

type historyData struct {
	Current  int64
	Versions []cluster.RuleVersion
	Shown    *cluster.RuleVersion
	Diff     string
	Changes  []string // the rules Shown changed
	Diffed   bool
}

func (d *Dashboard) historyPage(w http.ResponseWriter, r *http.Request, c *call) {
	ctx := r.Context()
	v := d.view(c, c.app+": history")
	vs, err := d.store.History(ctx, c.app, historyLimit)
	if err != nil {
		d.fail(w, r, c, http.StatusBadGateway, "the rule store: "+err.Error())
		return
	}
	hd := &historyData{Versions: vs}
	if len(vs) > 0 {
		hd.Current = vs[0].Version
	}
	if s := r.URL.Query().Get("v"); s != "" {
		n, _ := strconv.ParseInt(s, 10, 64)
		sv, err := d.store.Version(ctx, c.app, n)
		if err != nil {
			v.Error = fmt.Sprintf("version %d: %v", n, err)
		} else {
			hd.Shown = &sv
			var before []byte
			if pv, err := d.store.Version(ctx, c.app, n-1); err == nil {
				before = pv.Doc
			}
			hd.Diff = linediff.Lines(before, sv.Doc)
			hd.Changes = d.versionDiff(ctx, c.app, n)
			hd.Diffed = hd.Changes != nil
		}
	}
	v.Data = hd
	d.render(w, http.StatusOK, "history", v)
}

func (d *Dashboard) rollback(w http.ResponseWriter, r *http.Request, c *call) {
	base, err := formInt(r, "base")
	if err != nil {
		d.fail(w, r, c, http.StatusBadRequest, err.Error())
		return
	}
	to, err := formInt(r, "version")
	if err != nil {
		d.fail(w, r, c, http.StatusBadRequest, err.Error())
		return
	}
	old, err := d.store.Version(r.Context(), c.app, to)
	if err != nil {
		d.fail(w, r, c, http.StatusNotFound, fmt.Sprintf("version %d: %v", to, err))
		return
	}
	d.save(w, r, c, base, old.Doc, fmt.Sprintf("rollback to version %d", to), "rollback", to)
}

// ---- audit and users ----

// The audit pages: the newest auditScan entries are filtered, and shown
// auditPageSize at a time.
const (
	auditScan     = 2000
	auditPageSize = 50
)

// complexity: the audit page's filters (user, action, date), paging and the scan bound, each a condition on one entry
func (d *Dashboard) auditPage(w http.ResponseWriter, r *http.Request, c *call) {
	title := "Audit log"
	if c.app != "" {
		title = c.app + ": audit log"
	}
	v := d.view(c, title)
	q := r.URL.Query()
	cut := func(s string) string {
		if len(s) > maxQuery {
			return strings.ToValidUTF8(s[:maxQuery], "")
		}
		return s
	}
	ad := &auditData{User: cut(q.Get("user")), Action: cut(q.Get("action")), App: cut(q.Get("app")), Query: cut(q.Get("q")),
		Scan: auditScan, PageSize: auditPageSize}
	ad.Offset, _ = strconv.Atoi(q.Get("offset"))
	ad.Offset = max(ad.Offset, 0)
	es, err := d.store.AuditLog(r.Context(), c.app, auditScan)
	if err != nil {
		v.Error = "the rule store: " + err.Error()
	}
	ad.Scanned = len(es)
	actions := map[string]bool{}
	lq := strings.ToLower(ad.Query)
	var match []cluster.AuditEntry
	for _, e := range es {
		actions[e.Action] = true
		if ad.User != "" && e.User != ad.User || ad.Action != "" && e.Action != ad.Action ||
			c.app == "" && ad.App != "" && e.App != ad.App ||
			lq != "" && !strings.Contains(strings.ToLower(e.Detail+" "+e.User+" "+e.App), lq) {
			continue
		}
		match = append(match, e)
	}
	for a := range actions {
		ad.Actions = append(ad.Actions, a)
	}
	sort.Strings(ad.Actions)
	ad.Total = len(match)
	if ad.Offset >= len(match) {
		ad.Offset = max(0, (len(match)-1)/auditPageSize*auditPageSize)
	}
	for _, e := range match[ad.Offset:min(len(match), ad.Offset+auditPageSize)] {
		row := auditRow{AuditEntry: e}
		if e.App != "" && e.Version > 0 && (e.Action == "save" || e.Action == "rollback") {
			row.Changes = d.versionDiff(r.Context(), e.App, e.Version)
			row.Diffed = row.Changes != nil
		}
		ad.Entries = append(ad.Entries, row)
	}
	ad.More = ad.Offset+auditPageSize < len(match)
	if c.app == "" {
		// The whole audit log, for admins, with the refused logins.
		ad.Logins = true
		ad.Summary = d.refused.summary()
		ad.Refused, ad.Dropped = ad.Summary.Rows, ad.Summary.Dropped
		ad.Interval, ad.MaxRows, ad.PerIP = refusedInterval, maxRefusedRows, maxRowsPerIP
	}
	v.Data = ad
	d.render(w, http.StatusOK, "audit", v)
}

// auditRow is an audit entry with, for a save or a rollback, the rules it
// changed.
type auditRow struct {
	cluster.AuditEntry
	Changes []string
	Diffed  bool // Changes were computed (none: the same rules)
}

// auditData is what the audit pages show.
type auditData struct {
	Entries []auditRow
	// The filters: by user, action, application (the whole log) and text
	// in the detail; the page from Offset.
	User, Action, App, Query string
	Actions                  []string // the actions of the entries scanned
	Offset, Total, PageSize  int
	More                     bool
	Scan, Scanned            int
	// Logins: the page shows the refused logins (the whole audit log).
	Logins   bool
	Refused  []refusedRow
	Dropped  int64
	Interval time.Duration
	MaxRows  int
	// Summary: the totals and the top offenders; PerIP the rows one
	// address may hold.
	Summary refusedSummary
	PerIP   int
}

// auditSave makes sure the audit log records a save. Stores record their
// saves themselves, in the same write (sluiceredis does, atomically); for
// one that does not, the dashboard writes the entry.
func (d *Dashboard) auditSave(ctx context.Context, app string, base int64, saved cluster.RuleVersion, action string) error {
	es, err := d.store.AuditLog(ctx, app, 20)
	if err != nil {
		return err
	}
	for _, e := range es {
		if e.Version == saved.Version && (e.Action == "save" || e.Action == "rollback") {
			return nil
		}
	}
	var before []byte
	if base > 0 {
		if b, err := d.store.Version(ctx, app, base); err == nil {
			before = b.Doc
		}
	}
	return d.audit(ctx, cluster.AuditEntry{User: saved.Author, App: app, Action: action, Version: saved.Version,
		Detail: linediff.Lines(before, saved.Doc)})
}
