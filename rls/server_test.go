package rls

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// running is a server started by a test on a free loopback port.
type running struct {
	addr string
	done chan error
	stop context.CancelFunc
}

// startServer runs Run on 127.0.0.1:0 until the test ends.
func startServer(t testing.TB, o ServerOptions) *running {
	t.Helper()
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	ready := make(chan string, 1)
	o.Ready = func(a net.Addr) { ready <- a.String() }
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{done: make(chan error, 1), stop: cancel}
	go func() { r.done <- Run(ctx, o) }()
	select {
	case r.addr = <-ready:
	case err := <-r.done:
		cancel()
		t.Fatalf("Run: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-r.done; err != nil {
			t.Errorf("Run returned %v", err)
		}
	})
	return r
}

func dial(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// The integration test's sequence, over gRPC on loopback, through the
// generated client stubs.
func TestServerIntegrationSequence(t *testing.T) {
	clk := newClock(base)
	srv := startServer(t, ServerOptions{Config: "testdata/integration", Service: Options{Now: clk.Now}})
	c := pb.NewRateLimitServiceClient(dial(t, srv.addr))
	replayBasicSequence(t, clientFunc(c.ShouldRateLimit))

	h := healthpb.NewHealthClient(dial(t, srv.addr))
	for _, svc := range []string{"", pb.RateLimitService_ServiceDesc.ServiceName} {
		resp, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q: %v %v", svc, resp, err)
		}
	}
}

// clientFunc adapts the client stub to decider.
type clientFunc func(context.Context, *pb.RateLimitRequest, ...grpc.CallOption) (*pb.RateLimitResponse, error)

func (f clientFunc) ShouldRateLimit(ctx context.Context, r *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	return f(ctx, r)
}

// Hostile requests are bounded and answered: 10,000 descriptors, 1 MiB
// values, unknown domains, invalid UTF-8; the server serves on.
func TestServerHostileInput(t *testing.T) {
	srv := startServer(t, ServerOptions{Config: "testdata/integration", Metrics: "127.0.0.1:0"})
	conn := dial(t, srv.addr)
	c := pb.NewRateLimitServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	many := &pb.RateLimitRequest{Domain: "another"}
	for i := range MaxRequestDescriptors {
		many.Descriptors = append(many.Descriptors, desc("key2", strings.Repeat("v", i%50)))
	}
	resp, err := c.ShouldRateLimit(ctx, many)
	if err != nil || len(resp.Statuses) != MaxRequestDescriptors || resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("10,000 descriptors: %v, %d statuses", err, len(resp.GetStatuses()))
	}
	many.Descriptors = append(many.Descriptors, desc("key2", "x"))
	if _, err := c.ShouldRateLimit(ctx, many); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("10,001 descriptors: %v", err)
	}

	huge := strings.Repeat("h", 1<<20)
	for range 3 {
		resp, err = c.ShouldRateLimit(ctx, request("another", desc("key2", huge)))
		if err != nil {
			t.Fatalf("1 MiB value: %v", err)
		}
	}
	if resp.Statuses[0].LimitRemaining != 17 {
		t.Fatalf("1 MiB value counted: %s", summary(resp))
	}
	resp, err = c.ShouldRateLimit(ctx, request(huge, desc(huge, huge)))
	if err != nil || resp.OverallCode != pb.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit != nil {
		t.Fatalf("unknown 1 MiB domain: %v %v", resp, err)
	}

	// Invalid UTF-8 cannot be sent through the stubs (proto strings must
	// be UTF-8): send the wire bytes of a request with a bad value.
	good, _ := proto.Marshal(request("another", desc("key2", "ABCD")))
	bad := bytes.Replace(good, []byte("ABCD"), []byte{0xff, 0xfe, 0xc3, 0x28}, 1)
	var out []byte
	err = conn.Invoke(ctx, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", bad, &out, grpc.ForceCodec(rawCodec{}))
	if err == nil || status.Code(err) == codes.OK {
		t.Fatalf("invalid UTF-8 answered without an error: %x", out)
	}
	if err := conn.Invoke(ctx, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", good, &out, grpc.ForceCodec(rawCodec{})); err != nil {
		t.Fatalf("raw good request: %v", err)
	}
	// Still serving.
	if _, err := c.ShouldRateLimit(ctx, request("basic", desc("key1", "after"))); err != nil {
		t.Fatal(err)
	}
}

