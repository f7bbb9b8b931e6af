package sluicegrpc_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice"
	sluicegrpc "github.com/sluice-go/sluice/adapters/grpc"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
	"github.com/sluice-go/sluice/stat"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	unaryMethod  = "/sluice.test.Echo/Unary"
	bidiMethod   = "/sluice.test.Echo/Bidi"
	uploadMethod = "/sluice.test.Echo/Upload"
)

var (
	bidiDesc   = &grpc.StreamDesc{StreamName: "Bidi", ServerStreams: true, ClientStreams: true}
	uploadDesc = &grpc.StreamDesc{StreamName: "Upload", ClientStreams: true}
)

// echo is the test service; each test sets the handlers it needs. Without
// them, Unary echoes and the streams echo until the client closes.
type echo struct {
	unary func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
	bidi  func(ss grpc.ServerStream) error
}

func (e *echo) handleUnary(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	if e.unary != nil {
		return e.unary(ctx, in)
	}
	return in, nil
}

func (e *echo) handleStream(ss grpc.ServerStream) error {
	if e.bidi != nil {
		return e.bidi(ss)
	}
	return echoUntilEOF(ss)
}

func echoUntilEOF(ss grpc.ServerStream) error {
	for {
		in := new(wrapperspb.StringValue)
		if err := ss.RecvMsg(in); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if err := ss.SendMsg(in); err != nil {
			return err
		}
	}
}

// serviceDesc is a hand-written service over well-known message types, so
// the tests need no generated code.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: "sluice.test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Unary",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icp grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return srv.(*echo).handleUnary(ctx, req.(*wrapperspb.StringValue))
			}
			if icp == nil {
				return h(ctx, in)
			}
			return icp(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: unaryMethod}, h)
		},
	}},
	Streams: []grpc.StreamDesc{
		{StreamName: "Bidi", ServerStreams: true, ClientStreams: true, Handler: streamHandler},
		{StreamName: "Upload", ClientStreams: true, Handler: streamHandler},
	},
}

func streamHandler(srv any, ss grpc.ServerStream) error { return srv.(*echo).handleStream(ss) }

// recovery turns handler panics into codes.Internal, as recovery
// middleware does.
func recoveryUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = status.Errorf(codes.Internal, "panic: %v", v)
		}
	}()
	return h(ctx, req)
}

func recoveryStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = status.Errorf(codes.Internal, "panic: %v", v)
		}
	}()
	return h(srv, ss)
}

type fixture struct {
	srv, cli *sluice.Engine // engines of the server and client interceptors
	cliClk   *sluicetest.ManualClock
	svc      *echo
	conn     *grpc.ClientConn
}

// start runs the echo service on 127.0.0.1 with recovery and the server
// interceptors of one engine, and dials it with the client interceptors of
// another. Options apply to all four interceptors.
func start(t *testing.T, opts ...sluicegrpc.Option) *fixture {
	t.Helper()
	f := &fixture{svc: &echo{}}
	f.srv = sluice.New(sluice.WithClock(sluicetest.NewManualClock(int64(time.Hour))))
	f.cliClk = sluicetest.NewManualClock(int64(time.Hour))
	f.cli = sluice.New(sluice.WithClock(f.cliClk))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := grpc.NewServer(
		grpc.ChainUnaryInterceptor(recoveryUnary, sluicegrpc.UnaryServerInterceptor(f.srv, opts...)),
		grpc.ChainStreamInterceptor(recoveryStream, sluicegrpc.StreamServerInterceptor(f.srv, opts...)),
	)
	s.RegisterService(&serviceDesc, f.svc)
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	f.conn, err = grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(sluicegrpc.UnaryClientInterceptor(f.cli, opts...)),
		grpc.WithStreamInterceptor(sluicegrpc.StreamClientInterceptor(f.cli, opts...)),
	)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, f.conn.Close())
		s.Stop()
		require.NoError(t, <-served)
		require.NoError(t, f.srv.Close())
		require.NoError(t, f.cli.Close())
	})
	return f
}

func (f *fixture) call(t *testing.T, ctx context.Context, msg string) (string, error) {
	t.Helper()
	out := new(wrapperspb.StringValue)
	err := f.conn.Invoke(ctx, unaryMethod, wrapperspb.String(msg), out)
	return out.GetValue(), err
}

func snapshot(t *testing.T, g *sluice.Engine, resource string) (pass, block, errs uint64, conc int64) {
	t.Helper()
	s, ok := g.Snapshot(resource)
	require.True(t, ok, "Snapshot(%q) not tracked", resource)
	return s.TotalPass, s.TotalBlock, s.TotalError, s.Concurrency
}

