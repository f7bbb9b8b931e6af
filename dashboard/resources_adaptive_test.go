package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/dashboard"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
	"github.com/sluice-go/sluice/stat"
)

// limitsRow is what the resource table says of a resource's adaptive
// limit, tier and shadow would-be refusals.
type limitsRow struct {
	Resource string
	Adaptive int64
	Tier     int
	Shadow   uint64
	Rules    []struct {
		Summary string
		Tiered  bool
	}
}

func limitsTable(t *testing.T, c *client, q url.Values) []limitsRow {
	t.Helper()
	code, body := c.get("/api/apps/shop/resources?" + q.Encode())
	require.Equal(t, http.StatusOK, code, body)
	var p struct{ Rows []limitsRow }
	require.NoError(t, json.Unmarshal([]byte(body), &p))
	return p.Rows
}

// TestResourceTableAdaptiveTierShadow: in a fleet's frames, the table adds
// up the adaptive limits of the instances' newest frames, takes the
// highest tier among them, and adds up the shadow would-be refusals of the
// table's seconds; it sorts by each; a row opened per instance gives each
// instance's; the rules say tiered and shadow.
func TestResourceTableAdaptiveTierShadow(t *testing.T) {
	const now = 1_800_000_000
	f, tel := memFleet(t, now)
	ctx := context.Background()
	doc := "flow:\n  - resource: ad\n    metric: concurrency\n    adaptive:\n      max: 50\n" +
		"  - resource: tier\n    threshold: 100\n    tiers:\n      - above: 100\n        threshold: 50\n      - above: 200\n        threshold: 20\n" +
		"  - resource: sh\n    threshold: 5\n    shadow: true\n"
	_, err := f.store.Save(ctx, "shop", 1, cluster.RuleVersion{Doc: []byte(doc), Author: "seed"})
	require.NoError(t, err)
	for k, id := range []string{"a", "b"} {
		for s := int64(now - 3); s < now; s++ {
			fr := cluster.Frame{App: "shop", Instance: id, Second: s}
			ad := cluster.ResourceSecond{Resource: "ad", Second: stat.Second{Pass: 9, AdaptiveLimit: 10 + int64(k)*2 + (s - now)}}
			tr := cluster.ResourceSecond{Resource: "tier", Second: stat.Second{Pass: 8}}
			if s == now-1 {
				tr.Tier = k + 1
			}
			sh := cluster.ResourceSecond{Resource: "sh", Second: stat.Second{Pass: 7, ShadowBlock: 1 + uint64(k)}}
			fr.Resources = append(fr.Resources, ad, tr, sh)
			require.NoError(t, tel.Publish(ctx, fr, 1000, time.Hour))
		}
	}
	viv := signIn(t, f.srv, "viv")
	rows := limitsTable(t, viv, url.Values{"sort": {"resource"}})
	require.Len(t, rows, 3)
	by := map[string]limitsRow{}
	for _, r := range rows {
		by[r.Resource] = r
	}
	// Newest frames (now-1): a 9, b 11.
	require.Equal(t, int64(20), by["ad"].Adaptive, "the newest limits added up")
	require.Equal(t, "concurrency adaptive", by["ad"].Rules[0].Summary)
	require.Equal(t, 2, by["tier"].Tier, "the highest tier of the newest frames")
	require.True(t, by["tier"].Rules[0].Tiered)
	require.Equal(t, "flow 100/s in 3 tiers", by["tier"].Rules[0].Summary)
	require.Equal(t, uint64(3*1+3*2), by["sh"].Shadow, "three seconds of two instances")
	require.Equal(t, "flow 5/s (shadow)", by["sh"].Rules[0].Summary)
	require.Zero(t, by["sh"].Adaptive)
	require.Zero(t, by["ad"].Shadow)
	for _, k := range []string{"adaptive", "tier", "shadow"} {
		rows := limitsTable(t, viv, url.Values{"sort": {k}, "desc": {"1"}, "limit": {"1"}})
		want := map[string]string{"adaptive": "ad", "tier": "tier", "shadow": "sh"}[k]
		require.Equal(t, want, rows[0].Resource, "sorted by %s", k)
	}

	for res, want := range map[string][2][3]int64{"ad": {{9, 0, 0}, {11, 0, 0}}, "tier": {{0, 1, 0}, {0, 2, 0}}, "sh": {{0, 0, 3}, {0, 0, 6}}} {
		code, body := viv.get("/api/apps/shop/resource?name=" + res)
		require.Equal(t, http.StatusOK, code)
		var d struct {
			Instances []struct {
				Instance string
				Adaptive int64
				Tier     int64
				Shadow   int64
			}
		}
		require.NoError(t, json.Unmarshal([]byte(body), &d))
		require.Len(t, d.Instances, 2)
		for i, in := range d.Instances {
			require.Equal(t, want[i], [3]int64{in.Adaptive, in.Tier, in.Shadow}, "%s on %s", res, in.Instance)
		}
	}
}

// TestLocalResourceTableAdaptiveTierShadow: a dashboard of its own engine
// shows what the engine's frames publish: its adaptive limit, its tiered
// rule's step and its shadow rule's would-be refusals.
func TestLocalResourceTableAdaptiveTierShadow(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	eng := sluice.New(sluice.WithClock(clk))
	defer eng.Close()
	require.NoError(t, eng.LoadRules(rules.Set{Flow: []rules.Flow{
		{Resource: "ad", Metric: rules.Concurrency, Adaptive: &rules.Adaptive{Min: 7, Max: 7}},
		{Resource: "sh", Threshold: 1, Shadow: true},
		{Resource: "tier", Threshold: 100, Tiers: []rules.Tier{{Above: 10, Threshold: 50}}},
	}}))
	// The dashboard's wall clock follows the engine's manual clock (frames
	// are dated on the wall clock of their publisher), a few seconds ahead
	// so that the frames' seconds, rounded, are never in its future.
	start := time.Now()
	d, err := dashboard.New(dashboard.Config{Engine: eng, App: "shop", RulesDir: t.TempDir(), Users: testUsers(t), Clock: clk,
		Now: func() time.Time { return start.Add(time.Duration(clk.Nanotime()) + 5*time.Second) }})
	require.NoError(t, err)
	srv := httptest.NewServer(d)
	defer func() {
		srv.Close()
		d.Close()
	}()
	nextFrame(t, clk, d) // the publisher's first frame; the traffic is in the next second
	p, err := eng.Entry("tier")
	require.NoError(t, err)
	clk.Advance(50 * time.Millisecond)
	p.Exit() // RT 50 ms > 10: the next period's entry moves to tier 1
	clk.Advance(100 * time.Millisecond)
	require.Equal(t, 1, admitted(eng, "tier", 1))
	require.Equal(t, 1, admitted(eng, "ad", 1))
	require.Equal(t, 4, admitted(eng, "sh", 4))
	clk.Advance(500 * time.Millisecond)
	nextFrame(t, clk, d)

	c := signIn(t, srv, "viv")
	rows := limitsTable(t, c, url.Values{"sort": {"resource"}})
	by := map[string]limitsRow{}
	for _, r := range rows {
		by[r.Resource] = r
	}
	require.Equal(t, int64(7), by["ad"].Adaptive, "%+v", rows)
	require.Equal(t, 1, by["tier"].Tier, "%+v", rows)
	require.Equal(t, uint64(3), by["sh"].Shadow, "%+v", rows)
}
