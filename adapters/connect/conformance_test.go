package sluiceconnect_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice"
	sluiceconnect "github.com/sluice-go/sluice/adapters/connect"
	"github.com/sluice-go/sluice/adapters/connect/internal/adaptertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type msg = wrapperspb.StringValue

// procedure is the suite's route as a procedure of a service that needs no
// generated code (its messages are well-known types).
func procedure(route string) string {
	return "/sluice.test.Suite/" + map[string]string{
		adaptertest.RouteX:      "X",
		adaptertest.RouteUser:   "User",
		adaptertest.RouteStatus: "Status",
		adaptertest.RoutePanic:  "Panic",
		adaptertest.RouteStream: "Stream",
	}[route]
}

// codeOf is the connect code the suite names (adaptertest.HTTPStatus).
func codeOf(name string) connect.Code {
	for c := connect.CodeCanceled; c <= connect.CodeUnauthenticated; c++ {
		if c.String() == name {
			return c
		}
	}
	return connect.CodeInternal
}

// suiteOptions are the interceptor's options for cf.
func suiteOptions(cf adaptertest.Config) []sluiceconnect.Option {
	var opts []sluiceconnect.Option
	if p := cf.Policy; p != nil {
		rp := sluiceconnect.RefusalPolicy{OverloadRetryAfter: p.OverloadRetryAfter}
		if p.Status != nil {
			rp.Code = func(be *sluice.BlockError) connect.Code {
				if s := p.Status(be); s == 429 || s == 503 {
					return codeOf(adaptertest.CodeOf(s))
				}
				return 0
			}
		}
		opts = append(opts, sluiceconnect.WithRefusalPolicy(rp))
	}
	if f := cf.ErrorStatus; f != nil {
		var cs []connect.Code
		for c := connect.CodeCanceled; c <= connect.CodeUnauthenticated; c++ {
			if s := adaptertest.HTTPStatus(c.String()); f(s) || (s == 0 && f(500)) {
				cs = append(cs, c)
			}
		}
		opts = append(opts, sluiceconnect.WithErrorCodes(cs...))
	}
	if cf.Args {
		message := func(_ context.Context, c sluiceconnect.Call) any {
			if m, ok := c.Msg.(*msg); ok && m.GetValue() != "" {
				return m.GetValue()
			}
			return nil
		}
		opts = append(opts, sluiceconnect.WithArgs(message, sluiceconnect.Header("X-User"), sluiceconnect.Header("X-Q")))
	}
	if cf.Caller {
		opts = append(opts, sluiceconnect.WithCaller(sluiceconnect.CallerSource{Header: "X-Caller"}))
	}
	if cf.RateLimit {
		opts = append(opts, sluiceconnect.WithRateLimitHeaders(true))
	}
	return opts
}

// TestConformance runs the adapters' conformance suite (adaptertest.Run)
// on the interceptor of handlers and of clients, over the connect protocol
// on a real server.
func TestConformance(t *testing.T) {
	adaptertest.Run(t, adaptertest.Adapter{
		Start: func(t *testing.T, g *sluice.Engine, cf adaptertest.Config) adaptertest.Client {
			var hopts []connect.HandlerOption
			var clopts []connect.ClientOption
			if cf.Side == adaptertest.OnServer {
				hopts = append(hopts, connect.WithInterceptors(sluiceconnect.NewInterceptor(g, suiteOptions(cf)...)))
			} else {
				clopts = append(clopts, connect.WithInterceptors(sluiceconnect.NewInterceptor(g, suiteOptions(cf)...)))
			}
			unary := func(route string, h func(in string) (string, error)) (string, http.Handler) {
				return procedure(route), connect.NewUnaryHandler(procedure(route), func(_ context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
					out, err := h(req.Msg.GetValue())
					if err != nil {
						return nil, err
					}
					return connect.NewResponse(wrapperspb.String(out)), nil
				}, hopts...)
			}
			mux := http.NewServeMux()
			mux.Handle(unary(adaptertest.RouteX, func(string) (string, error) { return "x", nil }))
			mux.Handle(unary(adaptertest.RouteUser, func(id string) (string, error) { return "user " + id, nil }))
			mux.Handle(unary(adaptertest.RouteStatus, func(p string) (string, error) {
				return "", connect.NewError(codeOf(adaptertest.CodeOf(adaptertest.StatusParam(t, p))), errors.New("failed"))
			}))
			mux.Handle(unary(adaptertest.RoutePanic, func(string) (string, error) { panic("boom") }))
			mux.Handle(procedure(adaptertest.RouteStream), connect.NewServerStreamHandler(procedure(adaptertest.RouteStream),
				func(ctx context.Context, _ *connect.Request[msg], s *connect.ServerStream[msg]) error {
					if err := s.Send(wrapperspb.String("first")); err != nil {
						return err
					}
					select {
					case <-cf.Gate:
					case <-ctx.Done():
						return ctx.Err()
					}
					return s.Send(wrapperspb.String("last"))
				}, hopts...))
			srv, hc := adaptertest.Serve(t, mux)
			return &suiteClient{url: srv.URL, hc: hc, opts: clopts}
		},
		Resource: procedure,
		RPC:      true,
		Client:   true,
	})
}

