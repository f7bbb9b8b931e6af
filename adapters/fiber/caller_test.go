package sluicefiber_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	sluicefiber "github.com/sluice-go/sluice/adapters/fiber"
	"github.com/sluice-go/sluice/adapters/fiber/internal/adaptertest"
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

func newApp(g *sluice.Engine, opts ...sluicefiber.Option) *fiber.App {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(recoverer, sluicefiber.Middleware(g, opts...))
	app.Get("/users/:id", func(c *fiber.Ctx) error { return c.SendString("user " + c.Params("id")) })
	app.Post("/users/:id", func(c *fiber.Ctx) error { return c.Status(201).SendString("created " + c.Params("id")) })
	app.Get("/health", func(c *fiber.Ctx) error { return c.SendString("ok") })
	return app
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
	c := serve(t, newApp(g, sluicefiber.WithCaller(sluicefiber.CallerSource{Header: "x-caller"})))
	assert.Equal(t, 201, postUser(t, c.C, c.URL, "checkout"))
	assert.Equal(t, 403, postUser(t, c.C, c.URL, "mallory"))
	assert.Equal(t, 403, postUser(t, c.C, c.URL, ""))
	assert.Equal(t, 400, postUser(t, c.C, c.URL, strings.Repeat("x", 300)))
	s, _ := g.Snapshot("POST /users/:id")
	assert.Equal(t, uint64(1), s.TotalPass)
	assert.Equal(t, uint64(2), s.BlockedBy[sluice.BlockAuthority])
	assert.Equal(t, uint64(2), s.TotalBlock)
}

// TestCallerFromFunc: the caller from a function of the request; a
// source with no field or two panics.
func TestCallerFromFunc(t *testing.T) {
	g, _ := newEngine(t)
	require.NoError(t, g.LoadRules(rules.Set{Authority: []rules.Authority{{Resource: "POST /users/:id", Allow: []string{"checkout"}, Strict: true}}}))
	src := sluicefiber.CallerSource{Func: func(c *fiber.Ctx) string { return strings.TrimPrefix(c.Get("X-Caller"), "svc-") }}
	c := serve(t, newApp(g, sluicefiber.WithCaller(src)))
	assert.Equal(t, 201, postUser(t, c.C, c.URL, "svc-checkout"))
	assert.Equal(t, 403, postUser(t, c.C, c.URL, "svc-mallory"))
	assert.Panics(t, func() { sluicefiber.WithCaller(sluicefiber.CallerSource{}) })
	assert.Panics(t, func() { sluicefiber.WithCaller(sluicefiber.CallerSource{Header: "X", Cert: "cn"}) })
	assert.Panics(t, func() { sluicefiber.WithCaller(sluicefiber.CallerSource{Cert: "serial"}) })
}

// TestCallerFromClientCert: over real TLS on loopback (fasthttp serving a
// tls.Listener), the caller is the verified client certificate's common
// name; a request without a certificate has no caller.
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
	app := newApp(g, sluicefiber.WithCaller(sluicefiber.CallerSource{Cert: "cn"}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	lis = tls.NewListener(lis, &tls.Config{Certificates: []tls.Certificate{leaf(&x509.Certificate{IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}, x509.ExtKeyUsageServerAuth)},
		ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven})
	served := make(chan error, 1)
	go func() { served <- app.Listener(lis) }()
	t.Cleanup(func() {
		require.NoError(t, app.ShutdownWithTimeout(10*time.Second))
		require.NoError(t, <-served)
	})
	u := "https://" + lis.Addr().String()
	client := func(cert []tls.Certificate) *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: cert}, DisableKeepAlives: true}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	assert.Equal(t, 201, postUser(t, client([]tls.Certificate{leaf(&x509.Certificate{Subject: pkix.Name{CommonName: "checkout"}}, x509.ExtKeyUsageClientAuth)}), u, ""))
	assert.Equal(t, 403, postUser(t, client([]tls.Certificate{leaf(&x509.Certificate{Subject: pkix.Name{CommonName: "mallory"}}, x509.ExtKeyUsageClientAuth)}), u, "checkout"))
	assert.Equal(t, 403, postUser(t, client(nil), u, "checkout"))
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
	c := serve(t, newApp(g, sluicefiber.WithRateLimitHeaders(true)))
	m := &adaptertest.WindowModel{ID: "users", Limit: 3}
	steps := []time.Duration{0, 0, 0, 0, 99 * time.Millisecond, time.Millisecond, 850 * time.Millisecond, 49 * time.Millisecond, time.Millisecond, 0, 0, 2 * time.Second, 0}
	for i, d := range steps {
		clk.Advance(d)
		ok, want := m.Decide(clk.Nanotime())
		resp, err := c.C.Get(c.URL + "/users/7")
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

	c = serve(t, newApp(g))
	resp, err := c.C.Get(c.URL + "/health")
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Empty(t, adaptertest.RateLimitHeaders(resp.Header))
}
