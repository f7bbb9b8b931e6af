package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestScreenshot takes docs/img/dashboard-overview.png from the demo after
// 40 seconds of load, when SLUICE_SCREENSHOTS=1 (and chromium and
// redis-server are installed).
func TestScreenshot(t *testing.T) {
	if os.Getenv("SLUICE_SCREENSHOTS") != "1" {
		t.Skip("SLUICE_SCREENSHOTS=1 takes the screenshot")
	}
	browser, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("no chromium on PATH")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("no redis-server on PATH")
	}
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), []string{"-listen", "127.0.0.1:0", "-duration", "70s"}, &out)
	}()
	defer func() { require.NoError(t, <-done) }()
	url := regexp.MustCompile(`http://127\.0\.0\.1:\d+/`)
	require.Eventually(t, func() bool { return url.MatchString(out.String()) }, 20*time.Second, 20*time.Millisecond)
	base := url.FindString(out.String())

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.Headless,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 1400))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 65*time.Second)
	defer cancelTimeout()
	var png []byte
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(base+"login"),
		chromedp.SendKeys("#name", "editor", chromedp.ByID),
		chromedp.SendKeys("#password", "editor-demo", chromedp.ByID),
		chromedp.Click("#login", chromedp.ByID),
		chromedp.WaitVisible("form.logout", chromedp.ByQuery),
		chromedp.Sleep(40*time.Second), // the charts fill up
		chromedp.Navigate(base+"apps/shop"),
		chromedp.WaitVisible(`section.chart[data-points]`, chromedp.ByQuery),
		chromedp.Sleep(2*time.Second),
		chromedp.CaptureScreenshot(&png),
	))
	require.NoError(t, os.WriteFile(filepath.Join("..", "..", "..", "docs", "img", "dashboard-overview.png"), png, 0o644))
}
