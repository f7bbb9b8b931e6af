package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/dashboard"
	"github.com/sluice-go/sluice/dashboard/internal/memstore"
	"github.com/sluice-go/sluice/stat"
)

// xssNames are resource names a hostile caller may give a resource.
var xssNames = []string{
	`<script>alert(1)</script>`,
	`"><img src=x onerror=alert(1)>`,
	`javascript:alert(1)`,
	`</textarea><script>alert(2)</script>`,
	`{{.}}${alert(3)}$&`,
	"'; alert(4); '",
	"\u2028<svg onload=alert(5)>",
}

type tableRow struct {
	Resource string
	Pass     uint64
	Block    uint64
	Blocked  []uint64
	RT       float64
	InFlight int64 `json:"inflight"`
	Rules    []struct {
		Kind, Summary string
		Limit         float64
		Plot          string
	}
}

type tablePage struct {
	Total, All, Offset, Limit int
	Sort                      string
	Desc                      bool
	Rows                      []tableRow
	BlockTypes                []string
}

func getTable(t *testing.T, c *client, q url.Values) tablePage {
	t.Helper()
	code, body := c.get("/api/apps/shop/resources?" + q.Encode())
	require.Equal(t, http.StatusOK, code, body)
	var p tablePage
	require.NoError(t, json.Unmarshal([]byte(body), &p))
	return p
}

func names(p tablePage) (out []string) {
	for _, r := range p.Rows {
		out = append(out, r.Resource)
	}
	return out
}

// memFleet is a fleet whose frames are kept in memory (Redis keeps the 50
// busiest resources of a frame), at the Unix second now.
func memFleet(t *testing.T, now int64) (*fleet, *memstore.Store) {
	clock := func() time.Time { return time.Unix(now, 0) }
	tel := memstore.New(clock)
	f := newFleet(t, func(c *dashboard.Config) { c.Now, c.Telemetry = clock, tel })
	return f, tel
}

