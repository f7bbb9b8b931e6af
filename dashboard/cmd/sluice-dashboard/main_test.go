package main

import (
	"bytes"
	"context"
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
	"go.uber.org/goleak"
	"golang.org/x/crypto/bcrypt"

	"github.com/sluice-go/sluice/cluster"
	sluiceredis "github.com/sluice-go/sluice/cluster/redis"
	"github.com/sluice-go/sluice/cluster/redis/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestHash(t *testing.T) {
	const good = "twelve chars"
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-hash"}, strings.NewReader(good+"\n"), &out, nil))
	require.NoError(t, bcrypt.CompareHashAndPassword(bytes.TrimSpace(out.Bytes()), []byte(good)))
	require.NotContains(t, out.String(), good, "the password is not printed")

	// Shorter than the users page's minimum: refused, without the
	// password in the error.
	for _, pw := range []string{"s3cret", "eleven char", ""} {
		out.Reset()
		err := run(context.Background(), []string{"-hash"}, strings.NewReader(pw+"\n"), &out, nil)
		require.ErrorContains(t, err, "at least 12 are required", "%q", pw)
		if pw != "" {
			require.NotContains(t, err.Error(), pw)
		}
		require.Empty(t, out.String())
	}
	err := run(context.Background(), []string{"-hash"}, strings.NewReader(strings.Repeat("x", 73)), &out, nil)
	require.ErrorContains(t, err, "at most 72")
}

// TestServesRedisFleet runs the command against a real Redis holding rules
// of shop, logs in and reads the rules back.
func TestServesRedisFleet(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	rs := sluiceredis.NewRuleStore(rdb, sluiceredis.RuleStoreConfig{Prefix: "t1"})
	_, err := rs.Save(ctx, "shop", 0, cluster.RuleVersion{Doc: []byte("flow:\n  - resource: GET /cart\n    threshold: 40\n"), Author: "seed"})
	require.NoError(t, err)

	h, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	require.NoError(t, err)
	users := filepath.Join(t.TempDir(), "users.yaml")
	require.NoError(t, os.WriteFile(users, []byte("users:\n  - {name: ed, hash: '"+string(h)+"', role: editor, apps: [shop]}\n"), 0o600))

	ctx, cancel := context.WithCancel(ctx)
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-redis", srv.Addr(), "-prefix", "t1", "-users", users, "-listen", "127.0.0.1:0"}, nil, io.Discard, ready)
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
}

func TestRefusesBadUsersFile(t *testing.T) {
	users := filepath.Join(t.TempDir(), "users.yaml")
	require.NoError(t, os.WriteFile(users, []byte("users:\n  - {name: ed, hash: plain, role: editor}\n"), 0o600))
	err := run(context.Background(), []string{"-users", users}, nil, io.Discard, nil)
	require.ErrorContains(t, err, `user 0 ("ed"): hash`)
}
