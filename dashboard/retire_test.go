package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/filestore"
	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
	"github.com/sluice-go/sluice/dashboard"
)

const xssApp = `<img src=x onerror=alert(1)>"'`

// TestFleetAppsListed: an admin sees the applications whose instances
// publish frames or heartbeats but have no rules, hostile names escaped;
// a viewer sees only what is granted to her.
func TestFleetAppsListed(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	members := sluiceredis.New(rdb, sluiceredis.WithPrefix("dash"))
	f := newFleet(t, func(cfg *dashboard.Config) {
		cfg.Telemetry = sluiceredis.NewTelemetry(rdb, sluiceredis.TelemetryConfig{Prefix: "dash"})
		cfg.Members = members
	})
	ctx := context.Background()
	now := time.Now().Unix()
	tel := sluiceredis.NewTelemetry(rdb, sluiceredis.TelemetryConfig{Prefix: "dash"})
	for _, app := range []string{"newapp", xssApp, "shop"} {
		require.NoError(t, tel.Publish(ctx, cluster.Frame{App: app, Instance: "i1", Second: now}, 5, time.Minute))
	}
	_, err := members.Beat(ctx, cluster.Member{ID: "m1", App: "beating"}, time.Minute)
	require.NoError(t, err)

	ada := signIn(t, f.srv, "ada")
	code, body := ada.get("/")
	require.Equal(t, http.StatusOK, code)
	for _, a := range []string{"newapp", "beating"} {
		require.Contains(t, body, `<a href="/apps/`+a+`">`+a+`</a></td><td>none: seen from the fleet`)
	}
	require.NotContains(t, body, "<img")
	require.Contains(t, body, "&lt;img src=x onerror=alert(1)&gt;&#34;&#39;")
	require.Contains(t, body, `href="/apps/%3Cimg%20src=x%20onerror=alert%281%29%3E%22%27"`)
	require.Equal(t, 1, strings.Count(body, ">shop</a>"), "shop has rules: listed once")
	require.Contains(t, body, `action="/apps/shop/retire"`)
	require.NotContains(t, body, `action="/apps/newapp/retire"`, "nothing to retire without rules")

	viv := signIn(t, f.srv, "viv")
	_, body = viv.get("/")
	require.NotContains(t, body, "newapp")
	require.NotContains(t, body, "/retire")
}

// TestRetire: an admin retires an application: refused without the
// confirmation and while an instance reports, unless forced; then its
// rules are gone, the retirement is in the audit log and the page says so;
// another application is untouched.
func TestRetire(t *testing.T) {
	f := newFleet(t, withRedisTelemetry(t))
	ctx := context.Background()
	require.NoError(t, f.tel.Publish(ctx, cluster.Frame{App: "shop", Instance: "shop-1", Second: time.Now().Unix()}, 5, time.Minute))
	ada := signIn(t, f.srv, "ada")
	code, body := ada.post("/apps/shop/retire", nil)
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, "confirm the retirement")
	code, body = ada.post("/apps/shop/retire", url.Values{"confirm": {"yes"}})
	require.Equal(t, http.StatusConflict, code, body)
	require.Contains(t, body, "shop-1")
	require.Equal(t, int64(1), version(t, f.store, "shop"))

	code, _ = ada.post("/apps/shop/retire", url.Values{"confirm": {"yes"}, "force": {"yes"}})
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, int64(0), version(t, f.store, "shop"))
	require.Equal(t, int64(1), version(t, f.store, "billing"))
	apps, err := f.store.Apps(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"billing"}, apps)
	code, body = ada.get("/?retired=shop")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "Application shop retired.")
	require.Contains(t, body, "none: seen from the fleet", "its instance still publishes frames")
	log, err := f.store.AuditLog(ctx, "", 10)
	require.NoError(t, err)
	require.Equal(t, "retire", log[0].Action)
	require.Equal(t, "ada", log[0].User)
	require.Equal(t, "shop", log[0].App)
	require.Contains(t, log[0].Detail, "version 1 was in force")
}

// TestRetireFileStore: the file store retires an application too: its
// directory is gone; a store that cannot retire answers 501.
func TestRetireFileStore(t *testing.T) {
	dir := t.TempDir()
	fs, err := filestore.Open(dir, filestore.Config{})
	require.NoError(t, err)
	_, err = fs.Save(context.Background(), "shop", 0, cluster.RuleVersion{Doc: []byte(shopRules), Author: "seed"})
	require.NoError(t, err)
	f := newFleet(t, func(cfg *dashboard.Config) { cfg.Rules = fs })
	ada := signIn(t, f.srv, "ada")
	code, body := ada.post("/apps/shop/retire", url.Values{"confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, code, body)
	_, err = os.Stat(filepath.Join(dir, "shop"))
	require.ErrorIs(t, err, os.ErrNotExist)

	g := newFleet(t, func(cfg *dashboard.Config) { cfg.Rules = plainStore{cfg.Rules} })
	ada = signIn(t, g.srv, "ada")
	code, body = ada.post("/apps/shop/retire", url.Values{"confirm": {"yes"}})
	require.Equal(t, http.StatusNotImplemented, code, body)
	require.Equal(t, int64(1), version(t, g.store, "shop"))
}

// plainStore hides every method of its store but cluster.RuleStore's.
type plainStore struct{ cluster.RuleStore }