// TestResourceTable: the table has every resource of the last minute's
// frames and of the rules, added up over instances, searched, sorted and
// paged on the server with a bounded page; a row opened per instance.
func TestResourceTable(t *testing.T) {
	const now = 1_800_000_000
	f, tel := memFleet(t, now)
	ctx := context.Background()
	doc := "flow:\n  - resource: r007\n    threshold: 50\n  - resource: \"" + "quiet" + "\"\n    threshold: 5\n" +
		"isolation:\n  - resource: r007\n    threshold: 8\n"
	_, err := f.store.Save(ctx, "shop", 1, cluster.RuleVersion{Doc: []byte(doc), Author: "seed"})
	require.NoError(t, err)
	// 300 resources r000..r299 on two instances for 3 seconds: resource i
	// passes i a second on each; r007 also refused 761 in the last second
	// whose types the frame counted as 769 flow (the publisher's
	// race); an old frame, before the minute, is not counted.
	for _, id := range []string{"a", "b"} {
		for s := int64(now - 3); s < now; s++ {
			fr := cluster.Frame{App: "shop", Instance: id, Second: s}
			for i := 0; i < 300; i++ {
				rs := cluster.ResourceSecond{Resource: fmt.Sprintf("r%03d", i), Second: stat.Second{Pass: uint64(i), Complete: uint64(i), AvgRT: time.Duration(i) * time.Millisecond}, Concurrency: int64(i % 5)}
				if i == 7 && s == now-1 && id == "a" {
					rs.Block = 761
					rs.BlockedBy[int(sluice.BlockFlow)] = 769
				}
				fr.Resources = append(fr.Resources, rs)
			}
			require.NoError(t, tel.Publish(ctx, fr, 1000, time.Hour))
		}
	}
	require.NoError(t, tel.Publish(ctx, cluster.Frame{App: "shop", Instance: "a", Second: now - 200,
		Resources: []cluster.ResourceSecond{{Resource: "old", Second: stat.Second{Pass: 5}}}}, 1000, time.Hour))
	viv := signIn(t, f.srv, "viv")

	p := getTable(t, viv, url.Values{})
	require.Equal(t, 301, p.All, "300 in traffic and quiet, in the rules; old is before the minute")
	require.Equal(t, 301, p.Total)
	require.Equal(t, 50, p.Limit)
	require.Equal(t, "pass", p.Sort)
	require.True(t, p.Desc)
	require.Equal(t, []string{"r299", "r298", "r297"}, names(p)[:3])
	require.Equal(t, uint64(299*2*3), p.Rows[0].Pass, "two instances, three seconds")
	require.InDelta(t, 299.0, p.Rows[0].RT, 1e-9)
	require.Equal(t, int64(2*(299%5)), p.Rows[0].InFlight, "the newest frame of each instance")

	p = getTable(t, viv, url.Values{"q": {"R00"}, "sort": {"resource"}})
	require.Equal(t, 10, p.Total, "case-insensitive search")
	require.Equal(t, []string{"r000", "r001", "r002"}, names(p)[:3])
	r7 := p.Rows[7]
	require.Equal(t, "r007", r7.Resource)
	require.Equal(t, uint64(761), r7.Block)
	var sum uint64
	for _, n := range r7.Blocked {
		sum += n
	}
	require.Equal(t, uint64(761), sum, "blocked by type adds up to blocked: %v", r7.Blocked)
	require.Equal(t, uint64(761), r7.Blocked[int(sluice.BlockFlow)])
	require.Len(t, r7.Rules, 2)
	require.Equal(t, "flow 50/s", r7.Rules[0].Summary)
	require.Equal(t, 50.0, r7.Rules[0].Limit)
	require.Equal(t, "requests", r7.Rules[0].Plot)
	require.Equal(t, "concurrency 8 in flight", r7.Rules[1].Summary)
	require.Equal(t, "inflight", r7.Rules[1].Plot)

	p = getTable(t, viv, url.Values{"q": {"quiet"}})
	require.Equal(t, []string{"quiet"}, names(p), "a resource with a rule and no traffic")
	require.Zero(t, p.Rows[0].Pass)

	// Paging: bounded, the last page clamped.
	p = getTable(t, viv, url.Values{"sort": {"resource"}, "desc": {"1"}, "limit": {"100000"}})
	require.Equal(t, 200, p.Limit)
	require.Len(t, p.Rows, 200)
	require.Equal(t, "r299", p.Rows[0].Resource)
	p = getTable(t, viv, url.Values{"sort": {"resource"}, "offset": {"290"}, "limit": {"20"}})
	require.Equal(t, 290, p.Offset)
	require.Len(t, p.Rows, 11)
	p = getTable(t, viv, url.Values{"sort": {"resource"}, "offset": {"9999"}, "limit": {"20"}})
	require.Equal(t, 300, p.Offset, "past the end: the last page")
	p = getTable(t, viv, url.Values{"sort": {"block"}, "desc": {"1"}, "limit": {"1"}})
	require.Equal(t, []string{"r007"}, names(p))
	p = getTable(t, viv, url.Values{"sort": {"rules"}, "desc": {"1"}, "limit": {"2"}})
	require.Equal(t, []string{"r007", "quiet"}, names(p))
	p = getTable(t, viv, url.Values{"sort": {"nonsense"}, "q": {strings.Repeat("x", 5000)}})
	require.Equal(t, "pass", p.Sort)
	require.Zero(t, p.Total)

	// One resource per instance.
	code, body := viv.get("/api/apps/shop/resource?name=r007")
	require.Equal(t, http.StatusOK, code)
	var d struct {
		Instances []struct {
			Instance    string
			Pass, Block uint64
			Blocked     []uint64
			Last        int64
		}
		Rules []struct{ Summary string }
	}
	require.NoError(t, json.Unmarshal([]byte(body), &d))
	require.Len(t, d.Instances, 2)
	require.Equal(t, "a", d.Instances[0].Instance)
	require.Equal(t, uint64(21), d.Instances[0].Pass)
	require.Equal(t, uint64(761), d.Instances[0].Block)
	require.Equal(t, uint64(0), d.Instances[1].Block)
	require.Equal(t, int64(now-1), d.Instances[1].Last)
	require.Len(t, d.Rules, 2)

	// Another application's viewer reads none of it.
	bill := signIn(t, f.srv, "bill")
	code, _ = bill.get("/api/apps/shop/resources")
	require.Equal(t, http.StatusNotFound, code)
}

