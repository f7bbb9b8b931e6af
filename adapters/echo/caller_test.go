package sluiceecho_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	sluiceecho "github.com/sluice-go/sluice/adapters/echo"
	"github.com/sluice-go/sluice/adapters/echo/internal/adaptertest"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

func newEngine(t *testing.T) (*sluice.Engine, *sluicetest.ManualClock) {
	t.Helper()
	clk := sluicetest.NewManualClock(int64(time.Hour))
	g := sluice.New(sluice.WithClock(clk))
	t.Cleanup(func() { require.NoError(t, g.Close()) })
	return g, clk
}

func newRouter(g *sluice.Engine, opts ...sluiceecho.Option) *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(recoverer, sluiceecho.Middleware(g, opts...))
	e.GET("/users/:id", func(c echo.Context) error { return c.String(200, "user "+c.Param("id")) })
	e.POST("/users/:id", func(c echo.Context) error { return c.String(201, "created "+c.Param("id")) })
	e.GET("/health", func(c echo.Context) error { return c.String(200, "ok") })
	return e
}

func postUser(t *testing.T, c *http.Client, u, caller string) int {
	t.Helper()
	req, err := http.NewRequest("POST", u+"/users/1", nil)
	require.NoError(t, err)
	if caller != "" {
		req.Header.Set("X-Caller", caller)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestCallerFromHeader: the caller from a header; 403 for a caller an
// authority rule refuses, 400 for one no entry may carry (not counted).
func TestCallerFromHeader(t *testing.T) {
	g, _ := newEngine(t)
	require.NoError(t, g.LoadRules(rules.Set{Authority: []rules.Authority{{Resource: "POST /users/:id", Deny: []string{"mallory"}, Strict: true}}}))
	srv, c := adaptertest.Serve(t, newRouter(g, sluiceecho.WithCaller(sluicehttp.CallerSource{Header: "X-Caller"})))
	assert.Equal(t, 201, postUser(t, c, srv.URL, "checkout"))
	assert.Equal(t, 403, postUser(t, c, srv.URL, "mallory"))
	assert.Equal(t, 403, postUser(t, c, srv.URL, ""))
	assert.Equal(t, 400, postUser(t, c, srv.URL, strings.Repeat("x", 300)))
	s, _ := g.Snapshot("POST /users/:id")
	assert.Equal(t, uint64(1), s.TotalPass)
	assert.Equal(t, uint64(2), s.BlockedBy[sluice.BlockAuthority])
	assert.Equal(t, uint64(2), s.TotalBlock)
}

// TestCallerFromFunc: the caller from a function of the request.
func TestCallerFromFunc(t *testing.T) {
	g, _ := newEngine(t)
	require.NoError(t, g.LoadRules(rules.Set{Authority: []rules.Authority{{Resource: "POST /users/:id", Allow: []string{"checkout"}, Strict: true}}}))
	src := sluicehttp.CallerSource{Func: func(r *http.Request) string { return strings.TrimPrefix(r.Header.Get("X-Caller"), "svc-") }}
	srv, c := adaptertest.Serve(t, newRouter(g, sluiceecho.WithCaller(src)))
	assert.Equal(t, 201, postUser(t, c, srv.URL, "svc-checkout"))
	assert.Equal(t, 403, postUser(t, c, srv.URL, "svc-mallory"))
	assert.Panics(t, func() { sluiceecho.WithCaller(sluicehttp.CallerSource{}) })
	assert.Panics(t, func() { sluiceecho.WithCaller(sluicehttp.CallerSource{Header: "X", Cert: "cn"}) })
}

// TestCallerFromClientCert: over real TLS on loopback, the caller is the
// verified client certificate's common name.
func TestCallerFromClientCert(t *testing.T) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	leaf := func(tmpl *x509.Certificate, use x509.ExtKeyUsage) tls.Certificate {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		tmpl.ExtKeyUsage, tmpl.KeyUsage = []x509.ExtKeyUsage{use}, x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	g, _ := newEngine(t)
	require.NoError(t, g.LoadRules(rules.Set{Authority: []rules.Authority{{Resource: "POST /users/:id", Allow: []string{"checkout"}, Strict: true}}}))
	srv := httptest.NewUnstartedServer(newRouter(g, sluiceecho.WithCaller(sluicehttp.CallerSource{Cert: "cn"})))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{leaf(&x509.Certificate{IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}, x509.ExtKeyUsageServerAuth)},
		ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven}
	srv.StartTLS()
	defer srv.Close()
	client := func(cert []tls.Certificate) *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: cert}, DisableKeepAlives: true}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	assert.Equal(t, 201, postUser(t, client([]tls.Certificate{leaf(&x509.Certificate{Subject: pkix.Name{CommonName: "checkout"}}, x509.ExtKeyUsageClientAuth)}), srv.URL, ""))
	assert.Equal(t, 403, postUser(t, client([]tls.Certificate{leaf(&x509.Certificate{Subject: pkix.Name{CommonName: "mallory"}}, x509.ExtKeyUsageClientAuth)}), srv.URL, "checkout"))
	assert.Equal(t, 403, postUser(t, client(nil), srv.URL, "checkout"))
}

// TestRateLimitHeaders: through a real server on loopback, every response
// of a route under a rate rule, passed or refused (429 with Retry-After),
// carries the RateLimit fields and the X-RateLimit ones with the values of
// a model of the rule, at adversarial instants on a manual clock; without
// the option, none.
func TestRateLimitHeaders(t *testing.T) {
	g, clk := newEngine(t)
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{
		{ID: "users", Resource: "GET /users/:id", Threshold: 3},
		{Resource: "GET /health", Threshold: 3},
	}}))
	srv, c := adaptertest.Serve(t, newRouter(g, sluiceecho.WithRateLimitHeaders(true)))
	m := &adaptertest.WindowModel{ID: "users", Limit: 3}
	steps := []time.Duration{0, 0, 0, 0, 99 * time.Millisecond, time.Millisecond, 850 * time.Millisecond, 49 * time.Millisecond, time.Millisecond, 0, 0, 2 * time.Second, 0}
	for i, d := range steps {
		clk.Advance(d)
		ok, want := m.Decide(clk.Nanotime())
		resp, err := c.Get(srv.URL + "/users/7")
		require.NoError(t, err)
		_ = resp.Body.Close()
		where := fmt.Sprintf("request %d at %v", i, time.Duration(clk.Nanotime()))
		if ok {
			require.Equal(t, http.StatusOK, resp.StatusCode, where)
		} else {
			require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, where)
			assert.NotEmpty(t, resp.Header.Get("Retry-After"), where)
		}
		assert.Equal(t, want, adaptertest.RateLimitHeaders(resp.Header), where)
	}

	srv, c = adaptertest.Serve(t, newRouter(g))
	resp, err := c.Get(srv.URL + "/health")
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Empty(t, adaptertest.RateLimitHeaders(resp.Header))
}