func TestUnaryFlowRule(t *testing.T) {
	for _, side := range []string{"server", "client"} {
		t.Run(side, func(t *testing.T) {
			f := start(t)
			g := map[string]*sluice.Engine{"server": f.srv, "client": f.cli}[side]
			err := g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: unaryMethod, Threshold: 2}}})
			require.NoError(t, err)
			served := 0
			f.svc.unary = func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
				served++
				return in, nil
			}
			tests := []struct {
				give     string
				wantCode codes.Code
			}{
				{"a", codes.OK},
				{"b", codes.OK},
				{"c", codes.ResourceExhausted},
				{"d", codes.ResourceExhausted},
			}
			for _, tt := range tests {
				got, err := f.call(t, context.Background(), tt.give)
				require.Equal(t, tt.wantCode, status.Code(err), "call(%q) = %v", tt.give, err)
				if tt.wantCode != codes.OK {
					var ri *errdetails.RetryInfo
					for _, d := range status.Convert(err).Details() {
						if x, ok := d.(*errdetails.RetryInfo); ok {
							ri = x
						}
					}
					require.NotNil(t, ri, "a QPS block carries RetryInfo")
					assert.Positive(t, ri.GetRetryDelay().AsDuration())
					continue
				}
				assert.Equal(t, tt.give, got)
			}
			assert.Equal(t, 2, served, "blocked calls never reach the handler")
			pass, block, _, conc := snapshot(t, g, unaryMethod)
			assert.Equal(t, uint64(2), pass)
			assert.Equal(t, uint64(2), block)
			assert.Zero(t, conc)
		})
	}
}

func TestTrafficTypes(t *testing.T) {
	f := start(t)
	// A shadow system rule that nothing reaches: inbound entries are
	// counted engine-wide from now on, and nothing is refused.
	watch := rules.Set{System: []rules.System{{Metric: rules.InboundQPS, Threshold: 1e12, Shadow: true}}}
	require.NoError(t, f.srv.LoadRules(watch))
	require.NoError(t, f.cli.LoadRules(watch))
	_, err := f.call(t, context.Background(), "x")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), f.srv.SystemMetrics().Inbound.TotalPass, "the server side is inbound")
	assert.Zero(t, f.cli.SystemMetrics().Inbound.TotalPass, "the client side is outbound")
	pass, _, _, _ := snapshot(t, f.cli, unaryMethod)
	assert.Equal(t, uint64(1), pass)
}

// openBidi opens a bidi stream and round-trips one message, so the server
// handler is running when it returns.
func openBidi(t *testing.T, ctx context.Context, conn *grpc.ClientConn) grpc.ClientStream {
	t.Helper()
	cs, err := conn.NewStream(ctx, bidiDesc, bidiMethod)
	require.NoError(t, err)
	require.NoError(t, cs.SendMsg(wrapperspb.String("hello")))
	got := new(wrapperspb.StringValue)
	require.NoError(t, cs.RecvMsg(got))
	require.Equal(t, "hello", got.GetValue())
	return cs
}

func closeAndDrain(t *testing.T, cs grpc.ClientStream) {
	t.Helper()
	require.NoError(t, cs.CloseSend())
	require.ErrorIs(t, cs.RecvMsg(new(wrapperspb.StringValue)), io.EOF)
}

func TestServerStreamHeldUntilHandlerReturns(t *testing.T) {
	f := start(t)
	err := f.srv.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: bidiMethod, Metric: rules.Concurrency, Threshold: 1}}})
	require.NoError(t, err)
	ctx := context.Background()

	first := openBidi(t, ctx, f.conn)
	_, _, _, conc := snapshot(t, f.srv, bidiMethod)
	assert.Equal(t, int64(1), conc, "an open stream is in flight")

	second, err := f.conn.NewStream(ctx, bidiDesc, bidiMethod)
	require.NoError(t, err, "the client side has no rule")
	err = second.RecvMsg(new(wrapperspb.StringValue))
	assert.Equal(t, codes.Unavailable, status.Code(err), "second stream, over a concurrency limit: %v", err)

	closeAndDrain(t, first)
	_, block, _, conc := snapshot(t, f.srv, bidiMethod)
	assert.Zero(t, conc, "the stream's entry exits when its handler returns")
	assert.Equal(t, uint64(1), block)

	closeAndDrain(t, openBidi(t, ctx, f.conn)) // admitted again
}

