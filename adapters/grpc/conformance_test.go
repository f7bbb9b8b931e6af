package sluicegrpc_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice"
	sluicegrpc "github.com/sluice-go/sluice/adapters/grpc"
	"github.com/sluice-go/sluice/adapters/grpc/internal/adaptertest"
)

// The suite's routes as procedures of a hand-written service.
const suiteService = "sluice.test.Suite"

var suiteProcedures = map[string]string{
	adaptertest.RouteX:      "X",
	adaptertest.RouteUser:   "User",
	adaptertest.RouteStatus: "Status",
	adaptertest.RoutePanic:  "Panic",
	adaptertest.RouteStream: "Stream",
}

// suiteCodes names gRPC codes as adaptertest.HTTPStatus does.
var suiteCodes = map[codes.Code]string{
	codes.OK: "ok", codes.InvalidArgument: "invalid_argument", codes.PermissionDenied: "permission_denied", codes.NotFound: "not_found",
	codes.ResourceExhausted: "resource_exhausted", codes.Unavailable: "unavailable",
	codes.Internal: "internal", codes.Unknown: "unknown",
}

func suiteCode(name string) codes.Code {
	for c, n := range suiteCodes {
		if n == name {
			return c
		}
	}
	return codes.Internal
}

// suiteServiceDesc serves the suite's routes; gate is the stream's.
func suiteServiceDesc(t *testing.T, gate <-chan struct{}) *grpc.ServiceDesc {
	unary := func(name string, h func(in string) (string, error)) grpc.MethodDesc {
		return grpc.MethodDesc{MethodName: name, Handler: func(srv any, ctx context.Context, dec func(any) error, icp grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			call := func(ctx context.Context, req any) (any, error) {
				out, err := h(req.(*wrapperspb.StringValue).GetValue())
				if err != nil {
					return nil, err
				}
				return wrapperspb.String(out), nil
			}
			return icp(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/" + suiteService + "/" + name}, call)
		}}
	}
	return &grpc.ServiceDesc{
		ServiceName: suiteService,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			unary("X", func(string) (string, error) { return "x", nil }),
			unary("User", func(id string) (string, error) { return "user " + id, nil }),
			unary("Status", func(p string) (string, error) {
				return "", status.Error(suiteCode(adaptertest.CodeOf(adaptertest.StatusParam(t, p))), "failed")
			}),
			unary("Panic", func(string) (string, error) { panic("boom") }),
		},
		Streams: []grpc.StreamDesc{{StreamName: "Stream", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
			if err := ss.RecvMsg(new(wrapperspb.StringValue)); err != nil {
				return err
			}
			if err := ss.SendMsg(wrapperspb.String("first")); err != nil {
				return err
			}
			select {
			case <-gate:
			case <-ss.Context().Done():
				return ss.Context().Err()
			}
			return ss.SendMsg(wrapperspb.String("last"))
		}}},
	}
}

// suiteOptions are the interceptors' options for cf.
func suiteOptions(cf adaptertest.Config) []sluicegrpc.Option {
	var opts []sluicegrpc.Option
	if p := cf.Policy; p != nil {
		rp := sluicegrpc.RefusalPolicy{OverloadRetryAfter: p.OverloadRetryAfter}
		if p.Status != nil {
			rp.Code = func(be *sluice.BlockError) codes.Code {
				if s := p.Status(be); s == 429 || s == 503 {
					return suiteCode(adaptertest.CodeOf(s))
				}
				return codes.OK
			}
		}
		opts = append(opts, sluicegrpc.WithRefusalPolicy(rp))
	}
	if f := cf.ErrorStatus; f != nil {
		var cs []codes.Code
		for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
			if f(adaptertest.HTTPStatus(suiteCodes[c])) || (suiteCodes[c] == "" && f(500)) {
				cs = append(cs, c)
			}
		}
		opts = append(opts, sluicegrpc.WithErrorCodes(cs...))
	}
	if cf.Args {
		message := func(_ context.Context, _ string, req any) any {
			if m, ok := req.(*wrapperspb.StringValue); ok && m.GetValue() != "" {
				return m.GetValue()
			}
			return nil
		}
		opts = append(opts, sluicegrpc.WithArgs(message, sluicegrpc.Metadata("x-user"), sluicegrpc.Metadata("x-q")))
	}
	if cf.Caller {
		opts = append(opts, sluicegrpc.WithCaller(sluicegrpc.CallerSource{Metadata: "x-caller"}))
	}
	if cf.RateLimit {
		opts = append(opts, sluicegrpc.WithRateLimitMetadata(true))
	}
	return opts
}

