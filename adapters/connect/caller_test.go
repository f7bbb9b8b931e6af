package sluiceconnect_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
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

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice"
	sluiceconnect "github.com/sluice-go/sluice/adapters/connect"
	"github.com/sluice-go/sluice/adapters/connect/internal/adaptertest"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

const (
	payProc    = "/sluice.test.Pay/Charge"
	streamProc = "/sluice.test.Pay/Watch"
)

func newEngine(t *testing.T) (*sluice.Engine, *sluicetest.ManualClock) {
	t.Helper()
	clk := sluicetest.NewManualClock(int64(time.Hour))
	g := sluice.New(sluice.WithClock(clk))
	t.Cleanup(func() { require.NoError(t, g.Close()) })
	return g, clk
}

// payMux serves payProc (unary, echoing its message) and streamProc
// (a server stream of one message) through an interceptor with opts.
func payMux(g *sluice.Engine, opts ...sluiceconnect.Option) *http.ServeMux {
	ho := connect.WithInterceptors(sluiceconnect.NewInterceptor(g, opts...))
	mux := http.NewServeMux()
	mux.Handle(payProc, connect.NewUnaryHandler(payProc, func(_ context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
		return connect.NewResponse(wrapperspb.String("paid " + req.Msg.GetValue())), nil
	}, ho))
	mux.Handle(streamProc, connect.NewServerStreamHandler(streamProc, func(_ context.Context, _ *connect.Request[msg], s *connect.ServerStream[msg]) error {
		return s.Send(wrapperspb.String("tick"))
	}, ho))
	return mux
}

// charge calls payProc with caller in X-Caller ("" for none) and returns
// the response's header, or the error.
func charge(t *testing.T, hc *http.Client, url, caller string) (http.Header, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := connect.NewRequest(wrapperspb.String("1"))
	if caller != "" {
		req.Header().Set("X-Caller", caller)
	}
	resp, err := connect.NewClient[msg, msg](hc, url+payProc).CallUnary(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.Header(), nil
}

func codeOfErr(err error) string {
	if err == nil {
		return "ok"
	}
	return connect.CodeOf(err).String()
}

// TestCallerFromHeader: the caller from a request header; PermissionDenied
// for a caller an authority rule refuses, InvalidArgument for one no entry
// may carry (not counted), on a real server on loopback.
func TestCallerFromHeader(t *testing.T) {
	g, _ := newEngine(t)
	require.NoError(t, g.LoadRules(rules.Set{Authority: []rules.Authority{{Resource: payProc, Deny: []string{"mallory"}, Strict: true}}}))
	srv, hc := adaptertest.Serve(t, payMux(g, sluiceconnect.WithCaller(sluiceconnect.CallerSource{Header: "x-caller"})))
	for _, tc := range []struct{ caller, want string }{
		{"checkout", "ok"},
		{"mallory", "permission_denied"},
		{"", "permission_denied"},
		{strings.Repeat("x", 300), "invalid_argument"},
	} {
		_, err := charge(t, hc, srv.URL, tc.caller)
		assert.Equal(t, tc.want, codeOfErr(err), "caller %.10q", tc.caller)
	}
	s, _ := g.Snapshot(payProc)
	assert.Equal(t, uint64(1), s.TotalPass)
	assert.Equal(t, uint64(2), s.BlockedBy[sluice.BlockAuthority])
	assert.Equal(t, uint64(2), s.TotalBlock)
}

// TestCallerFromFunc: the caller from a function of the call, on a handler
// and on a client's stream (refused before anything is sent); a source
// with no field, two or an unknown certificate field panics.
func TestCallerFromFunc(t *testing.T) {
	g, _ := newEngine(t)
	require.NoError(t, g.LoadRules(rules.Set{Authority: []rules.Authority{{Resource: payProc, Allow: []string{"checkout"}, Strict: true}}}))
	src := sluiceconnect.CallerSource{Func: func(_ context.Context, c sluiceconnect.Call) string {
		return strings.TrimPrefix(c.Header.Get("X-Caller"), "svc-")
	}}
	srv, hc := adaptertest.Serve(t, payMux(g, sluiceconnect.WithCaller(src)))
	_, err := charge(t, hc, srv.URL, "svc-checkout")
	assert.NoError(t, err)
	_, err = charge(t, hc, srv.URL, "svc-mallory")
	assert.Equal(t, "permission_denied", codeOfErr(err))

	bad := sluiceconnect.CallerSource{Func: func(context.Context, sluiceconnect.Call) string { return "a\x00b" }}
	cl := connect.NewClient[msg, msg](hc, srv.URL+streamProc, connect.WithInterceptors(sluiceconnect.NewInterceptor(g, sluiceconnect.WithCaller(bad))))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := cl.CallServerStream(ctx, connect.NewRequest(wrapperspb.String("")))
	if err == nil {
		assert.False(t, st.Receive())
		err = st.Err()
		_ = st.Close()
	}
	assert.Equal(t, "invalid_argument", codeOfErr(err))

	assert.Panics(t, func() { sluiceconnect.WithCaller(sluiceconnect.CallerSource{}) })
	assert.Panics(t, func() { sluiceconnect.WithCaller(sluiceconnect.CallerSource{Header: "X", Cert: "cn"}) })
	assert.Panics(t, func() { sluiceconnect.WithCaller(sluiceconnect.CallerSource{Cert: "serial"}) })
}

// TestCallerFromClientCert: over real TLS on loopback, through
// CertHandler, the caller is the verified client certificate's common
// name; without a certificate, or without CertHandler, there is none.
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
	serverCert := leaf(&x509.Certificate{IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}, x509.ExtKeyUsageServerAuth)
	checkout := leaf(&x509.Certificate{Subject: pkix.Name{CommonName: "checkout"}}, x509.ExtKeyUsageClientAuth)
	mallory := leaf(&x509.Certificate{Subject: pkix.Name{CommonName: "mallory"}}, x509.ExtKeyUsageClientAuth)
	g, _ := newEngine(t)
	require.NoError(t, g.LoadRules(rules.Set{Authority: []rules.Authority{{Resource: payProc, Allow: []string{"checkout"}, Strict: true}}}))
	serve := func(h http.Handler) string {
		srv := httptest.NewUnstartedServer(h)
		srv.Config.ErrorLog = log.New(io.Discard, "", 0)
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return srv.URL
	}
	client := func(cert ...tls.Certificate) *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: cert}, DisableKeepAlives: true}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	opt := sluiceconnect.WithCaller(sluiceconnect.CallerSource{Cert: "cn"})
	u := serve(sluiceconnect.CertHandler(payMux(g, opt)))
	_, err = charge(t, client(checkout), u, "")
	assert.NoError(t, err)
	_, err = charge(t, client(mallory), u, "checkout")
	assert.Equal(t, "permission_denied", codeOfErr(err))
	_, err = charge(t, client(), u, "checkout")
	assert.Equal(t, "permission_denied", codeOfErr(err))
	_, err = charge(t, client(checkout), serve(payMux(g, opt)), "")
	assert.Equal(t, "permission_denied", codeOfErr(err), "without CertHandler")
}