func TestClientStreamHeldUntilStreamEnds(t *testing.T) {
	tests := []struct {
		name       string
		upload     bool // a client-streaming call with one response
		serverFail bool
		// end finishes the stream opened by open.
		open    func(t *testing.T, ctx context.Context, conn *grpc.ClientConn) grpc.ClientStream
		end     func(t *testing.T, cs grpc.ClientStream, cancel context.CancelFunc)
		async   bool // nothing reads the stream after its end
		wantErr uint64
	}{
		{
			name: "CloseSend and Recv to EOF",
			open: openBidi,
			end:  func(t *testing.T, cs grpc.ClientStream, _ context.CancelFunc) { closeAndDrain(t, cs) },
		},
		{
			name:       "server error",
			serverFail: true,
			open:       openBidi,
			end: func(t *testing.T, cs grpc.ClientStream, _ context.CancelFunc) {
				require.NoError(t, cs.SendMsg(wrapperspb.String("fail")))
				err := cs.RecvMsg(new(wrapperspb.StringValue))
				require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
			},
			wantErr: 1,
		},
		{
			name: "context cancelled, never read",
			open: openBidi,
			end: func(t *testing.T, cs grpc.ClientStream, cancel context.CancelFunc) {
				cancel()
			},
			async: true,
		},
		{
			name:   "client streaming: CloseSend and the one response",
			upload: true,
			open: func(t *testing.T, ctx context.Context, conn *grpc.ClientConn) grpc.ClientStream {
				cs, err := conn.NewStream(ctx, uploadDesc, uploadMethod)
				require.NoError(t, err)
				require.NoError(t, cs.SendMsg(wrapperspb.String("part")))
				return cs
			},
			end: func(t *testing.T, cs grpc.ClientStream, _ context.CancelFunc) {
				require.NoError(t, cs.CloseSend())
				got := new(wrapperspb.StringValue)
				require.NoError(t, cs.RecvMsg(got)) // no further Recv: the stream is over
				require.Equal(t, "parts", got.GetValue())
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := start(t)
			f.svc.bidi = func(ss grpc.ServerStream) error {
				for {
					in := new(wrapperspb.StringValue)
					if err := ss.RecvMsg(in); err == io.EOF {
						if tt.upload {
							return ss.SendMsg(wrapperspb.String("parts"))
						}
						return nil
					} else if err != nil {
						return err
					}
					if tt.serverFail && in.GetValue() == "fail" {
						return status.Error(codes.Unavailable, "down")
					}
					if tt.upload {
						continue
					}
					if err := ss.SendMsg(in); err != nil {
						return err
					}
				}
			}
			res := bidiMethod
			if tt.upload {
				res = uploadMethod
			}
			err := f.cli.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: res, Metric: rules.Concurrency, Threshold: 1}}})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()

			cs := tt.open(t, ctx, f.conn)
			_, _, _, conc := snapshot(t, f.cli, res)
			require.Equal(t, int64(1), conc, "an open stream is in flight")
			desc := bidiDesc
			if res == uploadMethod {
				desc = uploadDesc
			}
			_, err = f.conn.NewStream(context.Background(), desc, res)
			require.Equal(t, codes.Unavailable, status.Code(err), "a second stream is refused at creation: %v", err)

			tt.end(t, cs, cancel)
			if tt.async {
				// Nothing reads the cancelled stream: the next stream
				// on the resource ends its entry before taking its own.
				closeAndDrain(t, openBidi(t, context.Background(), f.conn))
			}
			_, _, errs, conc := snapshot(t, f.cli, res)
			assert.Zero(t, conc, "the entry exits when the stream ends")
			assert.Equal(t, tt.wantErr, errs)
		})
	}
}

