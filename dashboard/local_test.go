package dashboard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/filestore"
	"github.com/sluice-go/sluice/dashboard"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

// nextFrame ends the engine's current second on clk and waits until the
// engine has published its frame to the dashboard d.
func nextFrame(t *testing.T, clk *sluicetest.ManualClock, d *dashboard.Dashboard) {
	t.Helper()
	st, _ := d.Telemetry()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, clk.BlockUntil(ctx, 1), "the publisher's timer")
	clk.Advance(time.Second)
	require.Eventually(t, func() bool {
		now, ok := d.Telemetry()
		return ok && now.Published+now.PublishFailures > st.Published+st.PublishFailures
	}, 10*time.Second, time.Millisecond, "no frame published")
	now, _ := d.Telemetry()
	require.NoError(t, now.PublishErr)
}

// admitted counts the entries of n calls on res that the engine admits.
func admitted(eng *sluice.Engine, res string, n int) int {
	in := 0
	for i := 0; i < n; i++ {
		if p, err := eng.Entry(res); err == nil {
			in++
			p.Exit()
		}
	}
	return in
}

// localDash serves a dashboard of eng keeping its rules in dir.
func localDash(t *testing.T, eng *sluice.Engine, clk sluice.Clock, dir string) (*dashboard.Dashboard, *httptest.Server) {
	t.Helper()
	d, err := dashboard.New(dashboard.Config{Engine: eng, App: "shop", RulesDir: dir, Users: testUsers(t), Clock: clk})
	require.NoError(t, err)
	srv := httptest.NewServer(d)
	t.Cleanup(func() {
		srv.Close()
		d.Close()
	})
	return d, srv
}

// TestLocalRulesSurviveRestart: the rules saved through the dashboard of
// an engine come back into a new engine after a restart, from the rules
// directory; the engine's own rules seed the directory only the first
// time.
func TestLocalRulesSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	clk := sluicetest.NewManualClock(0)
	eng := sluice.New(sluice.WithClock(clk))
	err := eng.UpdateRules(func(s *rules.Set) { s.Flow = []rules.Flow{{Resource: "r", Threshold: 10}} })
	require.NoError(t, err)
	d, srv := localDash(t, eng, clk, dir)
	ed := signIn(t, srv, "ed")
	_, body := ed.get("/apps/shop/rules")
	require.Contains(t, body, "threshold: 10", "version 1 is the engine's rules")
	code, _ := ed.post("/apps/shop/rules", url.Values{"base": {"1"}, "doc": {"flow:\n  - resource: r\n    threshold: 2\n"}})
	require.Equal(t, http.StatusSeeOther, code)
	srv.Close()
	require.NoError(t, d.Close())
	require.NoError(t, eng.Close())

	// The restart: a new engine made with other rules.
	clk = sluicetest.NewManualClock(0)
	eng = sluice.New(sluice.WithClock(clk))
	defer eng.Close()
	err = eng.UpdateRules(func(s *rules.Set) { s.Flow = []rules.Flow{{Resource: "r", Threshold: 10}} })
	require.NoError(t, err)
	_, srv = localDash(t, eng, clk, dir)
	require.Equal(t, []rules.Flow{{Resource: "r", Threshold: 2}}, eng.Rules().Flow, "the version saved before the restart")
	require.Equal(t, 2, admitted(eng, "r", 5))
	rs, err := filestore.Open(dir, filestore.Config{})
	require.NoError(t, err)
	require.Equal(t, int64(2), version(t, rs, "shop"), "nothing seeded over it")
	hist, err := rs.History(context.Background(), "shop", 10)
	require.NoError(t, err)
	require.Len(t, hist, 2)
	require.Equal(t, "ed", hist[0].Author)
	require.Equal(t, "engine", hist[1].Author)
	viv := signIn(t, srv, "viv")
	_, js := viv.get("/api/apps/shop/live")
	require.Contains(t, js, `{"id":"`+eng.InstanceID()+`","version":2,`)
}

// TestLocalEngineRefusesSave: a document the engine refuses (a cluster
// rule, and the engine has no cluster store) is not written, the page
// says why, and the engine keeps its rules.
func TestLocalEngineRefusesSave(t *testing.T) {
	dir := t.TempDir()
	clk := sluicetest.NewManualClock(0)
	eng := sluice.New(sluice.WithClock(clk))
	defer eng.Close()
	err := eng.UpdateRules(func(s *rules.Set) { s.Flow = []rules.Flow{{Resource: "r", Threshold: 3}} })
	require.NoError(t, err)
	_, srv := localDash(t, eng, clk, dir)
	ed := signIn(t, srv, "ed")
	code, body := ed.post("/apps/shop/rules", url.Values{"base": {"1"}, "doc": {"flow:\n  - resource: r\n    threshold: 9\n    cluster: {}\n"}})
	require.Equal(t, http.StatusUnprocessableEntity, code)
	require.Contains(t, body, "sluice.WithCluster")
	require.Contains(t, body, "cluster: {}", "the user's text is kept")
	rs, err := filestore.Open(dir, filestore.Config{})
	require.NoError(t, err)
	require.Equal(t, int64(1), version(t, rs, "shop"), "a refused document is not written")
	require.Equal(t, []rules.Flow{{Resource: "r", Threshold: 3}}, eng.Rules().Flow)
	require.Equal(t, 3, admitted(eng, "r", 5))
}

