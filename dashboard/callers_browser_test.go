package dashboard_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/dashboard"
	"github.com/sluice-go/sluice/dashboard/internal/memstore"
	sluicefleet "github.com/sluice-go/sluice/fleet"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
	"github.com/sluice-go/sluice/stat"
)

// TestBrowserTopRefusedCallers: an engine refuses callers an authority
// rule denies, hostile names among them, and publishes its frames; a
// forged frame of another instance names a caller of 1 KiB. A viewer
// opens the resource per instance and reads the most refused callers,
// names as text (no payload runs), the long one cut and marked. A caller
// no entry may carry (1 KiB) is refused by the engine and never shown.
func TestBrowserTopRefusedCallers(t *testing.T) {
	browserTest(t)
	ctx := newBrowser(t)
	bg := context.Background()
	rs, _ := sluicetest.NewRuleStore(nil)
	tel := memstore.New(time.Now)
	eng := sluice.New()
	defer eng.Close()
	hostile := []string{`<img src=x onerror="window.__xss=1">`, `<script>window.__xss=2</script>`}
	require.NoError(t, eng.LoadRules(rules.Set{Authority: []rules.Authority{{Resource: "GET /pay", Deny: hostile}}}))
	m, err := sluicefleet.Join(eng, sluicefleet.Config{App: "shop", Instance: "shop-1", Telemetry: tel})
	require.NoError(t, err)
	defer m.Close()
	long := strings.Repeat("z", 1024)
	_, err = eng.Entry("GET /pay", sluice.WithCaller(long))
	require.True(t, errors.Is(err, sluice.ErrBadCaller), "%v", err)
	refuse := func() {
		for i, c := range hostile {
			for n := 0; n <= i; n++ { // the second twice as often
				_, err := eng.Entry("GET /pay", sluice.WithCaller(c))
				require.Error(t, err)
			}
		}
	}
	// Refusals until a published frame names them.
	require.Eventually(t, func() bool {
		refuse()
		fs, _ := tel.Frames(bg, "shop", 0)
		for _, f := range fs {
			for _, r := range f.Resources {
				if len(r.Callers) == 2 {
					return true
				}
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, tel.Publish(bg, cluster.Frame{App: "shop", Instance: "forged", Second: time.Now().Unix() - 1,
		Resources: []cluster.ResourceSecond{{Resource: "GET /pay", Second: stat.Second{Block: 1}, Callers: map[string]uint64{long + "<b>": 1}}}},
		10, time.Hour))

	d, err := dashboard.New(dashboard.Config{Rules: rs, Telemetry: tel, Users: testUsers(t)})
	require.NoError(t, err)
	defer d.Close()
	web := httptest.NewServer(d)
	defer web.Close()
	browserLogin(t, ctx, web.URL, "viv")
	row := `#resources tr[data-resource="GET /pay"]`
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(web.URL+"/apps/shop"),
		chromedp.WaitVisible(row, chromedp.ByQuery),
	))
	require.NoError(t, onNode(ctx, chromedp.Click(row+` button.per-instance-toggle`, chromedp.ByQuery)))
	require.NoError(t, chromedp.Run(ctx, chromedp.WaitVisible(`tr.instances-of div.refused-callers`, chromedp.ByQuery)))
	var shown struct {
		Heading string
		Names   []string
		Counts  []string
		Cut     []bool
		XSS     bool
	}
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`(() => {
		const box = document.querySelector("tr.instances-of div.refused-callers");
		const cells = [...box.querySelectorAll("table.callers td.caller")];
		return { heading: box.querySelector("h4").textContent, names: cells.map((c) => c.textContent),
			counts: [...box.querySelectorAll("table.callers td.num")].map((c) => c.textContent),
			cut: cells.map((c) => c.classList.contains("cut")), xss: window.__xss !== undefined };
	})()`, &shown)))
	require.Equal(t, "Top refused callers, last 60 s", shown.Heading)
	require.Len(t, shown.Names, 3, "%+v", shown)
	require.Equal(t, hostile[1], shown.Names[0], "the most refused first, as text")
	require.Equal(t, hostile[0], shown.Names[1])
	require.Equal(t, strings.Repeat("z", 256), shown.Names[2], "the forged name cut to 256 bytes")
	require.Equal(t, []bool{false, false, true}, shown.Cut)
	require.Equal(t, "1", shown.Counts[2])
	require.False(t, shown.XSS, "no payload ran")
	var imgs int
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll("div.refused-callers img, div.refused-callers script").length`, &imgs)))
	require.Zero(t, imgs)
}
