package sluicegrpc_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice"
	sluicegrpc "github.com/sluice-go/sluice/adapters/grpc"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

func allowOnly(t *testing.T, g *sluice.Engine, callers ...string) {
	t.Helper()
	require.NoError(t, g.LoadRules(rules.Set{Authority: []rules.Authority{{Resource: unaryMethod, Allow: callers, Strict: true}}}))
}

// TestCallerFromMetadata: the caller from incoming metadata; a caller off
// the allow list or none under a strict rule ends with PermissionDenied
// (not ResourceExhausted, not Unavailable), a caller no entry may carry
// with InvalidArgument, counting nothing.
func TestCallerFromMetadata(t *testing.T) {
	f := start(t, sluicegrpc.WithCaller(sluicegrpc.CallerSource{Metadata: "x-caller"}))
	allowOnly(t, f.srv, "checkout")
	for _, tc := range []struct {
		name   string
		caller []string
		want   codes.Code
	}{
		{"allowed", []string{"checkout"}, codes.OK},
		{"first value counts", []string{"checkout", "mallory"}, codes.OK},
		{"not on the list", []string{"mallory"}, codes.PermissionDenied},
		{"no caller, strict", nil, codes.PermissionDenied},
		{"too long", []string{strings.Repeat("c", 1<<10)}, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			for _, c := range tc.caller {
				ctx = metadata.AppendToOutgoingContext(ctx, "x-caller", c)
			}
			_, err := f.call(t, ctx, "x")
			assert.Equal(t, tc.want, status.Code(err), "%v", err)
		})
	}
	pass, block, _, _ := snapshot(t, f.srv, unaryMethod)
	assert.Equal(t, uint64(2), pass)
	assert.Equal(t, uint64(2), block)
}

// TestCallerFromPeerCert: over real TLS on loopback, the caller is read from
// the certificate chain the server's handshake verified.
func TestCallerFromPeerCert(t *testing.T) {
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
	server := leaf(&x509.Certificate{IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}, x509.ExtKeyUsageServerAuth)
	spiffe, _ := url.Parse("spiffe://example.org/checkout")
	checkout := leaf(&x509.Certificate{Subject: pkix.Name{CommonName: "checkout"}, URIs: []*url.URL{spiffe}}, x509.ExtKeyUsageClientAuth)
	mallory := leaf(&x509.Certificate{Subject: pkix.Name{CommonName: "mallory"}}, x509.ExtKeyUsageClientAuth)

	for _, field := range []string{"cn", "uri"} {
		t.Run(field, func(t *testing.T) {
			g := sluice.New(sluice.WithClock(sluicetest.NewManualClock(int64(time.Hour))))
			defer func() { require.NoError(t, g.Close()) }()
			allowOnly(t, g, "checkout", "spiffe://example.org/checkout")
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{server}, ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven})
			s := grpc.NewServer(grpc.Creds(creds), grpc.UnaryInterceptor(sluicegrpc.UnaryServerInterceptor(g, sluicegrpc.WithCaller(sluicegrpc.CallerSource{Cert: field}))))
			s.RegisterService(&serviceDesc, &echo{})
			served := make(chan error, 1)
			go func() { served <- s.Serve(lis) }()
			defer func() { s.Stop(); require.NoError(t, <-served) }()
			for _, tc := range []struct {
				name string
				cert []tls.Certificate
				want codes.Code
			}{
				{"checkout", []tls.Certificate{checkout}, codes.OK},
				{"mallory", []tls.Certificate{mallory}, codes.PermissionDenied},
				{"no certificate", nil, codes.PermissionDenied},
			} {
				conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: tc.cert})))
				require.NoError(t, err)
				ctx := metadata.AppendToOutgoingContext(context.Background(), "x-caller", "checkout")
				err = conn.Invoke(ctx, unaryMethod, wrapperspb.String("x"), new(wrapperspb.StringValue))
				assert.Equal(t, tc.want, status.Code(err), "%s: %v", tc.name, err)
				require.NoError(t, conn.Close())
			}
			snap, _ := g.Snapshot(unaryMethod)
			assert.Equal(t, uint64(2), snap.BlockedBy[sluice.BlockAuthority])
		})
	}
}

func TestCallerSourcePanics(t *testing.T) {
	assert.Panics(t, func() { sluicegrpc.WithCaller(sluicegrpc.CallerSource{}) })
	assert.Panics(t, func() {
		sluicegrpc.WithCaller(sluicegrpc.CallerSource{Metadata: "a", Func: func(context.Context) string { return "" }})
	})
	assert.Panics(t, func() { sluicegrpc.WithCaller(sluicegrpc.CallerSource{Cert: "ou"}) })
}