// TestLocalStoreFailsAfterLoad: when the rules directory cannot take a
// version the engine loaded, the engine goes back to the rules it ran.
func TestLocalStoreFailsAfterLoad(t *testing.T) {
	dir := t.TempDir()
	clk := sluicetest.NewManualClock(0)
	eng := sluice.New(sluice.WithClock(clk))
	defer eng.Close()
	err := eng.UpdateRules(func(s *rules.Set) { s.Flow = []rules.Flow{{Resource: "r", Threshold: 3}} })
	require.NoError(t, err)
	_, srv := localDash(t, eng, clk, dir)
	// A broken directory: the versions' folder is a file.
	versions := filepath.Join(dir, "shop", "versions")
	require.NoError(t, os.RemoveAll(versions))
	require.NoError(t, os.WriteFile(versions, []byte("x"), 0o644))
	ed := signIn(t, srv, "ed")
	code, body := ed.post("/apps/shop/rules", url.Values{"base": {"1"}, "doc": {"flow:\n  - resource: r\n    threshold: 9\n"}})
	require.Equal(t, http.StatusBadGateway, code)
	require.Contains(t, body, "the rule store: filestore: ")
	require.Equal(t, []rules.Flow{{Resource: "r", Threshold: 3}}, eng.Rules().Flow, "the engine runs the rules in force again")
	require.Equal(t, 3, admitted(eng, "r", 5))
}

// TestLocalRefusedAtStart: a version in force the engine refuses at New
// leaves the engine's rules as they were, shows on the application's page
// and in the audit log, until a version it takes is saved.
func TestLocalRefusedAtStart(t *testing.T) {
	dir := t.TempDir()
	rs, err := filestore.Open(dir, filestore.Config{})
	require.NoError(t, err)
	_, err = rs.Save(context.Background(), "shop", 0, cluster.RuleVersion{Author: "ops",
		Doc: []byte("flow:\n  - resource: r\n    threshold: 9\n    cluster: {}\n")})
	require.NoError(t, err)
	clk := sluicetest.NewManualClock(0)
	eng := sluice.New(sluice.WithClock(clk))
	defer eng.Close()
	err = eng.UpdateRules(func(s *rules.Set) { s.Flow = []rules.Flow{{Resource: "r", Threshold: 3}} })
	require.NoError(t, err)
	_, srv := localDash(t, eng, clk, dir)
	require.Equal(t, []rules.Flow{{Resource: "r", Threshold: 3}}, eng.Rules().Flow, "kept")
	ada := signIn(t, srv, "ada")
	_, body := ada.get("/apps/shop")
	require.Contains(t, body, "refused version 1: ")
	require.Contains(t, body, "sluice.WithCluster")
	_, body = ada.get("/apps/shop/audit")
	require.Contains(t, body, "refused")
	es, err := rs.AuditLog(context.Background(), "shop", 1)
	require.NoError(t, err)
	require.Equal(t, "refused", es[0].Action)
	require.Equal(t, int64(1), es[0].Version)

	ed := signIn(t, srv, "ed")
	code, _ := ed.post("/apps/shop/rules", url.Values{"base": {"1"}, "doc": {"flow:\n  - resource: r\n    threshold: 2\n"}})
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, 2, admitted(eng, "r", 5))
	_, js := ada.get("/api/apps/shop/live")
	require.Contains(t, js, `{"id":"`+eng.InstanceID()+`","version":2,`)
	require.NotContains(t, js, `"refused"`)
}

// TestLocalConfig: the local mode needs somewhere to keep the rules, an
// engine that follows no rule store of its own, and one publisher of its
// frames.
func TestLocalConfig(t *testing.T) {
	eng := sluice.New()
	defer eng.Close()
	users := testUsers(t)
	_, err := dashboard.New(dashboard.Config{Engine: eng, Users: users})
	require.ErrorContains(t, err, "Config.Engine needs RulesDir")
	rs, err := filestore.Open(t.TempDir(), filestore.Config{})
	require.NoError(t, err)
	_, err = dashboard.New(dashboard.Config{Engine: eng, Users: users, Rules: rs, RulesDir: t.TempDir()})
	require.ErrorContains(t, err, "Rules and RulesDir")

	// With Telemetry, the dashboard publishes none of the Engine's frames.
	d, err := dashboard.New(dashboard.Config{Engine: eng, Users: users, RulesDir: t.TempDir(), Telemetry: &discard{}})
	require.NoError(t, err)
	_, publishing := d.Telemetry()
	require.False(t, publishing)
	require.NoError(t, d.Close())

	// With Rules (here a file store opened by the caller) instead of RulesDir.
	d, err = dashboard.New(dashboard.Config{Engine: eng, Users: users, Rules: rs})
	require.NoError(t, err)
	require.NoError(t, d.Close())
	require.Equal(t, int64(1), version(t, rs, "local"), "App defaults to local")
}

// discard is a cluster.Telemetry that keeps nothing.
type discard struct{}

func (*discard) Publish(context.Context, cluster.Frame, int, time.Duration) error { return nil }
func (*discard) Frames(context.Context, string, int64) ([]cluster.Frame, error)   { return nil, nil }
