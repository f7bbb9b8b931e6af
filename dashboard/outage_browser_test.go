package dashboard_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/dashboard"
)

// slowDownStore is a rule store that, once down, fails every read the
// way a dead Redis does after its timeouts: the wall clock moves on by
// timeout during each failed read. It notes the clock when the first
// failed read reached it.
type slowDownStore struct {
	cluster.RuleStore
	clock   *wallClock
	timeout time.Duration

	mu        sync.Mutex
	down      bool
	firstFail time.Time
}

func (s *slowDownStore) fail() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.down {
		return nil
	}
	if s.firstFail.IsZero() {
		s.firstFail = s.clock.Now()
	}
	s.clock.Advance(s.timeout)
	return errors.New("dial tcp 127.0.0.1:6379: i/o timeout")
}

func (s *slowDownStore) Current(ctx context.Context, app string) (cluster.RuleVersion, error) {
	if err := s.fail(); err != nil {
		return cluster.RuleVersion{}, err
	}
	return s.RuleStore.Current(ctx, app)
}

func (s *slowDownStore) History(ctx context.Context, app string, limit int) ([]cluster.RuleVersion, error) {
	if err := s.fail(); err != nil {
		return nil, err
	}
	return s.RuleStore.History(ctx, app, limit)
}

func (s *slowDownStore) Reports(ctx context.Context, app string) ([]cluster.RuleReport, error) {
	if err := s.fail(); err != nil {
		return nil, err
	}
	return s.RuleStore.Reports(ctx, app)
}

// wallClock is a manual wall clock for Config.Now.
type wallClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *wallClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *wallClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestBrowserOutageDatedAtFirstFailedRead: the store goes down, and each
// read of it then takes 7 s to fail (on a manual wall clock, five hours
// ahead of the browser's, so that no other clock can give the time
// expected). The banner dates the loss when the first failed read began,
// not when its answer came (before: the browser's time of the answer,
// 7 s after Redis died as testers measured it), and says when the store
// was last read in full.
func TestBrowserOutageDatedAtFirstFailedRead(t *testing.T) {
	browserTest(t)
	ctx := newBrowser(t)
	wall := &wallClock{t: time.Now().Add(5 * time.Hour).Truncate(time.Second)}
	var store *slowDownStore
	f := newFleet(t, func(c *dashboard.Config) {
		c.Now = wall.Now
		store = &slowDownStore{RuleStore: c.Rules, clock: wall, timeout: 7 * time.Second}
		c.Rules = store
	})
	browserLogin(t, ctx, f.srv.URL, "viv")
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(f.srv.URL+"/apps/shop")))
	require.Eventually(t, func() bool {
		var s string
		return chromedp.Run(ctx, chromedp.AttributeValue("#updated", "data-now", &s, nil, chromedp.ByID)) == nil &&
			s == strconv.FormatInt(wall.Now().Unix(), 10)
	}, 15*time.Second, 100*time.Millisecond, "the page does not read the store")
	lastOK := wall.Now()
	wall.Advance(30 * time.Second) // reads begin at lastOK+30s from now on, until one fails

	store.mu.Lock()
	store.down = true
	store.mu.Unlock()
	var banner, class string
	// Text and class in one evaluation: read apart, the page may show the
	// banner between the two (class "error" beside the empty text before).
	read := func() bool {
		var got []string
		err := chromedp.Run(ctx, chromedp.Evaluate(
			`(() => { const e = document.getElementById("store-status"); return [e.textContent, e.className]; })()`, &got))
		if err != nil || len(got) != 2 {
			return false
		}
		banner, class = got[0], got[1]
		return true
	}
	require.Eventually(t, func() bool { return read() && class == "error" && store.firstFailSet() },
		15*time.Second, 100*time.Millisecond, "no banner: %q", &banner)
	hms := func(t time.Time) string { return t.UTC().Format("15:04:05") + " UTC" }
	first := store.first()
	t.Logf("banner: %s", banner)
	require.Contains(t, banner, "lost the store since "+hms(first)+" (",
		"dated at the first failed read (%s), not at its answer (%s) nor at the browser's clock", hms(first), hms(first.Add(7*time.Second)))
	require.Regexp(t, "Last read in full at ("+hms(lastOK)+"|"+hms(lastOK.Add(30*time.Second))+")", banner)
	// Later failed reads keep the date.
	require.Eventually(t, func() bool { return read() && class == "error" && wall.Now().Sub(first) >= 21*time.Second },
		20*time.Second, 100*time.Millisecond)
	require.Eventually(t, func() bool { return read() && banner != "" && !strings.Contains(banner, "(0 s)") },
		20*time.Second, 100*time.Millisecond, "the loss's age does not grow: %q", &banner)
	require.Contains(t, banner, "lost the store since "+hms(first)+" (")

	// Back: the notice dates the loss from the first failed read too.
	store.mu.Lock()
	store.down = false
	store.mu.Unlock()
	require.Eventually(t, func() bool { return read() && class == "notice" },
		15*time.Second, 100*time.Millisecond, "no recovery notice: %q", &banner)
	require.Contains(t, banner, "(from "+hms(first)+")")
}

func (s *slowDownStore) firstFailSet() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.firstFail.IsZero()
}

func (s *slowDownStore) first() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.firstFail
}