// TestClientStreamCancelReleasesBeforeNextStream cancels an open stream
// under a client concurrency limit of one and opens the next one at once,
// without touching the cancelled stream again: every reopen must be
// admitted. The cancelled stream's entry must have exited by the time the
// next stream asks for its own, whichever way the context ended.
func TestClientStreamCancelReleasesBeforeNextStream(t *testing.T) {
	const rounds = 200
	tests := []struct {
		name string
		// open returns a context for one stream and the function that ends it.
		open func() (context.Context, context.CancelFunc)
	}{
		{"cancel the stream's context", func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background())
		}},
		{"cancel a parent context", func() (context.Context, context.CancelFunc) {
			parent, cancelParent := context.WithCancel(context.Background())
			ctx, cancel := context.WithCancel(parent)
			return metadata.AppendToOutgoingContext(ctx, "k", "v"), func() {
				cancelParent() // ends ctx
				cancel()
			}
		}},
		{"cancel with a cause", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancelCause(context.Background())
			return ctx, func() { cancel(errors.New("caller gave up")) }
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := start(t)
			err := f.cli.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: bidiMethod, Metric: rules.Concurrency, Threshold: 1}}})
			require.NoError(t, err)
			refused := 0
			for i := 0; i < rounds; i++ {
				ctx, cancel := tt.open()
				cs, err := f.conn.NewStream(ctx, bidiDesc, bidiMethod)
				if err != nil {
					cancel()
					require.Equal(t, codes.Unavailable, status.Code(err), "round %d: %v", i, err)
					refused++
					continue
				}
				require.NoError(t, cs.SendMsg(wrapperspb.String("hello")))
				cancel() // and never read: the next round opens another stream at once
			}
			assert.Zero(t, refused, "reopens refused out of %d", rounds)
			closeAndDrain(t, openBidi(t, context.Background(), f.conn))
			pass, block, errs, conc := snapshot(t, f.cli, bidiMethod)
			assert.Equal(t, uint64(rounds+1), pass)
			assert.Zero(t, block)
			assert.Zero(t, errs, "a cancelled stream is not a failure")
			assert.Zero(t, conc)
		})
	}
}

// TestClientStreamCancelReleasesWithManyOpen is the same with more streams
// open on the resource than a new stream looks through before asking for
// its entry: the refused first ask looks through them all and asks again, so
// no reopen is refused; the engine may count that first refusal.
func TestClientStreamCancelReleasesWithManyOpen(t *testing.T) {
	const (
		limit  = 70 // more than the look-ahead
		rounds = 50
	)
	f := start(t)
	err := f.cli.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: bidiMethod, Metric: rules.Concurrency, Threshold: limit}}})
	require.NoError(t, err)
	cancels := make([]context.CancelFunc, 0, limit+rounds)
	t.Cleanup(func() {
		for _, c := range cancels {
			c()
		}
	})
	for range limit {
		ctx, cancel := context.WithCancel(context.Background())
		cancels = append(cancels, cancel)
		openBidi(t, ctx, f.conn)
	}
	_, err = f.conn.NewStream(context.Background(), bidiDesc, bidiMethod)
	require.Equal(t, codes.Unavailable, status.Code(err), "the limit is reached: %v", err)
	for i := range rounds {
		cancels[i]()
		ctx, cancel := context.WithCancel(context.Background())
		cancels = append(cancels, cancel)
		_, err := f.conn.NewStream(ctx, bidiDesc, bidiMethod)
		require.NoError(t, err, "round %d", i)
	}
	pass, block, _, conc := snapshot(t, f.cli, bidiMethod)
	assert.Equal(t, uint64(limit+rounds), pass)
	assert.LessOrEqual(t, block, uint64(1+rounds), "the check at the limit, and at most one first ask per round")
	assert.Equal(t, int64(limit), conc)
}

// TestClientStreamSendErrorEndsEntry: a SendMsg error other than io.EOF
// means gRPC aborted the stream; its entry exits before SendMsg returns.
func TestClientStreamSendErrorEndsEntry(t *testing.T) {
	f := start(t)
	cs, err := f.conn.NewStream(context.Background(), bidiDesc, bidiMethod)
	require.NoError(t, err)
	_, _, _, conc := snapshot(t, f.cli, bidiMethod)
	require.Equal(t, int64(1), conc)
	err = cs.SendMsg("not a protobuf message") // the codec refuses it on the client
	require.Error(t, err)
	require.NotErrorIs(t, err, io.EOF)
	pass, _, _, conc := snapshot(t, f.cli, bidiMethod)
	assert.Equal(t, uint64(1), pass)
	assert.Zero(t, conc, "the aborted stream's entry has exited")
}

func TestPanicWithRecoveryExitsEntry(t *testing.T) {
	f := start(t)
	f.svc.unary = func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) { panic("boom") }
	f.svc.bidi = func(grpc.ServerStream) error { panic("boom") }

	_, err := f.call(t, context.Background(), "x")
	assert.Equal(t, codes.Internal, status.Code(err), "%v", err)
	cs, err := f.conn.NewStream(context.Background(), bidiDesc, bidiMethod)
	require.NoError(t, err)
	err = cs.RecvMsg(new(wrapperspb.StringValue))
	assert.Equal(t, codes.Internal, status.Code(err), "%v", err)

	for _, res := range []string{unaryMethod, bidiMethod} {
		for _, side := range []*sluice.Engine{f.srv, f.cli} {
			pass, _, errs, conc := snapshot(t, side, res)
			assert.Equal(t, uint64(1), pass, res)
			assert.Equal(t, uint64(1), errs, "%s: the panic (server) and Internal (client) are errors", res)
			assert.Zero(t, conc, "%s: a panic must release concurrency", res)
		}
	}
}