// TestResourceTableEscapesNames: hostile resource names come back as
// JSON strings with <, > and & escaped, whole, and searchable.
func TestResourceTableEscapesNames(t *testing.T) {
	const now = 1_800_000_000
	f, tel := memFleet(t, now)
	ctx := context.Background()
	fr := cluster.Frame{App: "shop", Instance: "a", Second: now - 1}
	for _, n := range xssNames {
		fr.Resources = append(fr.Resources, cluster.ResourceSecond{Resource: n, Second: stat.Second{Pass: 1}})
	}
	require.NoError(t, tel.Publish(ctx, fr, 100, time.Hour))
	viv := signIn(t, f.srv, "viv")
	for _, p := range []string{"/api/apps/shop/resources?limit=200", "/api/apps/shop/live?r=" + url.QueryEscape(xssNames[0]),
		"/api/apps/shop/resource?name=" + url.QueryEscape(xssNames[1])} {
		code, body := viv.get(p)
		require.Equal(t, http.StatusOK, code, p)
		require.NotContains(t, body, "<", p)
		require.NotContains(t, body, ">", p)
	}
	for _, n := range xssNames {
		p := getTable(t, viv, url.Values{"q": {n}})
		require.Equal(t, []string{n}, names(p), "search for %q", n)
	}
}

// TestLiveChosenSeries: the charts' series are the resources asked for
// (at most 12), with their rules and the instances that publish them,
// else the four busiest; a whole-window answer marks the versions saved
// in it.
func TestLiveChosenSeries(t *testing.T) {
	now := time.Now().Unix() // the store dates versions by the real clock
	f, tel := memFleet(t, now)
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c"} {
		fr := cluster.Frame{App: "shop", Instance: id, Second: now - 1}
		for i := 0; i < 20; i++ {
			fr.Resources = append(fr.Resources, cluster.ResourceSecond{Resource: fmt.Sprintf("r%02d", i), Second: stat.Second{Pass: uint64(i)}})
		}
		require.NoError(t, tel.Publish(ctx, fr, 100, time.Hour))
	}
	viv := signIn(t, f.srv, "viv")
	type answer struct {
		Chosen    bool
		Resources []struct {
			Resource  string
			Instances int
			Rules     []struct{ Summary string }
		}
		Versions []struct{ Version int64 }
	}
	get := func(q string) answer {
		code, body := viv.get("/api/apps/shop/live" + q)
		require.Equal(t, http.StatusOK, code)
		var a answer
		require.NoError(t, json.Unmarshal([]byte(body), &a))
		return a
	}
	a := get("")
	require.False(t, a.Chosen)
	require.Len(t, a.Resources, 4)
	require.Equal(t, "r19", a.Resources[0].Resource)
	a = get("?r=r03&r=GET+/api&r=r03")
	require.True(t, a.Chosen)
	require.Len(t, a.Resources, 2)
	require.Equal(t, "r03", a.Resources[0].Resource)
	require.Equal(t, 3, a.Resources[0].Instances)
	require.Equal(t, "GET /api", a.Resources[1].Resource)
	_, body := viv.get(fmt.Sprintf("/api/apps/shop/live?r=nowhere&since=%d", now))
	require.Contains(t, body, `"resource":"nowhere","points":[]`, "a resource without frames: no points, not null")
	require.Equal(t, "flow 100/s", a.Resources[1].Rules[0].Summary, "shop's rule")
	q := ""
	for i := 0; i < 20; i++ {
		q += fmt.Sprintf("&r=r%02d", i)
	}
	require.Len(t, get("?"+q[1:]).Resources, 12)
	// The version seeded just now is marked on a whole-window answer, not
	// on one of the last seconds.
	require.Len(t, get("").Versions, 1)
	require.Empty(t, get(fmt.Sprintf("?since=%d", now-3)).Versions)
}

