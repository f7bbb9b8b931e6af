package dashboard_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/dashboard"
	sluicefleet "github.com/sluice-go/sluice/fleet"
	"github.com/sluice-go/sluice/stat"
)

// chromium returns the path of a Chromium or Chrome binary; without one the
// test is skipped, or fails under CI=true.
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	msg := "no chromium on PATH: install it (apt-get install chromium) to run the browser tests"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// maxBrowsers bounds the browser tests that run at once, each with its
// Chromium and the servers it starts. They spend most of their time
// waiting (on the page's timers, on the servers, on the browser), so a few
// share two cores; one after another they took most of make test's time.
const maxBrowsers = 4

var browserSlots = make(chan struct{}, maxBrowsers)

// browserTest runs t beside the other browser tests (t.Parallel), once
// one of the maxBrowsers slots is free; the slot is freed after t's
// cleanups (its browser killed, its servers stopped). go test's -parallel
// bounds them too: it is the number of cores unless set.
func browserTest(t *testing.T) {
	t.Helper()
	t.Parallel()
	browserSlots <- struct{}{}
	t.Cleanup(func() { <-browserSlots })
}

// newBrowser starts a headless Chromium owned by t: its process is killed
// and waited for at the end of the test.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	profile := t.TempDir()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.UserDataDir(profile),
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	// A bound for a browser that stops answering, not for a slow host: four
	// tests at a time beside three busy loops, TestBrowser took 97 s.
	ctx, cancelTimeout := context.WithTimeout(ctx, 5*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancel()
		cancelAlloc() // kills the browser and waits for it
		// Every process of this browser (they all name its profile) is gone.
		var left []int
		deadline := time.Now().Add(5 * time.Second)
		for {
			left = processesWith(profile)
			if len(left) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		for _, pid := range left {
			if p, err := os.FindProcess(pid); err == nil {
				p.Kill()
			}
		}
		if len(left) > 0 {
			t.Errorf("chromium processes %v outlived the test (killed now)", left)
		}
	})
	require.NoError(t, chromedp.Run(ctx)) // start it now
	if runtime.GOOS == "linux" {
		require.NotEmpty(t, processesWith(profile), "the browser's processes are found by their profile")
	}
	return ctx
}

// onNode runs action, which finds a node of the page and then acts on it,
// again when the page replaced the node in between (a table redrawn by its
// refresh: "Could not find node with given id"), up to 10 times. Such an
// error comes before the action reaches the page (a click is sent once its
// node's box is known), so nothing is done twice.
func onNode(ctx context.Context, action chromedp.Action) error {
	var err error
	for range 10 {
		err = chromedp.Run(ctx, action)
		if err == nil || !strings.Contains(err.Error(), "Could not find node with given id") &&
			!strings.Contains(err.Error(), "No node with given id found") {
			return err
		}
	}
	return err
}

// processesWith returns the processes whose command line contains s
// (Linux; none elsewhere).
func processesWith(s string) []int {
	dirs, _ := os.ReadDir("/proc")
	var out []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmd), s) {
			out = append(out, pid)
		}
	}
	return out
}

// shot writes a screenshot of the page to docs/img/dashboard-name.png when
// SLUICE_SCREENSHOTS=1.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if os.Getenv("SLUICE_SCREENSHOTS") != "1" {
		return
	}
	var png []byte
	require.NoError(t, chromedp.Run(ctx, chromedp.CaptureScreenshot(&png)))
	path := filepath.Join("..", "docs", "img", "dashboard-"+name+".png")
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, png, 0o644))
}

// shotFull is shot of the whole page, not only the window.
func shotFull(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if os.Getenv("SLUICE_SCREENSHOTS") != "1" {
		return
	}
	var png []byte
	require.NoError(t, chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)))
	require.NoError(t, os.WriteFile(filepath.Join("..", "docs", "img", "dashboard-"+name+".png"), png, 0o644))
}

func browserLogin(t *testing.T, ctx context.Context, base, name string) {
	t.Helper()
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"/login"),
		chromedp.WaitVisible("#name", chromedp.ByID),
		chromedp.SendKeys("#name", name, chromedp.ByID),
		chromedp.SendKeys("#password", password, chromedp.ByID),
		chromedp.Click("#login", chromedp.ByID),
		chromedp.WaitVisible("form.logout", chromedp.ByQuery),
	))
}

