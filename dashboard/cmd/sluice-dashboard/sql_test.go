package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/cluster/sqlstore"
	"github.com/sluice-go/sluice/cluster/sqlstore/sqltest"
	"github.com/sluice-go/sluice/dashboard"
)

// TestServesSQLFleet runs the command with -rules on a real PostgreSQL and
// a real MariaDB (no Redis: -redis ""), logs in, reads the rules a client
// saved, and finds the login in the store's audit log; then a viewer reads
// who created and changed each resource's rules (checkBuckets).
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
			// The second version's author writes HTML: the page shows it
			// as text. Another application's rules name GET /cart too.
			_, err = rs.Save(ctx, "shop", 1, cluster.RuleVersion{Doc: []byte("flow:\n  - resource: GET /cart\n    threshold: 30\n  - resource: GET /pay\n    threshold: 5\n"), Author: hostileAuthor})
			require.NoError(t, err)
			_, err = rs.Save(ctx, "web", 0, cluster.RuleVersion{Doc: []byte("flow:\n  - resource: GET /cart\n    threshold: 9\n"), Author: "seed"})
			require.NoError(t, err)

			h, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
			require.NoError(t, err)
			users := filepath.Join(t.TempDir(), "users.yaml")
			require.NoError(t, os.WriteFile(users, []byte("users:\n  - {name: ed, hash: '"+string(h)+"', role: editor, apps: [shop]}\n"+
				"  - {name: vi, hash: '"+string(h)+"', role: viewer, apps: [shop]}\n"), 0o600))

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
			checkBuckets(t, ctx, rs, "http://"+addr)
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

// hostileAuthor is an author name with markup in it: shown as text.
const hostileAuthor = `<b id="x">ann</b>`

// checkBuckets: a viewer of shop reads who created and changed each
// resource of shop's rules, on the rules page (the author's markup
// escaped) and from /api/apps/shop/buckets, as the SQL store keeps them.
func checkBuckets(t *testing.T, ctx context.Context, rs *sqlstore.Store, base string) {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	hc := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	get := func(path string) (int, string) {
		res, err := hc.Get(base + path)
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(body)
	}
	_, body := get("/login")
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	require.NotNil(t, m)
	res, err := hc.PostForm(base+"/login", url.Values{"csrf": {m[1]}, "name": {"vi"}, "password": {"pw"}})
	require.NoError(t, err)
	res.Body.Close()

	status, page := get("/apps/shop/rules")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `id="buckets"`)
	require.NotContains(t, page, hostileAuthor)
	require.Contains(t, page, `&lt;b id=&#34;x&#34;&gt;ann&lt;/b&gt;`)
	row := regexp.MustCompile(`(?s)<td class="resource">GET /cart</td>.*?</tr>`).FindString(page[strings.Index(page, `id="buckets"`):])
	require.Regexp(t, `(?s)class="created-by">seed <span class="muted">version 1, .*class="updated-by">&lt;b id=&#34;x&#34;&gt;ann&lt;/b&gt; <span class="muted">version 2, .*class="apps">shop, web<`, row)

	status, body = get("/api/apps/shop/buckets")
	require.Equal(t, http.StatusOK, status, body)
	var got struct {
		Kept    bool
		Buckets []dashboard.BucketInfo
	}
	require.NoError(t, json.Unmarshal([]byte(body), &got))
	require.True(t, got.Kept)
	want, err := rs.Buckets(ctx, "shop")
	require.NoError(t, err)
	require.Len(t, got.Buckets, 2)
	require.Equal(t, "GET /cart", got.Buckets[0].Resource)
	require.Equal(t, []string{"shop", "web"}, got.Buckets[0].Apps)
	require.Equal(t, []string{"flow"}, got.Buckets[0].Kinds)
	require.Equal(t, "seed", got.Buckets[0].CreatedBy)
	require.Equal(t, int64(1), got.Buckets[0].CreatedIn)
	require.Equal(t, hostileAuthor, got.Buckets[0].UpdatedBy)
	require.Equal(t, int64(2), got.Buckets[0].UpdatedIn)
	require.True(t, want[0].UpdatedAt.Equal(got.Buckets[0].UpdatedAt))
	require.Equal(t, "GET /pay", got.Buckets[1].Resource)
	require.Equal(t, hostileAuthor, got.Buckets[1].CreatedBy)
	require.Equal(t, []string{"shop"}, got.Buckets[1].Apps)

	// Another application's metadata is not the viewer's to read: as for
	// its rules, the application is answered as not found.
	status, body = get("/api/apps/web/buckets")
	require.Equal(t, http.StatusNotFound, status)
	require.NotContains(t, body, "seed")
}