// TestLiveBlockedAddsUp: a second whose refusals by type were counted
// apart from its refusals ("blocked 761 (isolation 769)": the publisher
// reads the types when it takes the frame, the total over the second)
// is drawn with types that add up to the total.
func TestLiveBlockedAddsUp(t *testing.T) {
	const now = 1_800_000_000
	f, tel := memFleet(t, now)
	ctx := context.Background()
	for i, give := range []struct {
		block uint64
		by    map[int]uint64
	}{
		{761, map[int]uint64{int(sluice.BlockFlow): 769}},
		{10, map[int]uint64{int(sluice.BlockFlow): 3, int(sluice.BlockParam): 9}},
		{4, nil}, // the types fell in the next frame
	} {
		rs := cluster.ResourceSecond{Resource: "GET /api", Second: stat.Second{Pass: 1, Block: give.block}}
		for k, n := range give.by {
			rs.BlockedBy[k] = n
		}
		require.NoError(t, tel.Publish(ctx, cluster.Frame{App: "shop", Instance: "a", Second: now - 3 + int64(i),
			Resources: []cluster.ResourceSecond{rs}}, 100, time.Hour))
	}
	viv := signIn(t, f.srv, "viv")
	_, body := viv.get("/api/apps/shop/live")
	var l struct {
		Resources []struct {
			Points []struct {
				Block   uint64
				Blocked []uint64
			}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(body), &l))
	pts := l.Resources[0].Points
	require.Len(t, pts, 3)
	for i, p := range pts {
		var sum uint64
		for _, n := range p.Blocked {
			sum += n
		}
		require.Equal(t, p.Block, sum, "second %d: %v", i, p.Blocked)
	}
	// 10 in the proportions 3:9 are 2.5 and 7.5: the tie goes to the first.
	require.Equal(t, uint64(3), pts[1].Blocked[int(sluice.BlockFlow)])
	require.Equal(t, uint64(7), pts[1].Blocked[int(sluice.BlockParam)])
	require.Equal(t, uint64(761), pts[0].Blocked[int(sluice.BlockFlow)])
	require.Equal(t, uint64(4), pts[2].Blocked[0], "unattributed: other")
}

// TestNoStraySpace: the rules page says "Version in force: 2, saved by",
// not "2 , saved by".
func TestNoStraySpace(t *testing.T) {
	f := newFleet(t, nil)
	viv := signIn(t, f.srv, "viv")
	_, body := viv.get("/apps/shop/rules")
	require.Regexp(t, `<strong id="version">1</strong>,\s+saved by seed at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\.</p>`, body)
}

// TestCommentKeptAndSavedNotice: a refused save (422) and a conflict
// (409) show the comment again with the text; a save is announced, with
// the rollout to follow.
func TestCommentKeptAndSavedNotice(t *testing.T) {
	f := newFleet(t, nil)
	ed := signIn(t, f.srv, "ed")
	const why = `halve it <b>now</b>`
	code, body := ed.post("/apps/shop/rules", url.Values{"base": {"1"}, "comment": {why},
		"doc": {"flow:\n  - resource: GET /api\n    threshold: -1\n"}})
	require.Equal(t, http.StatusUnprocessableEntity, code)
	require.Contains(t, body, `value="halve it &lt;b&gt;now&lt;/b&gt;"`)
	code, body = ed.post("/apps/shop/rules", url.Values{"base": {"0"}, "comment": {why},
		"doc": {"flow:\n  - resource: GET /api\n    threshold: 5\n"}})
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, body, `value="halve it &lt;b&gt;now&lt;/b&gt;"`)
	code, _ = ed.post("/apps/shop/rules", url.Values{"base": {"1"}, "comment": {why},
		"doc": {"flow:\n  - resource: GET /api\n    threshold: 5\n"}})
	require.Equal(t, http.StatusSeeOther, code)
	_, body = ed.get("/apps/shop/rules?saved=2")
	require.Contains(t, body, `<div class="notice" role="status">Version 2 saved.</div>`)
	require.Contains(t, body, `id="rollout"`)
	require.Contains(t, body, `data-version="2"`)
	_, body = ed.get("/apps/shop/rules?saved=9")
	require.NotContains(t, body, "saved.</div>", "not a version saved")
}