// TestRateLimitHeaders: through a real server on loopback, a unary call
// that passes carries the RateLimit fields in its response headers and a
// refused one (ResourceExhausted) in its error's metadata, with the
// values of a model of the rule at adversarial instants on a manual
// clock; a stream's response headers carry them too; without the option,
// none.
func TestRateLimitHeaders(t *testing.T) {
	g, clk := newEngine(t)
	require.NoError(t, g.LoadRules(rules.Set{Flow: []rules.Flow{
		{ID: "pay", Resource: payProc, Threshold: 3},
		{Resource: streamProc, Threshold: 3},
	}}))
	srv, hc := adaptertest.Serve(t, payMux(g, sluiceconnect.WithRateLimitHeaders(true)))
	m := &adaptertest.WindowModel{ID: "pay", Limit: 3}
	steps := []time.Duration{0, 0, 0, 0, 99 * time.Millisecond, time.Millisecond, 850 * time.Millisecond, 49 * time.Millisecond, time.Millisecond, 0, 0, 2 * time.Second, 0}
	for i, d := range steps {
		clk.Advance(d)
		ok, want := m.Decide(clk.Nanotime())
		h, err := charge(t, hc, srv.URL, "")
		where := fmt.Sprintf("call %d at %v", i, time.Duration(clk.Nanotime()))
		if ok {
			require.NoError(t, err, where)
		} else {
			var ce *connect.Error
			require.True(t, errors.As(err, &ce), where)
			require.Equal(t, connect.CodeResourceExhausted, ce.Code(), where)
			h = ce.Meta()
		}
		assert.Equal(t, want, adaptertest.RateLimitHeaders(h), where)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := connect.NewClient[msg, msg](hc, srv.URL+streamProc).CallServerStream(ctx, connect.NewRequest(wrapperspb.String("")))
	require.NoError(t, err)
	require.True(t, st.Receive(), "%v", st.Err())
	assert.Equal(t, `"default";q=3;w=1`, st.ResponseHeader().Get("RateLimit-Policy"))
	assert.Equal(t, "3", st.ResponseHeader().Get("X-RateLimit-Limit"))
	require.NoError(t, st.Close())

	srv, hc = adaptertest.Serve(t, payMux(g))
	h, err := charge(t, hc, srv.URL, "")
	require.NoError(t, err)
	assert.Empty(t, adaptertest.RateLimitHeaders(h))
}
