package dashboard_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/dashboard"
	"github.com/sluice-go/sluice/dashboard/internal/memstore"
	"github.com/sluice-go/sluice/sluicetest"
	"github.com/sluice-go/sluice/stat"
)

// TestBrowserChartHistory: a chart draws a rule's limit as it was at each
// second (100/s until version 2 was saved, 20/s since), not the limit in
// force now over the whole window; with ?chart= naming a resource, only
// its chart is on the page (the busiest resources' charts are not left
// empty); the time axis names its times in UTC, for a viewer in
// Kathmandu (UTC+5:45) too.
func TestBrowserChartHistory(t *testing.T) {
	browserTest(t)
	ctx := newBrowser(t)
	bg := context.Background()
	now := time.Now().Unix()
	v1At, v2At := now-200, now-60
	clock := sluicetest.NewManualClock(v1At * 1e9)
	rs, _ := sluicetest.NewRuleStore(clock)
	_, err := rs.Save(bg, "shop", 0, cluster.RuleVersion{Doc: []byte("flow:\n  - resource: GET /api\n    threshold: 100\n"), Author: "seed"})
	require.NoError(t, err)
	clock.Set(v2At * 1e9)
	_, err = rs.Save(bg, "shop", 1, cluster.RuleVersion{Doc: []byte("flow:\n  - resource: GET /api\n    threshold: 20\n"), Author: "ed"})
	require.NoError(t, err)
	tel := memstore.New(time.Now)
	for s := now - 150; s <= now+60; s++ {
		f := cluster.Frame{App: "shop", Instance: "shop-1", Second: s, RuleVersion: 2}
		f.Resources = []cluster.ResourceSecond{{Resource: "GET /api", Second: stat.Second{Pass: 40}}}
		for i := range 4 {
			f.Resources = append(f.Resources, cluster.ResourceSecond{Resource: fmt.Sprint("busy-", i), Second: stat.Second{Pass: 100}})
		}
		require.NoError(t, tel.Publish(bg, f, 1000, time.Hour))
	}
	d, err := dashboard.New(dashboard.Config{Rules: rs, Telemetry: tel, Users: testUsers(t)})
	require.NoError(t, err)
	defer d.Close()
	web := httptest.NewServer(d)
	defer web.Close()
	require.NoError(t, chromedp.Run(ctx, emulation.SetTimezoneOverride("Asia/Kathmandu")))
	browserLogin(t, ctx, web.URL, "viv")

	var steps [][]any
	var sections [][]any
	var ticks []string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(web.URL+"/apps/shop?chart="+url.QueryEscape("GET /api")),
		chromedp.Poll(`(() => { const s = document.querySelector('#charts section.chart[data-ready]'); return s && s.dataset.points; })()`, nil),
		chromedp.Evaluate(`[...document.querySelectorAll("#charts section.chart")].map((s) => [s.dataset.resource, s.dataset.ready === "1"])`, &sections),
	))
	require.Equal(t, [][]any{{"GET /api", true}}, sections, "only the chosen resource's chart, drawn")
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Evaluate(`JSON.parse(document.querySelector('#charts section.chart[data-ready]').dataset.limitSteps || "[]")`, &steps),
		chromedp.Evaluate(`JSON.parse(document.querySelector('#charts section.chart[data-ready] canvas.plot-requests').dataset.ticks || "[]")`, &ticks),
	))

	// One limit, a step line: 100/s from version 1 to version 2, then 20/s.
	require.Len(t, steps, 1)
	require.Equal(t, "flow 20/s", steps[0][0])
	segs := steps[0][1].([]any)
	require.Len(t, segs, 2)
	first, second := segs[0].([]any), segs[1].([]any)
	require.Equal(t, []any{float64(v1At), float64(v2At), float64(100)}, first)
	require.Equal(t, float64(v2At), second[0])
	require.Equal(t, float64(20), second[2])
	require.GreaterOrEqual(t, second[1].(float64), float64(now))

	// The time axis: round times of the window, in UTC.
	require.NotEmpty(t, ticks)
	utc := map[string]bool{}
	for s := now - 320; s <= now+120; s++ {
		tm := time.Unix(s, 0).UTC()
		utc[tm.Format("15:04:05")] = true
		if tm.Second() == 0 {
			utc[tm.Format("15:04")] = true
		}
	}
	for _, l := range ticks {
		require.True(t, utc[l], "tick %q is a time of the window in UTC (ticks %q)", l, ticks)
	}
}