// TestConformance runs the adapters' conformance suite (adaptertest.Run)
// on the server interceptors and on the client interceptors.
func TestConformance(t *testing.T) {
	adaptertest.Run(t, adaptertest.Adapter{
		Start: func(t *testing.T, g *sluice.Engine, cf adaptertest.Config) adaptertest.Client {
			var sopts []grpc.ServerOption
			dopts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
			if cf.Side == adaptertest.OnServer {
				sopts = append(sopts,
					grpc.ChainUnaryInterceptor(recoveryUnary, sluicegrpc.UnaryServerInterceptor(g, suiteOptions(cf)...)),
					grpc.ChainStreamInterceptor(recoveryStream, sluicegrpc.StreamServerInterceptor(g, suiteOptions(cf)...)))
			} else {
				sopts = append(sopts, grpc.ChainUnaryInterceptor(recoveryUnary), grpc.ChainStreamInterceptor(recoveryStream))
				dopts = append(dopts,
					grpc.WithUnaryInterceptor(sluicegrpc.UnaryClientInterceptor(g, suiteOptions(cf)...)),
					grpc.WithStreamInterceptor(sluicegrpc.StreamClientInterceptor(g, suiteOptions(cf)...)))
			}
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			s := grpc.NewServer(sopts...)
			s.RegisterService(suiteServiceDesc(t, cf.Gate), nil)
			served := make(chan error, 1)
			go func() { served <- s.Serve(lis) }()
			conn, err := grpc.NewClient(lis.Addr().String(), dopts...)
			require.NoError(t, err)
			t.Cleanup(func() {
				require.NoError(t, conn.Close())
				s.Stop()
				require.NoError(t, <-served)
			})
			return suiteClient{conn}
		},
		Resource: func(route string) string { return "/" + suiteService + "/" + suiteProcedures[route] },
		RPC:      true,
		Client:   true,
	})
}

type suiteClient struct{ conn *grpc.ClientConn }

func suiteContext(c adaptertest.Call) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	var kv []string
	if c.User != "" {
		kv = append(kv, "x-user", c.User)
	}
	if c.Query != "" {
		kv = append(kv, "x-q", c.Query)
	}
	if c.Caller != "" {
		kv = append(kv, "x-caller", c.Caller)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...), cancel
}

// outcome is the suite's view of a call that ended with err.
func outcome(body string, err error) adaptertest.Outcome {
	st := status.Convert(err)
	o := adaptertest.Outcome{Status: adaptertest.HTTPStatus(suiteCodes[st.Code()])}
	if err == nil {
		o.Body = body
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			o.RetryAfter = adaptertest.RetrySeconds(ri.GetRetryDelay().AsDuration())
		}
	}
	return o
}

func (s suiteClient) Do(t *testing.T, c adaptertest.Call) adaptertest.Outcome {
	t.Helper()
	ctx, cancel := suiteContext(c)
	defer cancel()
	method := "/" + suiteService + "/" + suiteProcedures[c.Route]
	if c.Route == adaptertest.RouteStream {
		cs, err := s.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method)
		if err == nil {
			require.NoError(t, cs.SendMsg(wrapperspb.String(c.Param)))
			require.NoError(t, cs.CloseSend())
			err = cs.RecvMsg(new(wrapperspb.StringValue))
		}
		return outcome("", err)
	}
	out := new(wrapperspb.StringValue)
	var header, trailer metadata.MD
	err := s.conn.Invoke(ctx, method, wrapperspb.String(c.Param), out, grpc.Header(&header), grpc.Trailer(&trailer))
	o := outcome(out.GetValue(), err)
	o.RateLimit = adaptertest.RateLimitOf(func(k string) string {
		if v := header.Get(k); len(v) > 0 {
			return v[0]
		}
		if v := trailer.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	})
	return o
}

func (s suiteClient) Open(t *testing.T) func() string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	cs, err := s.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/"+suiteService+"/Stream")
	require.NoError(t, err)
	require.NoError(t, cs.SendMsg(wrapperspb.String("")))
	require.NoError(t, cs.CloseSend())
	m := new(wrapperspb.StringValue)
	require.NoError(t, cs.RecvMsg(m))
	require.Equal(t, "first", m.GetValue())
	return func() string {
		defer cancel()
		var got []string
		for {
			m := new(wrapperspb.StringValue)
			if err := cs.RecvMsg(m); err == io.EOF {
				break
			} else {
				require.NoError(t, err)
			}
			got = append(got, m.GetValue())
		}
		require.Len(t, got, 1)
		return got[0]
	}
}