func TestErrorCodes(t *testing.T) {
	tests := []struct {
		name    string
		give    codes.Code
		opts    []sluicegrpc.Option
		wantErr uint64
	}{
		{"OK", codes.OK, nil, 0},
		{"NotFound is the caller's", codes.NotFound, nil, 0},
		{"InvalidArgument is the caller's", codes.InvalidArgument, nil, 0},
		{"Unavailable", codes.Unavailable, nil, 1},
		{"Internal", codes.Internal, nil, 1},
		{"DeadlineExceeded", codes.DeadlineExceeded, nil, 1},
		{"WithErrorCodes adds NotFound", codes.NotFound, []sluicegrpc.Option{sluicegrpc.WithErrorCodes(codes.NotFound)}, 1},
		{"WithErrorCodes drops Internal", codes.Internal, []sluicegrpc.Option{sluicegrpc.WithErrorCodes(codes.NotFound)}, 0},
		{"WithErrorCodes none", codes.Internal, []sluicegrpc.Option{sluicegrpc.WithErrorCodes()}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := start(t, tt.opts...)
			f.svc.unary = func(_ context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
				if tt.give == codes.OK {
					return in, nil
				}
				return nil, status.Error(tt.give, "failed")
			}
			_, err := f.call(t, context.Background(), "x")
			require.Equal(t, tt.give, status.Code(err))
			for _, g := range []*sluice.Engine{f.srv, f.cli} {
				_, _, errs, _ := snapshot(t, g, unaryMethod)
				assert.Equal(t, tt.wantErr, errs)
			}
		})
	}
}

func TestResourceNameAndBlockFunc(t *testing.T) {
	name := func(_ context.Context, method string) string {
		if method == uploadMethod {
			return "" // unguarded
		}
		return "echo"
	}
	var seen *sluice.BlockError
	block := func(_ context.Context, method string, err error) error {
		require.ErrorAs(t, err, &seen)
		return status.Error(codes.Unavailable, "shed "+method)
	}
	f := start(t, sluicegrpc.WithResourceName(name), sluicegrpc.WithBlockFunc(block))
	err := f.srv.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "echo", Threshold: 1}}})
	require.NoError(t, err)
	_, err = f.call(t, context.Background(), "x")
	require.NoError(t, err)
	_, err = f.call(t, context.Background(), "x")
	assert.Equal(t, status.Error(codes.Unavailable, "shed "+unaryMethod).Error(), err.Error())
	require.NotNil(t, seen)
	assert.Equal(t, "echo", seen.Resource)
	assert.Equal(t, 1, resources(f.srv), "every method is the one resource, the upload is unguarded")
}

func TestArgExtractors(t *testing.T) {
	f := start(t)
	var got []any
	f.svc.unary = func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		got = []any{
			sluicegrpc.Metadata("tenant")(ctx, unaryMethod, in),
			sluicegrpc.Metadata("absent")(ctx, unaryMethod, in),
			sluicegrpc.PeerIP()(ctx, unaryMethod, in),
		}
		return in, nil
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "tenant", "acme")
	_, err := f.call(t, ctx, "x")
	require.NoError(t, err)
	assert.Equal(t, []any{"acme", nil, "127.0.0.1"}, got)
	assert.Equal(t, "acme", sluicegrpc.Metadata("tenant")(ctx, unaryMethod, nil), "clients read outgoing metadata")
	assert.Nil(t, sluicegrpc.PeerIP()(ctx, unaryMethod, nil))
}

func TestClosedEngineFailsOpen(t *testing.T) {
	f := start(t)
	require.NoError(t, f.srv.Close())
	require.NoError(t, f.cli.Close())
	got, err := f.call(t, context.Background(), "x")
	require.NoError(t, err)
	assert.Equal(t, "x", got)
}

// resources counts the resources the engine tracks.
func resources(g *sluice.Engine) int {
	n := 0
	g.Each(func(string, stat.Snapshot) { n++ })
	return n
}