// TestRulesPageListsAPage: a large document lists 100 rules of a kind at
// a time, searched by resource; the editor holds the whole document.
func TestRulesPageListsAPage(t *testing.T) {
	f := newFleet(t, nil)
	var doc strings.Builder
	doc.WriteString("flow:\n")
	for i := 0; i < 250; i++ {
		fmt.Fprintf(&doc, "  - resource: GET /r%05d\n    threshold: 10\n", i)
	}
	_, err := f.store.Save(context.Background(), "shop", 1, cluster.RuleVersion{Doc: []byte(doc.String()), Author: "seed"})
	require.NoError(t, err)
	ed := signIn(t, f.srv, "ed")
	rows := func(body string) int { return strings.Count(body, `<pre class="rule">`) }
	_, body := ed.get("/apps/shop/rules")
	require.Equal(t, 100, rows(body))
	require.Contains(t, body, "1–100 of 250")
	require.Contains(t, body, `id="rule-next"`)
	require.Contains(t, body, "GET /r00249", "in the editor's document")
	_, body = ed.get("/apps/shop/rules?offset=200")
	require.Equal(t, 50, rows(body))
	require.Contains(t, body, "201–250 of 250")
	require.Contains(t, body, `name="index" value="249"`, "a listed rule deletes by its index in the document")
	_, body = ed.get("/apps/shop/rules?q=r0024")
	require.Equal(t, 10, rows(body))
	require.NotContains(t, body, `id="rule-next"`)
}

// TestAuditNamesRulesAndFilters: the audit log names the rules a save
// changed, in a 2,500-rule document too (where the line diff gives up; 10,000
// rules in TestRuleDiff10k),
// and filters and pages.
func TestAuditNamesRulesAndFilters(t *testing.T) {
	f := newFleet(t, nil)
	ed := signIn(t, f.srv, "ed")
	code, _ := ed.post("/apps/shop/rules", url.Values{"base": {"1"}, "doc": {"flow:\n  - resource: GET /api\n    threshold: 20\n"}})
	require.Equal(t, http.StatusSeeOther, code)
	big := func(th int) string {
		var b strings.Builder
		b.WriteString("flow:\n")
		for i := 0; i < 2500; i++ { // 5,000 lines: more than the line diff compares
			n := 10
			if i == 1042 {
				n = th
			}
			fmt.Fprintf(&b, "  - resource: GET /r%05d\n    threshold: %d\n", i, n)
		}
		return b.String()
	}
	ctx := context.Background()
	_, err := f.store.Save(ctx, "shop", 2, cluster.RuleVersion{Doc: []byte(big(10)), Author: "eve"})
	require.NoError(t, err)
	_, err = f.store.Save(ctx, "shop", 3, cluster.RuleVersion{Doc: []byte(big(20)), Author: "eve"})
	require.NoError(t, err)

	_, body := ed.get("/apps/shop/audit")
	require.Contains(t, body, "<li>flow rule GET /api: threshold 100 → 20</li>")
	require.Contains(t, body, "<li>flow rule GET /r01042: threshold 10 → 20</li>", "2,500 rules compared")
	require.Contains(t, body, "too many to compare", "where the line diff gives up")
	_, body = ed.get("/apps/shop/history?v=4")
	require.Contains(t, body, "<li>flow rule GET /r01042: threshold 10 → 20</li>")

	// 60 more saves by ed: pages of 50, newest first.
	for v := int64(4); v < 64; v++ {
		_, err := f.store.Save(ctx, "shop", v, cluster.RuleVersion{Doc: []byte(fmt.Sprintf("flow:\n  - resource: GET /api\n    threshold: %d\n", v)), Author: "ed"})
		require.NoError(t, err)
	}
	rowsOf := func(body string) int { return strings.Count(body, `<tr class="action-`) }
	_, body = ed.get("/apps/shop/audit")
	require.Equal(t, 50, rowsOf(body))
	require.Contains(t, body, `id="audit-older"`)
	require.Contains(t, body, "<li>flow rule GET /api: threshold 62 → 63</li>")
	_, body = ed.get("/apps/shop/audit?offset=50")
	require.Equal(t, 14, rowsOf(body), "64 saves in all")
	_, body = ed.get("/apps/shop/audit?user=eve")
	require.Equal(t, 2, rowsOf(body))
	_, body = ed.get("/apps/shop/audit?q=" + url.QueryEscape("threshold: 62"))
	require.Equal(t, 2, rowsOf(body), "the text is searched in the line diffs")
	_, body = ed.get("/apps/shop/audit?action=rollback")
	require.Equal(t, 0, rowsOf(body))
	require.Contains(t, body, "No entry matches.")
}

