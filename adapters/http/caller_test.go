package sluicehttp_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
	"github.com/sluice-go/sluice/rules"
)

// testPKI is a CA made for one test, with a server certificate for
// 127.0.0.1 and client certificates it signs.
type testPKI struct {
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	pool   *x509.CertPool
	server tls.Certificate
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	p := &testPKI{ca: ca, caKey: key, pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.server = p.leaf(t, &x509.Certificate{IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}, x509.ExtKeyUsageServerAuth)
	return p
}

// leaf returns a certificate signed by the CA with the names of tmpl.
func (p *testPKI) leaf(t *testing.T, tmpl *x509.Certificate, use x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{use}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// client returns a client presenting cert (none when nil) and trusting the CA.
func (p *testPKI) client(t *testing.T, cert *tls.Certificate) *http.Client {
	cf := &tls.Config{RootCAs: p.pool}
	if cert != nil {
		cf.Certificates = []tls.Certificate{*cert}
	}
	tr := &http.Transport{TLSClientConfig: cf, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// serveTLS starts h on loopback over TLS, verifying client certificates
// given (clientAuth).
func (p *testPKI) serveTLS(t *testing.T, h http.Handler, clientAuth tls.ClientAuthType) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{p.server}, ClientCAs: p.pool, ClientAuth: clientAuth}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// payRules: only checkout may call POST /pay, and a caller is required.
func payRules(t *testing.T, g *sluice.Engine) {
	require.NoError(t, g.LoadRules(rules.Set{Authority: []rules.Authority{{Resource: "POST /pay", Allow: []string{"checkout", "spiffe://example.org/checkout"}, Strict: true}}}))
}

func payMux(g *sluice.Engine, src sluicehttp.CallerSource) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /pay", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "paid") })
	return sluicehttp.Middleware(g, sluicehttp.WithCaller(src))(mux)
}

func post(t *testing.T, c *http.Client, u string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", u+"/pay", nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// TestCallerFromHeader: the caller from a header; a caller off the allow
// list, and a request without one under a strict rule, get 403; a caller
// no entry may carry gets 400 and counts nothing (never a pass: the
// middleware does not fail open past an authority rule).
func TestCallerFromHeader(t *testing.T) {
	g, _ := newEngine(t)
	payRules(t, g)
	srv, c := serve(t, payMux(g, sluicehttp.CallerSource{Header: "x-caller"}))
	for _, tc := range []struct {
		name   string
		header map[string]string
		status int
	}{
		{"allowed", map[string]string{"X-Caller": "checkout"}, 200},
		{"not on the list", map[string]string{"X-Caller": "mallory"}, 403},
		{"no caller, strict", nil, 403},
		{"invalid UTF-8", map[string]string{"X-Caller": "checkout\xff"}, 400},
		{"too long", map[string]string{"X-Caller": strings.Repeat("c", 257)}, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := post(t, c, srv.URL, tc.header)
			assert.Equal(t, tc.status, status, body)
		})
	}
	pass, block, _, _ := snapshot(t, g, "POST /pay")
	assert.Equal(t, uint64(1), pass)
	assert.Equal(t, uint64(2), block, "the two 400s are not counted")
	s, _ := g.Snapshot("POST /pay")
	assert.Equal(t, uint64(2), s.BlockedBy[sluice.BlockAuthority])
}

// TestCallerFromClientCert: over real TLS on loopback, the caller is read
// from the certificate the handshake verified: its CN, first DNS name or
// first URI. A request without a client certificate has no caller, and a
// self-signed certificate the server cannot verify gives none either.
func TestCallerFromClientCert(t *testing.T) {
	p := newPKI(t)
	spiffe, _ := url.Parse("spiffe://example.org/checkout")
	checkout := p.leaf(t, &x509.Certificate{Subject: pkix.Name{CommonName: "checkout"}, DNSNames: []string{"checkout"}, URIs: []*url.URL{spiffe}}, x509.ExtKeyUsageClientAuth)
	mallory := p.leaf(t, &x509.Certificate{Subject: pkix.Name{CommonName: "mallory"}, DNSNames: []string{"mallory"}}, x509.ExtKeyUsageClientAuth)
	for _, field := range []string{"cn", "dns", "uri"} {
		t.Run(field, func(t *testing.T) {
			g, _ := newEngine(t)
			payRules(t, g)
			srv := p.serveTLS(t, payMux(g, sluicehttp.CallerSource{Cert: field}), tls.VerifyClientCertIfGiven)
			status, _ := post(t, p.client(t, &checkout), srv.URL, nil)
			assert.Equal(t, 200, status)
			status, _ = post(t, p.client(t, &mallory), srv.URL, nil)
			assert.Equal(t, 403, status)
			status, _ = post(t, p.client(t, nil), srv.URL, map[string]string{"X-Caller": "checkout"})
			assert.Equal(t, 403, status, "no certificate: no caller, whatever the headers say")
		})
	}
	// A server that asks for a certificate without verifying it: a
	// certificate "checkout" of another CA is presented and not believed.
	forged := newPKI(t).leaf(t, &x509.Certificate{Subject: pkix.Name{CommonName: "checkout"}}, x509.ExtKeyUsageClientAuth)
	g, _ := newEngine(t)
	payRules(t, g)
	srv := p.serveTLS(t, payMux(g, sluicehttp.CallerSource{Cert: "cn"}), tls.RequestClientCert)
	status, _ := post(t, p.client(t, &forged), srv.URL, nil)
	assert.Equal(t, 403, status, "an unverified certificate names no caller")
	status, _ = post(t, p.client(t, &checkout), srv.URL, nil)
	assert.Equal(t, 403, status, "nor does a good one the server did not verify")
}

// TestCallerFromFunc: a function of the request names the caller.
func TestCallerFromFunc(t *testing.T) {
	g, _ := newEngine(t)
	payRules(t, g)
	srv, c := serve(t, payMux(g, sluicehttp.CallerSource{Func: func(r *http.Request) string { return r.URL.Query().Get("app") }}))
	for app, want := range map[string]int{"checkout": 200, "mallory": 403, "": 403} {
		req, err := http.NewRequest("POST", srv.URL+"/pay?app="+url.QueryEscape(app), nil)
		require.NoError(t, err)
		resp, err := c.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, want, resp.StatusCode, app)
	}
}

func TestCallerSourcePanics(t *testing.T) {
	assert.Panics(t, func() { sluicehttp.WithCaller(sluicehttp.CallerSource{}) })
	assert.Panics(t, func() { sluicehttp.WithCaller(sluicehttp.CallerSource{Header: "a", Cert: "cn"}) })
	assert.PanicsWithValue(t, `unknown certificate field "subject" for a caller (want cn, dns, uri or email)`, func() { sluicehttp.WithCaller(sluicehttp.CallerSource{Cert: "subject"}) })
}
