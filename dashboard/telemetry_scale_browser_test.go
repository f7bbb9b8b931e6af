package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/cluster"
	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/dashboard"
	"github.com/sluice-go/sluice/stat"
)

// TestBrowserResourceTable10x10k: 10 instances publish 20 seconds of
// frames of 10,000 resources each through a real Redis (MaxResources
// 10,000, what the guide advises to see every resource), and the
// dashboard reads it through a client with its command's timeouts (2 s).
// The store keeps, per instance, its newest frame whole and the seconds
// before with their 50 busiest resources: the listed seconds take less
// room than the one whole frame (before: 20 whole frames an instance,
// 157 MB in Redis for the 10, and the read of the frames timed out). The resource table has
// every resource, with no error: the busiest added up over the seconds,
// the others from the newest second (marked so); the app page's poll
// has no error; in Chromium the table loads its 10,000 rows.
func TestBrowserResourceTable10x10k(t *testing.T) {
	browserTest(t)
	const instances, seconds, resources = 10, 20, 10000
	chromium(t)
	srv := redistest.Start(t)
	pub := srv.Client(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: time.Second, ReadTimeout: 2 * time.Second,
		WriteTimeout: 2 * time.Second, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })

	// What the instances publish: resource r passes r requests a second.
	now := time.Now().Unix()
	ptel := sluiceredis.NewTelemetry(pub, sluiceredis.TelemetryConfig{Prefix: "scale", MaxResources: resources})
	bg := context.Background()
	names := make([]string, resources)
	for r := range names {
		names[r] = fmt.Sprintf("GET /r%d", r)
	}
	// Each instance publishes its seconds in order, beside the others (as
	// a fleet does; one after another this took most of the test's time).
	errs := make([]error, instances)
	var wg sync.WaitGroup
	for i := range instances {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := int64(seconds - 1); s >= 0 && errs[i] == nil; s-- {
				f := cluster.Frame{App: "shop", Instance: fmt.Sprintf("shop-%d", i), Second: now - s, RuleVersion: 1,
					Resources: make([]cluster.ResourceSecond, resources)}
				for r := range f.Resources {
					f.Resources[r] = cluster.ResourceSecond{Resource: names[r], Concurrency: 1,
						Second: stat.Second{Pass: uint64(r), Complete: uint64(r), AvgRT: time.Millisecond}}
				}
				errs[i] = ptel.Publish(bg, f, 300, time.Hour)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "instance %d", i)
	}
	var total int64
	for i := 0; i < instances; i++ {
		list := pub.MemoryUsage(bg, fmt.Sprintf("scale:tm:{shop}:f:shop-%d", i)).Val()
		whole := pub.MemoryUsage(bg, fmt.Sprintf("scale:tm:{shop}:l:shop-%d", i)).Val()
		total += list + whole
		if i == 0 {
			t.Logf("instance 0: %d seconds kept %d bytes, its newest frame whole %d bytes", seconds, list, whole)
		}
		require.LessOrEqual(t, list, whole, "instance %d: %d seconds listed take %d bytes, more than its whole newest frame (%d)", i, seconds, list, whole)
	}
	t.Logf("telemetry in Redis: %.1f MB for %d instances x %d seconds x %d resources", float64(total)/1e6, instances, seconds, resources)

	tel := sluiceredis.NewTelemetry(rdb, sluiceredis.TelemetryConfig{Prefix: "scale"})
	start := time.Now()
	latest, err := tel.Latest(bg, "shop")
	require.NoError(t, err)
	require.Len(t, latest, instances)
	t.Logf("Latest: %v", time.Since(start))
	start = time.Now()
	listed, err := tel.Frames(bg, "shop", now-60)
	require.NoError(t, err)
	t.Logf("Frames over 60 s: %d frames in %v", len(listed), time.Since(start))

	d, err := dashboard.New(dashboard.Config{Rules: sluiceredis.NewRuleStore(rdb, sluiceredis.RuleStoreConfig{Prefix: "scale"}),
		Telemetry: tel, Apps: []string{"shop"}, Users: testUsers(t),
		// The dashboard's clock stays at the newest second published, however
		// long publishing took on a busy host.
		Now: func() time.Time { return time.Unix(now, 0) }})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	web := httptest.NewServer(d)
	t.Cleanup(web.Close)

	viv := signIn(t, web, "viv")
	viv.hc.Timeout = 2 * time.Minute // the host may be busy (-race): the store's 2 s bound the reads of Redis
	type row struct {
		Resource string
		Pass     uint64
		Newest   bool
	}
	var page struct {
		All, Total int
		Rows       []row
		Errors     []string
	}
	read := func(q string) {
		t.Helper()
		start := time.Now()
		code, body := viv.get("/api/apps/shop/resources?" + q)
		t.Logf("resource table ?%s: %v", q, time.Since(start))
		require.Equal(t, 200, code)
		page.Rows, page.Errors = nil, nil
		require.NoError(t, json.Unmarshal([]byte(body), &page))
		require.Empty(t, page.Errors)
	}
	read("sort=pass&desc=1")
	require.Equal(t, resources, page.All)
	require.Equal(t, row{Resource: "GET /r9999", Pass: instances * seconds * 9999}, page.Rows[0], "the busiest: every second of every instance")
	read("q=GET+/r5000")
	require.Equal(t, []row{{Resource: "GET /r5000", Pass: instances * 5000, Newest: true}}, page.Rows, "the others: the newest second of every instance")
	// Per instance: the newest second of each.
	code, body := viv.get("/api/apps/shop/resource?name=" + url.QueryEscape("GET /r5000"))
	require.Equal(t, 200, code)
	var detail struct {
		Instances []struct {
			Instance string
			Pass     uint64
			Newest   bool
		}
		Errors []string
	}
	require.NoError(t, json.Unmarshal([]byte(body), &detail))
	require.Empty(t, detail.Errors)
	require.Len(t, detail.Instances, instances)
	for _, in := range detail.Instances {
		require.Equal(t, uint64(5000), in.Pass, in.Instance)
		require.True(t, in.Newest, in.Instance)
	}
	start = time.Now()
	code, body = viv.get("/api/apps/shop/live")
	t.Logf("live: %v", time.Since(start))
	require.Equal(t, 200, code)
	require.NotContains(t, body, `"errors"`)

	ctx := newBrowser(t)
	browserLogin(t, ctx, web.URL, "viv")
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(web.URL+"/apps/shop")))
	var count string
	var rows int
	require.Eventually(t, func() bool {
		return chromedp.Run(ctx, chromedp.Text("#res-count", &count, chromedp.ByID),
			chromedp.Evaluate(`document.querySelectorAll("#resources tr[data-resource]").length`, &rows)) == nil &&
			strings.Contains(count, "of 10000")
	}, time.Minute, 200*time.Millisecond, "the resource table does not load: %q", &count)
	require.Equal(t, 50, rows)
	require.NotContains(t, count, "Not updated")
	// A resource outside the busiest is marked: its newest second only.
	var marked bool
	require.NoError(t, chromedp.Run(ctx, chromedp.SendKeys("#res-q", "GET /r5000", chromedp.ByID)))
	require.Eventually(t, func() bool {
		return chromedp.Run(ctx, chromedp.Evaluate(`(() => { const r = document.querySelectorAll("#resources tr[data-resource]");
			return r.length === 1 && r[0].dataset.resource === "GET /r5000" && r[0].classList.contains("newest"); })()`, &marked)) == nil && marked
	}, time.Minute, 200*time.Millisecond, "the newest-second row is not marked")
	shotFull(t, ctx, "resources-10x10k")
}