// rawCodec sends and receives wire bytes as they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// A changed config is reloaded; a broken one is refused and the one in
// force stays; the metrics count both.
func TestServerReload(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config.yaml")
	write := func(s string) {
		t.Helper()
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write("domain: d\ndescriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 5}}]\n")
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	maddr := ml.Addr().String()
	ml.Close()
	srv := startServer(t, ServerOptions{Config: dir, ReloadInterval: 20 * time.Millisecond, Metrics: maddr})
	c := pb.NewRateLimitServiceClient(dial(t, srv.addr))
	limitOf := func() uint32 {
		r, err := c.ShouldRateLimit(context.Background(), request("d", desc("k", "v")))
		if err != nil {
			t.Fatal(err)
		}
		return r.Statuses[0].CurrentLimit.GetRequestsPerUnit()
	}
	if l := limitOf(); l != 5 {
		t.Fatalf("limit %d", l)
	}
	write("domain: d\ndescriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 7}}]\n")
	eventually(t, func() bool { return limitOf() == 7 })
	write("domain: d\ndescriptors: [{key: k, rate_limit: {unit: hourly, requests_per_unit: 9}}]\n")
	eventually(t, func() bool { return strings.Contains(scrape(t, maddr), "sluice_rls_config_errors_total 1") })
	if l := limitOf(); l != 7 {
		t.Fatalf("after a bad config: limit %d, want 7 kept", l)
	}
	m := scrape(t, maddr)
	for _, want := range []string{"sluice_rls_config_loads_total 2", `sluice_rls_total_hits_total{key="d.k"} `, "sluice_rls_redis_up -1"} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q:\n%s", want, m)
		}
	}
}

// eventually polls cond until it holds, for at most 20 s (a busy host).
func eventually(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 20 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func scrape(t testing.TB, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// Reflection is registered on demand, so that grpcurl can list and call.
func TestServerReflection(t *testing.T) {
	srv := startServer(t, ServerOptions{Config: "testdata/integration", Reflection: true})
	rc := reflectionpb.NewServerReflectionClient(dial(t, srv.addr))
	stream, err := rc.ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.CloseSend()
	found := false
	for _, s := range resp.GetListServicesResponse().GetService() {
		found = found || s.Name == pb.RateLimitService_ServiceDesc.ServiceName
	}
	if !found {
		t.Fatalf("services: %v", resp)
	}
}

// TLS and mTLS: a client without the CA's certificate is refused.
func TestServerTLS(t *testing.T) {
	dir := t.TempDir()
	caCert, caKey := selfSigned(t, dir, "ca", nil, nil)
	selfSigned(t, dir, "server", caCert, caKey)
	selfSigned(t, dir, "client", caCert, caKey)
	srv := startServer(t, ServerOptions{
		Config: "testdata/integration", TLSCert: filepath.Join(dir, "server.pem"), TLSKey: filepath.Join(dir, "server.key"),
		TLSClientCA: filepath.Join(dir, "ca.pem"),
	})
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key"))
	if err != nil {
		t.Fatal(err)
	}
	ok := pb.NewRateLimitServiceClient(dial(t, srv.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, ServerName: "127.0.0.1"}))))
	if _, err := ok.ShouldRateLimit(context.Background(), request("basic", desc("key1", "tls"))); err != nil {
		t.Fatalf("mTLS client: %v", err)
	}
	anon := pb.NewRateLimitServiceClient(dial(t, srv.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}))))
	if _, err := anon.ShouldRateLimit(context.Background(), request("basic", desc("key1", "tls"))); err == nil {
		t.Fatal("a client without a certificate was served")
	}
}

// selfSigned writes name.pem and name.key into dir: a CA when parent is
// nil, else a leaf for 127.0.0.1 signed by it.
func selfSigned(t testing.TB, dir, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	if err := os.WriteFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return cert, key
}

// Graceful stop: once ctx ends, health says NOT_SERVING to the calls that
// still come, Run returns nil and the port is released.
func TestServerGracefulStop(t *testing.T) {
	srv := startServer(t, ServerOptions{Config: "testdata/integration"})
	c := pb.NewRateLimitServiceClient(dial(t, srv.addr))
	if _, err := c.ShouldRateLimit(context.Background(), request("basic", desc("key1", "x"))); err != nil {
		t.Fatal(err)
	}
	srv.stop()
	select {
	case err := <-srv.done:
		if err != nil {
			t.Fatal(err)
		}
		srv.done <- nil // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	l, err := net.Listen("tcp", srv.addr)
	if err != nil {
		t.Fatalf("port still held: %v", err)
	}
	l.Close()
}

func TestRunErrors(t *testing.T) {
	for _, o := range []ServerOptions{
		{},
		{Config: "testdata/missing.yaml"},
		{Config: "testdata/integration", Addr: "256.0.0.1:1"},
		{Config: "testdata/integration", Addr: "127.0.0.1:0", TLSCert: "testdata/missing.pem", TLSKey: "testdata/missing.key"},
		{Config: "testdata/integration", Addr: "127.0.0.1:0", Redis: "http://x"},
	} {
		if err := Run(context.Background(), o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}
