package dashboard_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/cluster"
	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/cluster/sqlstore"
	"github.com/sluice-go/sluice/cluster/sqlstore/sqltest"
	"github.com/sluice-go/sluice/dashboard"
)

// TestBrowserRuleChangeOnSQL: the dashboard with its rules in PostgreSQL,
// then in MariaDB (telemetry and heartbeats in Redis, as
// sluice-dashboard -rules runs it), two engines following the rules there:
// an editor changes a threshold in Chromium, confirms, both instances
// apply it, and the audit log, read from the database, names the change.
func TestBrowserRuleChangeOnSQL(t *testing.T) {
	t.Parallel() // each database's subtest takes a browser slot of its own
	for _, kind := range []string{sqltest.Postgres, sqltest.MariaDB} {
		t.Run(kind, func(t *testing.T) {
			browserTest(t)
			ctx := newBrowser(t)
			db := sqltest.Start(t, kind)
			rs, err := sqlstore.Open(context.Background(), db.URL(db.NewDatabase(t), "", ""), sqlstore.Config{})
			require.NoError(t, err)
			t.Cleanup(func() { rs.Close() })
			rdb := redistest.Start(t).Client(t)
			tel := sluiceredis.NewTelemetry(rdb, sluiceredis.TelemetryConfig{Prefix: "sql"})
			shared := sluiceredis.New(rdb, sluiceredis.WithPrefix("sql"))
			const v1 = "flow:\n  - resource: GET /api\n    threshold: 50\n"
			_, err = rs.Save(context.Background(), "shop", 0, cluster.RuleVersion{Doc: []byte(v1), Author: "seed"})
			require.NoError(t, err)

			loadCtx, stopLoad := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			defer wg.Wait()
			defer stopLoad()
			ins := []*instanceLoad{
				startInstance(t, loadCtx, &wg, shared, rs, tel, "shop-1"),
				startInstance(t, loadCtx, &wg, shared, rs, tel, "shop-2"),
			}
			waitThreshold(t, ins, 50)
			d, err := dashboard.New(dashboard.Config{Rules: rs, Telemetry: tel, Members: shared, Users: testUsers(t)})
			require.NoError(t, err)
			defer d.Close()
			web := httptest.NewServer(d)
			defer web.Close()

			browserLogin(t, ctx, web.URL, "ed")
			var text string
			require.NoError(t, chromedp.Run(ctx,
				chromedp.Navigate(web.URL+"/apps/shop/rules"),
				chromedp.WaitVisible("#doc", chromedp.ByID),
				chromedp.SetValue("#doc", strings.Replace(v1, "threshold: 50", "threshold: 20", 1), chromedp.ByID),
				chromedp.SetValue("#comment", "halve the API", chromedp.ByID),
				chromedp.Click("#save", chromedp.ByID),
				chromedp.WaitVisible("#confirm", chromedp.ByID),
				chromedp.Click("#confirm", chromedp.ByID),
				chromedp.WaitVisible(`//strong[@id="version"][text()="2"]`, chromedp.BySearch),
			))
			waitThreshold(t, ins, 20)
			require.NoError(t, chromedp.Run(ctx,
				chromedp.Navigate(web.URL+"/apps/shop/audit"),
				chromedp.Text("#audit", &text, chromedp.ByID),
			))
			require.Regexp(t, `ed\s+shop\s+save\s+2\s+flow rule GET /api: threshold 50 → 20`, text)
			cur, err := rs.Current(context.Background(), "shop")
			require.NoError(t, err)
			require.Equal(t, "ed", cur.Author)
			require.Equal(t, "halve the API", cur.Comment)
		})
	}
}
