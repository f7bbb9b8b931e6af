package main

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/sqlstore"
	"github.com/sluice-go/sluice/cluster/sqlstore/sqltest"
)

// TestServesSQLFleet runs the command with -rules on a real PostgreSQL and
// a real MariaDB (no Redis: -redis ""), logs in, reads the rules a client
// saved, and finds the login in the store's audit log.
func TestServesSQLFleet(t *testing.T) {
	for _, kind := range []string{sqltest.Postgres, sqltest.MariaDB} {
		t.Run(kind, func(t *testing.T) {
			srv := sqltest.Start(t, kind)
			rulesURL := srv.URL(srv.NewDatabase(t), "", "")
			ctx := context.Background()
			rs, err := sqlstore.Open(ctx, rulesURL, sqlstore.Config{})
			require.NoError(t, err)
			defer rs.Close()
			_, err = rs.Save(ctx, "shop", 0, cluster.RuleVersion{Doc: []byte("flow:\n  - resource: GET /cart\n    threshold: 40\n"), Author: "seed"})
			require.NoError(t, err)

			h, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
			require.NoError(t, err)
			users := filepath.Join(t.TempDir(), "users.yaml")
			require.NoError(t, os.WriteFile(users, []byte("users:\n  - {name: ed, hash: '"+string(h)+"', role: editor, apps: [shop]}\n"), 0o600))

			ctx, cancel := context.WithCancel(ctx)
			ready := make(chan string, 1)
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, []string{"-rules", rulesURL, "-redis", "", "-users", users, "-listen", "127.0.0.1:0"}, nil, io.Discard, ready)
			}()
			var addr string
			select {
			case addr = <-ready:
			case err := <-done:
				t.Fatal(err)
			case <-time.After(20 * time.Second):
				t.Fatal("not listening after 20 s")
			}
			defer func() {
				cancel()
				require.NoError(t, <-done)
			}()

			jar, err := cookiejar.New(nil)
			require.NoError(t, err)
			hc := &http.Client{Jar: jar, Timeout: 10 * time.Second}
			res, err := hc.Get("http://" + addr + "/login")
			require.NoError(t, err)
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(body)
			require.NotNil(t, m)
			res, err = hc.PostForm("http://"+addr+"/login", url.Values{"csrf": {string(m[1])}, "name": {"ed"}, "password": {"pw"}})
			require.NoError(t, err)
			res.Body.Close()
			res, err = hc.Get("http://" + addr + "/apps/shop/rules")
			require.NoError(t, err)
			body, _ = io.ReadAll(res.Body)
			res.Body.Close()
			require.Equal(t, http.StatusOK, res.StatusCode)
			require.Contains(t, string(body), "GET /cart")

			es, err := rs.AuditLog(context.Background(), "", 10)
			require.NoError(t, err)
			require.Equal(t, "login", es[0].Action)
			require.Equal(t, "ed", es[0].User)
		})
	}
}

// TestRefusesBadRulesURL: a rule store URL with a wrong scheme is refused
// before anything listens, naming the flag.
func TestRefusesBadRulesURL(t *testing.T) {
	err := run(context.Background(), []string{"-rules", "sqlite://x", "-redis", ""}, nil, io.Discard, nil)
	require.ErrorContains(t, err, "-rules: sqlstore: database URL scheme")
	err = run(context.Background(), []string{"-redis", ""}, nil, io.Discard, nil)
	require.ErrorContains(t, err, "no rule store")
}
