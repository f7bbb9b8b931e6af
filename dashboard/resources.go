package dashboard

import (
	"context"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// The resource table: every resource in the frames of the last
// tableSeconds or in the rules, filtered, sorted and paged on the server.
const (
	tableSeconds    = 60
	defaultPageSize = 50
	maxPageSize     = 200
	maxResources    = 100000 // bounded whatever instances publish
	maxQuery        = 256    // bytes of a search
)

// appliedRule is a rule that applies to a resource, as the resource table
// and the charts show it.
type appliedRule struct {
	Kind    string `json:"kind"`
	Index   int    `json:"index"`
	Summary string `json:"summary"` // "flow 50/s", "concurrency 8 in flight"
	// Limit is the line a chart draws for the rule: a rate per second on
	// the requests/s plot (Plot "requests") or a number in flight (Plot
	// "inflight"); 0 when the rule draws none.
	Limit float64 `json:"limit,omitempty"`
	Plot  string  `json:"plot,omitempty"`
	// Shared: the limit is a budget of the whole fleet (a cluster rule);
	// otherwise each instance has it.
	Shared bool `json:"shared,omitempty"`
	// Tiered: a flow rule with Tiers (the table shows its step).
	Tiered bool `json:"tiered,omitempty"`
}

// ruleIndex is a version of an application's rules, decoded, by resource.
type ruleIndex struct {
	version int64
	set     rules.Set
	byRes   map[string][]appliedRule
	err     error // the document does not decode
}

// ruleCache keeps each application's rule index for the version in force:
// a 10,000-rule document is decoded once a version, not once a request.
type ruleCache struct {
	mu   sync.Mutex
	apps map[string]*ruleIndex
}

// rulesOf returns the index of cur, decoding it when it is not the cached
// version of app.
func (d *Dashboard) rulesOf(app string, cur cluster.RuleVersion) *ruleIndex {
	c := &d.ruleCache
	c.mu.Lock()
	ix := c.apps[app]
	c.mu.Unlock()
	if ix != nil && ix.version == cur.Version {
		return ix
	}
	ix = indexRules(cur)
	c.mu.Lock()
	if c.apps == nil {
		c.apps = map[string]*ruleIndex{}
	}
	if old := c.apps[app]; old == nil || old.version <= ix.version {
		c.apps[app] = ix
	}
	c.mu.Unlock()
	return ix
}

func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// complexity: indexes each rule kind of a version by resource, one loop per kind
func indexRules(cur cluster.RuleVersion) *ruleIndex {
	ix := &ruleIndex{version: cur.Version, byRes: map[string][]appliedRule{}}
	if len(strings.TrimSpace(string(cur.Doc))) == 0 {
		return ix
	}
	set, err := rules.Decode(cur.Doc, rules.YAML)
	if err != nil {
		ix.err = err
		return ix
	}
	ix.set = set
	add := func(res string, a appliedRule) { ix.byRes[res] = append(ix.byRes[res], a) }
	for i, r := range set.Flow {
		a := appliedRule{Kind: "flow", Index: i}
		if r.Metric == rules.Concurrency && r.Adaptive != nil {
			a.Summary, a.Plot = "concurrency adaptive", "inflight" // its limit moves: no line to plot
		} else if r.Metric == rules.Concurrency {
			a.Summary, a.Limit, a.Plot = "concurrency "+num(r.Threshold)+" in flight", r.Threshold, "inflight"
		} else {
			per := 1.0
			if r.StatInterval > 0 {
				per = r.StatInterval.Seconds()
			}
			a.Summary, a.Limit, a.Plot = "flow "+num(r.Threshold)+"/s", r.Threshold/per, "requests"
			if r.StatInterval > 0 && r.StatInterval != time.Second {
				a.Summary = "flow " + num(r.Threshold) + " per " + r.StatInterval.String()
			}
			if r.Throttle != nil {
				a.Summary += " (throttle)"
			}
		}
		if r.Cluster != nil {
			a.Shared = true
			a.Summary += " for the fleet"
		}
		if len(r.Tiers) > 0 {
			a.Tiered = true
			a.Summary += " in " + strconv.Itoa(len(r.Tiers)+1) + " tiers"
		}
		if r.Shadow {
			a.Summary += " (shadow)"
		}
		add(r.Resource, a)
	}
	for i, r := range set.CircuitBreaker {
		add(r.Resource, appliedRule{Kind: "circuitBreaker", Index: i, Summary: "circuit breaker " + string(r.Strategy) + " " + num(r.Threshold)})
	}
	for i, r := range set.Param {
		per := "/s"
		if r.Duration > 0 && r.Duration != time.Second {
			per = " per " + r.Duration.String()
		}
		add(r.Resource, appliedRule{Kind: "param", Index: i, Summary: "param " + strconv.FormatInt(r.Threshold, 10) + per + " per argument " + strconv.Itoa(r.Index)})
	}
	for i, r := range set.Authority {
		add(r.Resource, appliedRule{Kind: "authority", Index: i, Summary: authoritySummary(r)})
	}
	return ix
}

// authoritySummary describes an authority rule in the resource table:
// "allow 2 callers, strict". The callers themselves are not listed.
func authoritySummary(r rules.Authority) string {
	s := "authority strict"
	switch {
	case len(r.Allow) > 0:
		s = "authority allow " + strconv.Itoa(len(r.Allow)) + " callers"
	case len(r.Deny) > 0:
		s = "authority deny " + strconv.Itoa(len(r.Deny)) + " callers"
	}
	if r.Strict && (len(r.Allow) > 0 || len(r.Deny) > 0) {
		s += ", strict"
	}
	return s
}

// apportion returns the refusals of a second by block type, adding up to
// block, the second's count of refusals. An engine's frame counts both
// over the same second, and then they are returned as they are; engines
// that counted the types between two frames (so that they differed by the
// refusals that raced the frame: "blocked 761 (isolation 769)"), and a
// frame taken over a second late (no types then), are why this guard
// stays. The types divide block in their proportions (largest
// remainders); with one type, it has them all. Refusals without a type
// count as "other" (index 0).
func apportion(block uint64, by [len(stat.Snapshot{}.BlockedBy)]uint64) [len(stat.Snapshot{}.BlockedBy)]uint64 {
	var sum uint64
	for _, n := range by {
		sum += n
	}
	if sum == block {
		return by
	}
	var out [len(stat.Snapshot{}.BlockedBy)]uint64
	if block == 0 {
		return out
	}
	if sum == 0 {
		out[0] = block
		return out
	}
	var given uint64
	var rem [len(stat.Snapshot{}.BlockedBy)]float64
	for i, n := range by {
		exact := float64(block) * float64(n) / float64(sum)
		out[i] = uint64(exact)
		rem[i] = exact - float64(out[i])
		given += out[i]
	}
	for given < block {
		best := -1
		for i := range rem {
			if by[i] > 0 && (best < 0 || rem[i] > rem[best]) {
				best = i
			}
		}
		out[best]++
		rem[best] = -1
		given++
	}
	return out
}

// figures adds up a resource's seconds.
type figures struct {
	pass, block uint64
	blocked     [len(stat.Snapshot{}.BlockedBy)]uint64
	rtSum       float64
	rtN         uint64
	inflight    int64
	last        int64  // the newest second with the resource
	shadow      uint64 // would-be refusals of rules in shadow mode
	// adaptive is the adaptive limit (added up over instances) and tier the
	// highest step of a tiered rule, in each instance's newest frame.
	adaptive int64
	tier     int
	// newest: only the instances' newest frames had the resource.
	newest bool
}

func (f *figures) add(rs *cluster.ResourceSecond) {
	f.pass += rs.Pass
	f.block += rs.Block
	by := apportion(rs.Block, rs.BlockedBy)
	for i, n := range by {
		f.blocked[i] += n
	}
	f.rtSum += float64(rs.AvgRT) * float64(rs.Complete)
	f.rtN += rs.Complete
	f.shadow += rs.ShadowBlock
}

func (f *figures) rt() float64 {
	if f.rtN == 0 {
		return 0
	}
	return f.rtSum / float64(f.rtN) / float64(time.Millisecond)
}

func (f *figures) blockedSlice() []uint64 {
	if f.block == 0 {
		return nil
	}
	return slices.Clone(f.blocked[:])
}

// resourceRow is a row of the resource table.
type resourceRow struct {
	Resource string        `json:"resource"`
	Pass     uint64        `json:"pass"`
	Block    uint64        `json:"block"`
	Blocked  []uint64      `json:"blocked,omitempty"`
	RT       float64       `json:"rt"`
	InFlight int64         `json:"inflight"`
	Rules    []appliedRule `json:"rules"`
	// Adaptive is the adaptive concurrency limit in force, added up over
	// the instances (0 without an adaptive rule); Tier the highest step of
	// a tiered rule among them; Shadow the requests that rules in shadow
	// mode would have refused (they passed).
	Adaptive int64  `json:"adaptive"`
	Tier     int    `json:"tier"`
	Shadow   uint64 `json:"shadow"`
	// Newest: the figures are of the newest second only: no frame kept of
	// the window had the resource among its busiest (the telemetry store
	// keeps the seconds with the busiest, and each instance's newest frame
	// whole).
	Newest bool `json:"newest,omitempty"`
}

// latestFrames is a telemetry store that keeps each instance's newest
// frame whole, and the frames of the seconds before with only their
// busiest resources (sluiceredis.Telemetry).
type latestFrames interface {
	Latest(ctx context.Context, app string) ([]cluster.Frame, error)
}

// latest returns the newest frame of each of app's instances, whole, and
// whether the telemetry store keeps them (false: its frames are whole).
func (d *Dashboard) latest(ctx context.Context, app string, errs *[]string) ([]cluster.Frame, bool) {
	lt, ok := d.tel.(latestFrames)
	if !ok {
		return nil, false
	}
	fs, err := lt.Latest(ctx, app)
	if err != nil {
		*errs = append(*errs, "telemetry: "+err.Error())
	}
	return fs, true
}

// resourcePage is a page of the resource table.
type resourcePage struct {
	App     string `json:"app"`
	Version int64  `json:"version"`
	Now     int64  `json:"now"`
	Since   int64  `json:"since"`
	// Total counts the resources that match Query; All every resource.
	Total       int           `json:"total"`
	All         int           `json:"all"`
	Offset      int           `json:"offset"`
	Limit       int           `json:"limit"`
	Sort        string        `json:"sort"`
	Desc        bool          `json:"desc"`
	Query       string        `json:"q"`
	Rows        []resourceRow `json:"rows"`
	BlockTypes  []string      `json:"blockTypes"`
	BlockLabels []string      `json:"blockLabels"`
	Errors      []string      `json:"errors,omitempty"`
}

var sortKeys = []string{"resource", "pass", "block", "rt", "inflight", "adaptive", "tier", "shadow", "rules"}

// resources answers the resource table: ?q= (a part of the name, any
// case), sort= (resource, pass, block, rt, inflight, adaptive, tier,
// shadow, rules), desc=1,
// offset= and limit= (at most maxPageSize).
func (d *Dashboard) resources(w http.ResponseWriter, r *http.Request, c *call) {
	q := r.URL.Query()
	p := &resourcePage{Query: q.Get("q"), Sort: q.Get("sort"), Desc: q.Get("desc") == "1"}
	if len(p.Query) > maxQuery {
		p.Query = strings.ToValidUTF8(p.Query[:maxQuery], "")
	}
	if !slices.Contains(sortKeys, p.Sort) {
		p.Sort, p.Desc = "pass", true
	}
	p.Offset, _ = strconv.Atoi(q.Get("offset"))
	p.Limit, _ = strconv.Atoi(q.Get("limit"))
	p.Offset = max(p.Offset, 0)
	if p.Limit <= 0 {
		p.Limit = defaultPageSize
	}
	p.Limit = min(p.Limit, maxPageSize)
	d.resourceTable(r.Context(), c.app, p)
	w.Header().Set("Content-Type", "application/json")
	newJSON(w).Encode(p)
}

// resourceTable fills p's rows.
//
// complexity: one row per resource with its rules, statistics, sort and filter; a switch of sort keys
func (d *Dashboard) resourceTable(ctx context.Context, app string, p *resourcePage) {
	start := d.cfg.Now()
	now := start.Unix()
	defer func() {
		if len(p.Errors) > 0 {
			d.reads.failed(start)
		} else {
			d.reads.ok(start)
		}
	}()
	win := int64(d.window / time.Second)
	p.App, p.Now, p.Since = app, now, now-min(win, tableSeconds)
	p.BlockTypes, p.BlockLabels, p.Rows = blockTypes, blockLabels, []resourceRow{}
	cur, err := d.store.Current(ctx, app)
	if err != nil {
		p.Errors = append(p.Errors, "rule store: "+err.Error())
	}
	p.Version = cur.Version
	ix := d.rulesOf(app, cur)
	var frames []cluster.Frame
	if d.tel != nil {
		frames, err = d.tel.Frames(ctx, app, p.Since)
		if err != nil {
			p.Errors = append(p.Errors, "telemetry: "+err.Error())
		}
	}
	frames = byInstanceSecond(frames)
	latest, haveLatest := d.latest(ctx, app, &p.Errors)
	all := map[string]*figures{}
	get := func(name string) *figures {
		f := all[name]
		if f == nil && len(all) < maxResources {
			f = &figures{}
			all[name] = f
		}
		return f
	}
	for res := range ix.byRes {
		get(res)
	}
	newest := map[string]int64{} // instance -> its newest second
	for i := range frames {
		f := &frames[i]
		if f.Second > newest[f.Instance] {
			newest[f.Instance] = f.Second
		}
	}
	for i := range frames {
		f := &frames[i]
		if f.Second < p.Since || f.Second > now {
			continue
		}
		for j := range f.Resources {
			rs := &f.Resources[j]
			fg := get(rs.Resource)
			if fg == nil {
				continue
			}
			fg.add(rs)
			fg.last = max(fg.last, f.Second)
			if !haveLatest && f.Second == newest[f.Instance] {
				fg.inflight += rs.Concurrency
				fg.adaptive += rs.AdaptiveLimit
				fg.tier = max(fg.tier, rs.Tier)
			}
		}
	}
	// The newest frame of each instance, whole: the figures in flight of
	// every resource, and the newest second of those no listed frame of
	// the window holds (outside the busiest of each second).
	for i := range latest {
		f := &latest[i]
		if f.Second < p.Since || f.Second > now {
			continue
		}
		for j := range f.Resources {
			rs := &f.Resources[j]
			fg := get(rs.Resource)
			if fg == nil {
				continue
			}
			if fg.last == 0 || fg.newest {
				fg.add(rs)
				fg.last, fg.newest = max(fg.last, f.Second), true
			}
			fg.inflight += rs.Concurrency
			fg.adaptive += rs.AdaptiveLimit
			fg.tier = max(fg.tier, rs.Tier)
		}
	}
	p.All = len(all)
	names := make([]string, 0, len(all))
	lq := strings.ToLower(p.Query)
	for n := range all {
		if lq == "" || strings.Contains(strings.ToLower(n), lq) {
			names = append(names, n)
		}
	}
	p.Total = len(names)
	less := func(a, b string) int {
		fa, fb := all[a], all[b]
		var c int
		switch p.Sort {
		case "pass":
			c = cmpU(fa.pass, fb.pass)
		case "block":
			c = cmpU(fa.block, fb.block)
		case "rt":
			c = cmpF(fa.rt(), fb.rt())
		case "inflight":
			c = cmpF(float64(fa.inflight), float64(fb.inflight))
		case "adaptive":
			c = cmpF(float64(fa.adaptive), float64(fb.adaptive))
		case "tier":
			c = fa.tier - fb.tier
		case "shadow":
			c = cmpU(fa.shadow, fb.shadow)
		case "rules":
			c = len(ix.byRes[a]) - len(ix.byRes[b])
		}
		if p.Desc {
			c = -c
		}
		if c == 0 {
			c = strings.Compare(a, b)
			if p.Sort == "resource" && p.Desc {
				c = -c
			}
		}
		return c
	}
	slices.SortFunc(names, less)
	if p.Offset >= len(names) {
		p.Offset = max(0, (len(names)-1)/p.Limit*p.Limit)
	}
	for _, n := range names[p.Offset:min(len(names), p.Offset+p.Limit)] {
		f := all[n]
		row := resourceRow{Resource: n, Pass: f.pass, Block: f.block, Blocked: f.blockedSlice(), RT: f.rt(), InFlight: f.inflight,
			Rules: ix.byRes[n], Adaptive: f.adaptive, Tier: f.tier, Shadow: f.shadow, Newest: f.newest}
		if row.Rules == nil {
			row.Rules = []appliedRule{}
		}
		p.Rows = append(p.Rows, row)
	}
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// byInstanceSecond sorts frames by instance then second, a frame
// published twice counting once.
func byInstanceSecond(frames []cluster.Frame) []cluster.Frame {
	sort.SliceStable(frames, func(i, j int) bool {
		a, b := &frames[i], &frames[j]
		return a.Instance < b.Instance || a.Instance == b.Instance && a.Second < b.Second
	})
	return slices.CompactFunc(frames, func(a, b cluster.Frame) bool { return a.Instance == b.Instance && a.Second == b.Second })
}

// instanceFigures is one instance's figures of a resource.
type instanceFigures struct {
	Instance string   `json:"instance"`
	Pass     uint64   `json:"pass"`
	Block    uint64   `json:"block"`
	Blocked  []uint64 `json:"blocked,omitempty"`
	RT       float64  `json:"rt"`
	InFlight int64    `json:"inflight"`
	Last     int64    `json:"last"`             // the newest second with the resource
	Adaptive int64    `json:"adaptive"`         // the adaptive limit in the newest frame
	Tier     int      `json:"tier"`             // the tiered rule's step in the newest frame
	Shadow   uint64   `json:"shadow"`           // would-be refusals of rules in shadow mode
	Newest   bool     `json:"newest,omitempty"` // the figures are of the newest second only
}

// resourceDetail is one resource per instance, for the table's row opened.
type resourceDetail struct {
	Resource    string            `json:"resource"`
	Now         int64             `json:"now"`
	Since       int64             `json:"since"`
	Instances   []instanceFigures `json:"instances"`
	Rules       []appliedRule     `json:"rules"`
	BlockTypes  []string          `json:"blockTypes"`
	BlockLabels []string          `json:"blockLabels"`
	// Callers are the most refused callers over the seconds (callers.go).
	Callers []callerFigure `json:"callers"`
	Errors  []string       `json:"errors,omitempty"`
}

// resource answers ?name=: the resource per instance over the table's
// seconds, and its rules.
func (d *Dashboard) resource(w http.ResponseWriter, r *http.Request, c *call) {
	name := r.URL.Query().Get("name")
	ctx := r.Context()
	now := d.cfg.Now().Unix()
	win := int64(d.window / time.Second)
	rd := &resourceDetail{Resource: name, Now: now, Since: now - min(win, tableSeconds), Instances: []instanceFigures{},
		BlockTypes: blockTypes, BlockLabels: blockLabels}
	cur, err := d.store.Current(ctx, c.app)
	if err != nil {
		rd.Errors = append(rd.Errors, "rule store: "+err.Error())
	}
	rd.Rules = d.rulesOf(c.app, cur).byRes[name]
	if rd.Rules == nil {
		rd.Rules = []appliedRule{}
	}
	var frames []cluster.Frame
	if d.tel != nil {
		frames, err = d.tel.Frames(ctx, c.app, rd.Since)
		if err != nil {
			rd.Errors = append(rd.Errors, "telemetry: "+err.Error())
		}
	}
	frames = byInstanceSecond(frames)
	latest, _ := d.latest(ctx, c.app, &rd.Errors)
	by, ids := instanceFiguresOf(frames, latest, name, rd.Since, now)
	rd.Callers = refusedCallersOf(frames, latest, name, rd.Since, now)
	for _, id := range ids {
		f := by[id]
		rd.Instances = append(rd.Instances, instanceFigures{Instance: id, Pass: f.pass, Block: f.block, Blocked: f.blockedSlice(),
			RT: f.rt(), InFlight: f.inflight, Last: f.last, Adaptive: f.adaptive, Tier: f.tier, Shadow: f.shadow, Newest: f.newest})
	}
	w.Header().Set("Content-Type", "application/json")
	newJSON(w).Encode(rd)
}

// instanceFiguresOf adds up resource name's figures per instance over the
// frames of seconds since..now, and takes each instance's newest frame,
// whole, for its figures in flight (and its second, when no listed frame
// had the resource). ids are the instances in the order first seen.
func instanceFiguresOf(frames, latest []cluster.Frame, name string, since, now int64) (by map[string]*figures, ids []string) {
	by = map[string]*figures{}
	for i := range frames {
		f := &frames[i]
		if f.Second < since || f.Second > now {
			continue
		}
		for j := range f.Resources {
			rs := &f.Resources[j]
			if rs.Resource != name {
				continue
			}
			fg := by[f.Instance]
			if fg == nil {
				fg = &figures{}
				by[f.Instance] = fg
				ids = append(ids, f.Instance)
			}
			fg.add(rs)
			fg.last = f.Second
			fg.inflight = rs.Concurrency // frames by second: the newest stays
			fg.adaptive, fg.tier = rs.AdaptiveLimit, rs.Tier
		}
	}
	// Each instance's newest frame, whole: its figures in flight, and its
	// second when no listed frame had the resource.
	for i := range latest {
		f := &latest[i]
		if f.Second < since || f.Second > now {
			continue
		}
		for j := range f.Resources {
			rs := &f.Resources[j]
			if rs.Resource != name {
				continue
			}
			fg := by[f.Instance]
			if fg == nil {
				fg = &figures{newest: true}
				by[f.Instance] = fg
				ids = append(ids, f.Instance)
				fg.add(rs)
				fg.last = f.Second
			}
			fg.inflight = rs.Concurrency
			fg.adaptive, fg.tier = rs.AdaptiveLimit, rs.Tier
		}
	}
	return by, ids
}