// TestConfirmBeforeChange: a save, a deletion and a rollback sent from
// the pages (preview=1) show what they change and write nothing; the
// confirmation writes; "back to the editor" keeps the text and comment.
func TestConfirmBeforeChange(t *testing.T) {
	f := newFleet(t, nil)
	ed := signIn(t, f.srv, "ed")
	const doc = "flow:\n  - resource: GET /api\n    threshold: 7\n"
	code, body := ed.post("/apps/shop/rules", url.Values{"base": {"1"}, "doc": {doc}, "comment": {"tighter"}, "preview": {"1"}})
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "<li>flow rule GET /api: threshold 100 → 7</li>")
	require.Contains(t, body, `<button type="submit" id="confirm">Save version 2</button>`)
	require.Contains(t, body, "<textarea name=\"doc\" hidden>\n"+doc+"</textarea>")
	require.NotContains(t, body, `name="preview"`)
	require.Equal(t, int64(1), version(t, f.store, "shop"), "nothing written")

	code, body = ed.post("/apps/shop/rules", url.Values{"base": {"1"}, "doc": {doc}, "comment": {"tighter"}, "edit": {"1"}})
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `id="doc" rows="24" spellcheck="false">`+doc)
	require.Contains(t, body, `value="tighter"`)
	require.Equal(t, int64(1), version(t, f.store, "shop"))

	code, _ = ed.post("/apps/shop/rules", url.Values{"base": {"1"}, "doc": {"flow:\n  - resource: x\n    threshold: -1\n"}, "preview": {"1"}})
	require.Equal(t, http.StatusUnprocessableEntity, code, "an invalid text is refused before the confirmation")

	code, _ = ed.post("/apps/shop/rules", url.Values{"base": {"1"}, "doc": {doc}, "comment": {"tighter"}})
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, int64(2), version(t, f.store, "shop"))

	code, body = ed.post("/apps/shop/rules/delete", url.Values{"base": {"2"}, "kind": {"flow"}, "index": {"0"}, "preview": {"1"}})
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "<li>flow rule GET /api removed</li>")
	require.Contains(t, body, `id="confirm">Delete it</button>`)
	code, body = ed.post("/apps/shop/rollback", url.Values{"base": {"2"}, "version": {"1"}, "preview": {"1"}})
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "<li>flow rule GET /api: threshold 7 → 100</li>")
	require.Equal(t, int64(2), version(t, f.store, "shop"), "nothing written")

	// Confirming after someone else saved: the confirmation says so.
	_, err := f.store.Save(context.Background(), "shop", 2, cluster.RuleVersion{Doc: []byte(shopRules), Author: "eve"})
	require.NoError(t, err)
	_, body = ed.post("/apps/shop/rollback", url.Values{"base": {"2"}, "version": {"1"}, "preview": {"1"}})
	require.Contains(t, body, `id="confirm-stale"`)

	// A viewer's preview is refused like the write.
	viv := signIn(t, f.srv, "viv")
	code, _ = viv.post("/apps/shop/rules", url.Values{"base": {"3"}, "doc": {doc}, "preview": {"1"}})
	require.Equal(t, http.StatusForbidden, code)
}