// postFromPage sends a form POST from the page with the page's CSRF token
// (what a user could do from the console) and returns the status.
func postFromPage(t *testing.T, ctx context.Context, path, body string) int {
	t.Helper()
	var status int
	js := fmt.Sprintf(`fetch(%q, {method: "POST", credentials: "same-origin",
		headers: {"Content-Type": "application/x-www-form-urlencoded"},
		body: "csrf=" + encodeURIComponent(document.body.dataset.csrf) + "&" + %q}).then(r => r.status)`, path, body)
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(js, &status, func(p *cdpruntime.EvaluateParams) *cdpruntime.EvaluateParams {
		return p.WithAwaitPromise(true)
	})))
	return status
}

// instanceLoad is an engine of shop following its rules on Redis and
// publishing its figures (fleet.Join), and beating as a member
// (sluice.WithCluster), under load: a request every
// 2 ms on "GET /api" until ctx ends.
type instanceLoad struct {
	eng *sluice.Engine
}

func startInstance(t *testing.T, ctx context.Context, wg *sync.WaitGroup, shared cluster.Store, rs cluster.RuleStore, tel cluster.Telemetry, id string) *instanceLoad {
	eng := sluice.New(sluice.WithCluster(shared, sluice.ClusterConfig{App: "shop", InstanceID: id}))
	t.Cleanup(func() { eng.Close() })
	m, err := sluicefleet.Join(eng, sluicefleet.Config{App: "shop", Rules: rs, CheckInterval: 500 * time.Millisecond, Telemetry: tel})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() }) // before the engine's: cleanups run last first
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if p, err := eng.Entry("GET /api"); err == nil {
					time.Sleep(time.Millisecond) // work: a response time, requests in flight
					p.Exit()
				}
			}
		}
	}()
	return &instanceLoad{eng: eng}
}

// threshold returns the threshold of the engine's flow rule on GET /api.
func (in *instanceLoad) threshold() float64 {
	for _, r := range in.eng.Rules().Flow {
		if r.Resource == "GET /api" {
			return r.Threshold
		}
	}
	return 0
}

