package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/dashboard"
)

// TestBrowserStoreLost: an instance of shop under load, its rules,
// frames and heartbeat on Redis, and a viewer's page open on it. Redis is
// killed: the page says the store is lost and since when, keeps the
// instance (no "No instance has reported"), and ages it to stale. Redis
// comes back (empty): the page says so, the instance is healthy again,
// and the seconds without frames are a gap in the chart.
func TestBrowserStoreLost(t *testing.T) {
	browserTest(t)
	ctx := newBrowser(t)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	rs := sluiceredis.NewRuleStore(rdb, sluiceredis.RuleStoreConfig{Prefix: "lost"})
	tel := sluiceredis.NewTelemetry(rdb, sluiceredis.TelemetryConfig{Prefix: "lost"})
	shared := sluiceredis.New(rdb, sluiceredis.WithPrefix("lost"))
	loadCtx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopLoad()
	startInstance(t, loadCtx, &wg, shared, rs, tel, "shop-1")

	d, err := dashboard.New(dashboard.Config{Rules: rs, Telemetry: tel, Members: shared, Apps: []string{"shop"}, Users: testUsers(t)})
	require.NoError(t, err)
	defer d.Close()
	web := httptest.NewServer(d)
	defer web.Close()

	browserLogin(t, ctx, web.URL, "viv")
	row := `tr[data-instance="shop-1"] td.health`
	var state struct {
		Status, StatusClass, Health, Instances, Gaps string
	}
	read := func() bool {
		return chromedp.Run(ctx, chromedp.Evaluate(`(() => { const s = document.getElementById("store-status");
			const h = document.querySelector(`+"`"+row+"`"+`);
			const c = document.querySelector('section.chart[data-resource="GET /api"]');
			return { status: s.hidden ? "" : s.textContent, statusClass: s.className, health: h ? h.textContent : "",
				instances: document.querySelector("#instances tbody").textContent, gaps: c ? (c.dataset.gaps || "") : "" }; })()`, &state)) == nil
	}
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(web.URL+"/apps/shop")))
	require.Eventually(t, func() bool {
		return read() && len(state.Health) > 7 && state.Health[:7] == "healthy" && state.Status == ""
	},
		15*time.Second, 100*time.Millisecond, "the instance is not shown healthy: %+v", &state)
	// A few seconds drawn before the store goes.
	require.Eventually(t, func() bool {
		var pts [][]int64
		var raw string
		return chromedp.Run(ctx, chromedp.AttributeValue(`section.chart[data-resource="GET /api"]`, "data-points", &raw, nil, chromedp.ByQuery)) == nil &&
			json.Unmarshal([]byte(raw), &pts) == nil && len(pts) >= 3
	}, 15*time.Second, 100*time.Millisecond, "no points drawn")

	// And the resource table read with it (it refreshes every 5 s).
	var kept int
	countRows := `document.querySelectorAll('#resources tr[data-resource="GET /api"]').length`
	require.Eventually(t, func() bool { return chromedp.Run(ctx, chromedp.Evaluate(countRows, &kept)) == nil && kept == 1 },
		15*time.Second, 100*time.Millisecond, "the resource table does not show GET /api")

	lostFrom := time.Now().Unix()
	srv.Kill()
	require.Eventually(t, func() bool { return read() && state.StatusClass == "error" },
		15*time.Second, 100*time.Millisecond, "no banner once the store is gone: %+v", &state)
	require.Contains(t, state.Status, "lost the store")
	require.Regexp(t, `since \d\d:\d\d:\d\d`, state.Status)
	require.Contains(t, state.Instances, "shop-1", "the instance read last is kept")
	require.NotContains(t, state.Instances, "No instance has reported")
	require.Eventually(t, func() bool { return read() && len(state.Health) > 5 && state.Health[:5] == "stale" },
		20*time.Second, 200*time.Millisecond, "the instance does not age: %+v", &state)
	require.Regexp(t, `^stale · \d+ s ago$`, state.Health)
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(countRows, &kept)))
	require.Equal(t, 1, kept, "the resource table keeps the rows read last")
	shotFull(t, ctx, "store-lost")

	srv.Restart()
	lostUntil := time.Now().Unix()
	require.Eventually(t, func() bool { return read() && state.StatusClass == "notice" },
		20*time.Second, 100*time.Millisecond, "recovery not shown: %+v", &state)
	require.Contains(t, state.Status, "read again")
	require.Eventually(t, func() bool { return read() && len(state.Health) > 7 && state.Health[:7] == "healthy" },
		20*time.Second, 100*time.Millisecond, "the instance is not healthy again: %+v", &state)
	require.Eventually(t, func() bool {
		var gaps [][2]int64
		if !read() || json.Unmarshal([]byte(state.Gaps), &gaps) != nil {
			return false
		}
		// The seconds the store was gone (a loaded host's instance may
		// miss a few others, drawn as gaps of their own).
		for _, g := range gaps {
			if g[1]-g[0] >= 5 && g[0] <= lostUntil && g[1] >= lostFrom {
				return true
			}
		}
		return false
	}, 20*time.Second, 100*time.Millisecond, "no gap drawn for the seconds without frames (%d to %d): %+v", lostFrom, lostUntil, &state)
	// A few seconds drawn after it, for the screenshot.
	require.Eventually(t, func() bool {
		var gaps, pts [][]int64
		var raw string
		return read() && json.Unmarshal([]byte(state.Gaps), &gaps) == nil && len(gaps) > 0 &&
			chromedp.Run(ctx, chromedp.AttributeValue(`section.chart[data-resource="GET /api"]`, "data-points", &raw, nil, chromedp.ByQuery)) == nil &&
			json.Unmarshal([]byte(raw), &pts) == nil && len(pts) > 0 && pts[len(pts)-1][0]-gaps[len(gaps)-1][1] >= 3
	}, 20*time.Second, 100*time.Millisecond, "no points after the gap")
	shotFull(t, ctx, "store-recovered")
}