// slowTable is a telemetry store whose reads for the resource table (the
// table's 60 seconds) take delay, as a big fleet's did on Redis.
type slowTable struct {
	cluster.Telemetry
	table int64 // the first second the table reads
	delay time.Duration
}

func (s *slowTable) Frames(ctx context.Context, app string, since int64) ([]cluster.Frame, error) {
	if since == s.table {
		t := time.NewTimer(s.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Telemetry.Frames(ctx, app, since)
}

// TestBrowserResourceTableSlowerThanRefresh: the table's read takes 6 s,
// longer than the page's 5 s refresh. The page waits for the answer
// before it asks again, and shows it (before: each refresh sent a new
// request, the answer of the one before was dropped for it, and the
// table never loaded).
func TestBrowserResourceTableSlowerThanRefresh(t *testing.T) {
	browserTest(t)
	now := time.Now().Unix()
	f := newFleet(t, func(c *dashboard.Config) {
		c.Now = func() time.Time { return time.Unix(now, 0) }
		c.Telemetry = &slowTable{Telemetry: c.Telemetry, table: now - 60, delay: 6 * time.Second}
	})
	fr := cluster.Frame{App: "shop", Instance: "shop-1", Second: now, RuleVersion: 1,
		Resources: []cluster.ResourceSecond{{Resource: "GET /slow", Second: stat.Second{Pass: 7}}}}
	require.NoError(t, f.tel.Publish(context.Background(), fr, 300, time.Hour))
	ctx := newBrowser(t)
	browserLogin(t, ctx, f.srv.URL, "viv")
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(f.srv.URL+"/apps/shop")))
	var rows int
	require.Eventually(t, func() bool {
		return chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll('#resources tr[data-resource="GET /slow"]').length`, &rows)) == nil && rows == 1
	}, 40*time.Second, 200*time.Millisecond, "the table never loads when its read is slower than the refresh")
}
