package dashboard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/dashboard"
	"github.com/sluice-go/sluice/dashboard/internal/memstore"
	"github.com/sluice-go/sluice/stat"
)

// failingFrames is telemetry whose frames of one application cannot be
// read.
type failingFrames struct {
	cluster.Telemetry
	app string
}

func (f failingFrames) Frames(ctx context.Context, app string, since int64) ([]cluster.Frame, error) {
	if app == f.app {
		return nil, errors.New("connection refused")
	}
	return f.Telemetry.Frames(ctx, app, since)
}

// TestBrowserAppsHealth: the applications page shows each application's
// instances live among those known, whether its stores were read, and its
// requests passed and blocked per second over the last 5 complete seconds,
// from the frames the instances publish.
func TestBrowserAppsHealth(t *testing.T) {
	browserTest(t)
	ctx := newBrowser(t)
	bg := context.Background()
	tel := memstore.New(time.Now)
	now := time.Now().Unix()
	// Two instances, 10 passed and 2 blocked a second each, in every
	// second the page may count (it reads its own clock later: 28 s later
	// on a loaded host, so up to the browser's bound of 5 minutes).
	for _, id := range []string{"shop-1", "shop-2"} {
		for s := now - 10; s <= now+300; s++ {
			f := cluster.Frame{App: "shop", Instance: id, Second: s}
			f.Resources = []cluster.ResourceSecond{{Resource: "GET /api", Second: stat.Second{Pass: 7, Block: 2}}, {Resource: "GET /b", Second: stat.Second{Pass: 3}}}
			require.NoError(t, tel.Publish(bg, f, 400, time.Hour))
		}
	}
	f := newFleet(t, func(c *dashboard.Config) { c.Telemetry = failingFrames{Telemetry: tel, app: "billing"} })
	browserLogin(t, ctx, f.srv.URL, "ada")
	var cells map[string][]string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(f.srv.URL+"/"),
		chromedp.WaitVisible(`#apps tr[data-app="shop"]`, chromedp.ByQuery),
		chromedp.Evaluate(`Object.fromEntries([...document.querySelectorAll("#apps tbody tr[data-app]")].map((tr) =>
			[tr.dataset.app, ["instances", "stores", "traffic"].map((c) => tr.querySelector("td." + c).textContent)]))`, &cells),
	))
	require.Equal(t, []string{"2 of 2 live", "ok", "20/s passed, 4/s blocked"}, cells["shop"])
	require.Equal(t, []string{"no instance", "telemetry: connection refused", "0/s passed, 0/s blocked"}, cells["billing"])
}