type suiteClient struct {
	url  string
	hc   *http.Client
	opts []connect.ClientOption
}

func (s *suiteClient) client(route string) *connect.Client[msg, msg] {
	return connect.NewClient[msg, msg](s.hc, s.url+procedure(route), s.opts...)
}

func request(c adaptertest.Call) *connect.Request[msg] {
	req := connect.NewRequest(wrapperspb.String(c.Param))
	if c.User != "" {
		req.Header().Set("X-User", c.User)
	}
	if c.Query != "" {
		req.Header().Set("X-Q", c.Query)
	}
	if c.Caller != "" {
		req.Header()["X-Caller"] = []string{c.Caller}
	}
	return req
}

// outcome is the suite's view of a call that ended with err.
func outcome(body string, err error) adaptertest.Outcome {
	if err == nil {
		return adaptertest.Outcome{Status: 200, Body: body}
	}
	o := adaptertest.Outcome{Status: adaptertest.HTTPStatus(connect.CodeOf(err).String())}
	var ce *connect.Error
	if errors.As(err, &ce) {
		o.RateLimit = adaptertest.RateLimitOf(ce.Meta().Get)
		for _, d := range ce.Details() {
			if v, derr := d.Value(); derr == nil {
				if ri, ok := v.(*errdetails.RetryInfo); ok {
					o.RetryAfter = adaptertest.RetrySeconds(ri.GetRetryDelay().AsDuration())
				}
			}
		}
	}
	return o
}

func (s *suiteClient) Do(t *testing.T, c adaptertest.Call) adaptertest.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c.Route == adaptertest.RouteStream {
		st, err := s.client(c.Route).CallServerStream(ctx, request(c))
		if err != nil {
			return outcome("", err)
		}
		defer st.Close()
		if st.Receive() {
			return outcome(st.Msg().GetValue(), nil)
		}
		return outcome("", st.Err())
	}
	resp, err := s.client(c.Route).CallUnary(ctx, request(c))
	if err != nil {
		return outcome("", err)
	}
	o := outcome(resp.Msg.GetValue(), nil)
	o.RateLimit = adaptertest.RateLimitOf(resp.Header().Get)
	return o
}

func (s *suiteClient) Open(t *testing.T) func() string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	st, err := s.client(adaptertest.RouteStream).CallServerStream(ctx, connect.NewRequest(wrapperspb.String("")))
	require.NoError(t, err)
	require.True(t, st.Receive(), "first message: %v", st.Err())
	require.Equal(t, "first", st.Msg().GetValue())
	return func() string {
		defer cancel()
		var got []string
		for st.Receive() {
			got = append(got, st.Msg().GetValue())
		}
		require.NoError(t, st.Err())
		require.NoError(t, st.Close())
		require.Len(t, got, 1)
		return got[0]
	}
}