// waitThreshold waits up to 2 s for every instance to run the threshold
// want, and then for a completed second in which each admitted at most
// want requests.
func waitThreshold(t *testing.T, ins []*instanceLoad, want float64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for _, in := range ins {
		for in.threshold() != want {
			require.True(t, time.Now().Before(deadline), "threshold %v not in force after 2 s (have %v)", want, in.threshold())
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, in := range ins {
		from := in.eng.Clock().Nanotime() // the rule is in force from here
		var sec stat.Second
		require.Eventually(t, func() bool {
			for _, s := range in.eng.History("GET /api", 3*time.Second) {
				if s.Start >= from {
					sec = s
					return true
				}
			}
			return false
		}, 10*time.Second, 50*time.Millisecond, "no completed second since threshold %v", want)
		require.LessOrEqual(t, sec.Pass, uint64(want), "admitted in a second under threshold %v", want)
	}
}

// TestBrowser drives a real Chromium through the dashboard of a fleet of
// two engines on a real Redis: a viewer sees rules and moving charts and
// cannot write; an editor sees an invalid threshold refused with the field
// named, saves a valid one that both instances apply, rolls back, and finds
// both changes in the audit log.
func TestBrowser(t *testing.T) {
	browserTest(t)
	ctx := newBrowser(t)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	rs := sluiceredis.NewRuleStore(rdb, sluiceredis.RuleStoreConfig{Prefix: "browser"})
	tel := sluiceredis.NewTelemetry(rdb, sluiceredis.TelemetryConfig{Prefix: "browser"})
	const v1 = "flow:\n  - resource: GET /api\n    threshold: 50\n" +
		"circuitBreaker:\n  - resource: GET /api\n    strategy: error-count\n    threshold: 1000\n    retryTimeout: 10s\n"
	_, err := rs.Save(context.Background(), "shop", 0, cluster.RuleVersion{Doc: []byte(v1), Author: "seed", Comment: "first rules"})
	require.NoError(t, err)

	loadCtx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopLoad()
	shared := sluiceredis.New(rdb, sluiceredis.WithPrefix("browser"))
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
	base := web.URL

	// The viewer.
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(base+"/login"), chromedp.WaitVisible("#name", chromedp.ByID)))
	shot(t, ctx, "login")
	browserLogin(t, ctx, base, "viv")
	var text string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"/apps/shop/rules"),
		chromedp.Text("main", &text, chromedp.ByQuery),
	))
	require.Contains(t, text, "GET /api")
	require.Contains(t, text, "threshold: 50", "rules as in a rule file")
	require.Contains(t, text, "retryTimeout: 10s")
	require.NotContains(t, text, "10000000000")
	var controls int
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(
		`document.querySelectorAll("#editor, textarea, button.delete, button.rollback, button.add").length`, &controls)))
	require.Equal(t, 0, controls, "a viewer sees no edit controls")
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(base+"/apps/shop/history")))
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll("button.rollback").length`, &controls)))
	require.Equal(t, 0, controls)
	// Direct POSTs, with the page's own CSRF token, are refused.
	require.Equal(t, 403, postFromPage(t, ctx, "/apps/shop/rules", "base=1&doc=flow%3A%20%5B%5D"))
	require.Equal(t, 403, postFromPage(t, ctx, "/apps/shop/rollback", "base=1&version=1"))
	require.Equal(t, 403, postFromPage(t, ctx, "/apps/shop/rules/delete", "base=1&kind=flow&index=0"))
	require.Equal(t, int64(1), version(t, rs, "shop"))

	// The charts move while the load runs.
	sel := `section.chart[data-resource="GET /api"][data-points]`
	var first, next string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"/apps/shop"),
		chromedp.WaitVisible(sel, chromedp.ByQuery),
		chromedp.WaitVisible(`//td[@class="state-closed"]`, chromedp.BySearch),
		chromedp.AttributeValue(sel, "data-points", &first, nil, chromedp.ByQuery),
	))
	require.Eventually(t, func() bool {
		if err := chromedp.Run(ctx, chromedp.AttributeValue(sel, "data-points", &next, nil, chromedp.ByQuery)); err != nil {
			return false
		}
		return next != first && next != "[]"
	}, 15*time.Second, 200*time.Millisecond, "the chart's points did not change: %s", first)
	// The card names the second by its time of day, and its legend names
	// every line of the requests/s plot: passed, blocked, and each block
	// type drawn (flow: the load is ten times the threshold).
	var card struct {
		Summary, Reasons string
		Keys             []string
	}
	cardJS := `(() => { const s = document.querySelector(` + "`" + sel + "`" + `);
		return { summary: s.querySelector("p.summary").textContent, reasons: s.dataset.reasons || "",
			keys: [...s.querySelectorAll("p.keys .k")].map((k) => k.dataset.line + "=" + k.textContent) }; })()`
	require.Eventually(t, func() bool {
		return chromedp.Run(ctx, chromedp.Evaluate(cardJS, &card)) == nil && strings.Contains(card.Reasons, "flow")
	}, 15*time.Second, 200*time.Millisecond, "no flow refusals drawn: %+v", card)
	require.Regexp(t, `^\d\d:\d\d:\d\d UTC: passed \d+, blocked \d+`, card.Summary)
	want := []string{"pass=passed", "block=blocked"}
	for _, r := range strings.Split(card.Reasons, ",") {
		want = append(want, r+"=blocked by "+r)
	}
	require.Equal(t, want, card.Keys)
	var updated string
	var what string
	require.Eventually(t, func() bool { // after a few updates asking for the busiest by name
		return chromedp.Run(ctx, chromedp.Text("#charts-what", &what, chromedp.ByID)) == nil && len(card.Keys) > 0
	}, 5*time.Second, 100*time.Millisecond)
	require.Equal(t, "The busiest resources, until you choose others in the table.", what)
	require.NoError(t, chromedp.Run(ctx, chromedp.Text("#updated", &updated, chromedp.ByID)))
	require.Regexp(t, `^Updated \d\d:\d\d:\d\d UTC\.$`, updated)
	require.NoError(t, chromedp.Run(ctx, chromedp.Text("#instances", &text, chromedp.ByID)))
	require.Contains(t, text, "shop-1")
	require.Contains(t, text, "shop-2")
	require.Contains(t, text, "version 1")
	require.Contains(t, text, "remote", "the cluster mode")
	var blanks int
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(
		`[...document.querySelectorAll("#instances td")].filter((td) => td.textContent.trim() === "" && td.cellIndex >= 5).length`, &blanks)))
	require.Zero(t, blanks, "no blank Load, CPU or Memory cell")
	var dashes int
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(
		`[...document.querySelectorAll("#instances td.unknown")].filter((td) => td.textContent === "\u2013" && td.title.startsWith("not measured yet")).length`, &dashes)))
	require.Equal(t, 6, dashes, "two instances without system rules: load, CPU and memory not measured")
	shot(t, ctx, "app")
	require.NoError(t, chromedp.Run(ctx, chromedp.Click("form.logout button", chromedp.ByQuery), chromedp.WaitVisible("#name", chromedp.ByID)))

	// The editor.
	browserLogin(t, ctx, base, "ed")
	bad := strings.Replace(v1, "threshold: 50", "threshold: -20", 1)
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"/apps/shop/rules"),
		chromedp.WaitVisible("#doc", chromedp.ByID),
		chromedp.SetValue("#doc", bad, chromedp.ByID),
		chromedp.Click("#save", chromedp.ByID),
		chromedp.WaitVisible("#fielderror", chromedp.ByID),
		chromedp.Text("#fielderror", &text, chromedp.ByID),
	))
	require.Contains(t, text, `flow rule 0 (resource "GET /api")`)
	require.Contains(t, text, "Field: threshold")
	shot(t, ctx, "rule-error")
	require.Equal(t, int64(1), version(t, rs, "shop"), "nothing written")

	good := strings.Replace(v1, "threshold: 50", "threshold: 20", 1)
	require.NotEqual(t, v1, good)
	require.NoError(t, chromedp.Run(ctx,
		chromedp.SetValue("#doc", good, chromedp.ByID),
		chromedp.SetValue("#comment", "halve the API", chromedp.ByID),
		chromedp.Click("#save", chromedp.ByID),
		chromedp.WaitVisible("#confirm", chromedp.ByID),
		chromedp.Text("#changes", &text, chromedp.ByID),
	))
	// What the save changes, before anything is written.
	require.Equal(t, "flow rule GET /api: threshold 50 → 20", strings.TrimSpace(text))
	require.Equal(t, int64(1), version(t, rs, "shop"), "nothing written before the confirmation")
	shot(t, ctx, "confirm")
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click("#confirm", chromedp.ByID),
		chromedp.WaitVisible(`//strong[@id="version"][text()="2"]`, chromedp.BySearch),
	))
	waitThreshold(t, ins, 20)
	// The notice, and the rollout followed until both instances run it.
	var notice string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Text(`div.notice[role="status"]`, &notice, chromedp.ByQuery),
		chromedp.WaitVisible(`#rollout[data-done="1"]`, chromedp.ByQuery),
		chromedp.Text("#rollout", &text, chromedp.ByID),
	))
	require.Equal(t, "Version 2 saved.", notice)
	require.Equal(t, "Version 2: 2/2 instances run it.", text)
	shot(t, ctx, "rollout")

	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"/apps/shop/history?v=2"),
		chromedp.WaitVisible(`button.rollback[data-version="1"]`, chromedp.ByQuery),
	))
	shot(t, ctx, "history")
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click(`button.rollback[data-version="1"]`, chromedp.ByQuery),
		chromedp.WaitVisible("#confirm", chromedp.ByID),
		chromedp.Text("#changes", &text, chromedp.ByID),
	))
	require.Equal(t, "flow rule GET /api: threshold 20 → 50", strings.TrimSpace(text))
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Click("#confirm", chromedp.ByID),
		chromedp.WaitVisible(`//strong[@id="version"][text()="3"]`, chromedp.BySearch),
	))
	waitThreshold(t, ins, 50)

	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"/apps/shop/audit"),
		chromedp.Text("#audit", &text, chromedp.ByID),
	))
	require.Contains(t, text, "rollback")
	// Each names the rule it changed (the line diff is one click away).
	require.Regexp(t, `ed\s+shop\s+save\s+2\s+flow rule GET /api: threshold 50 → 20\s+line diff`, text)
	require.Regexp(t, `ed\s+shop\s+rollback\s+3\s+flow rule GET /api: threshold 20 → 50\s+line diff`, text)
	shot(t, ctx, "audit")
}
