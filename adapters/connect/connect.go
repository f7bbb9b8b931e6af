package sluiceconnect

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"

	"connectrpc.com/connect"

	"github.com/sluice-go/sluice"
)

// ErrHandlerPanic is the error recorded on the entry of a call whose
// handler (or, on a client, the call) panicked.
var ErrHandlerPanic = errors.New("sluiceconnect: handler panicked")

// Call is what an ArgFunc may read of a call.
type Call struct {
	Spec connect.Spec
	Peer connect.Peer
	// Header is the request's header: on a server, the client's; on a
	// client, what the caller set on a unary request, and nil for a stream
	// (its entry is asked before the caller can set any).
	Header http.Header
	// Msg is the request message of a unary call, nil for a stream.
	Msg any
}

// ArgFunc extracts one argument for param rules from a call. A nil result
// means the call has no value for it.
type ArgFunc func(ctx context.Context, c Call) any

// Header extracts the first value of the named request header as a string,
// or nil when it is absent or empty.
func Header(name string) ArgFunc {
	key := http.CanonicalHeaderKey(name)
	return func(_ context.Context, c Call) any {
		if v := c.Header.Get(key); v != "" {
			return v
		}
		return nil
	}
}

// PeerIP extracts the IP address of the peer a server call comes from, as
// a string, or nil when it is unknown.
func PeerIP() ArgFunc {
	return func(_ context.Context, c Call) any {
		if c.Spec.IsClient || c.Peer.Addr == "" {
			return nil
		}
		host, _, err := net.SplitHostPort(c.Peer.Addr)
		if err != nil {
			host = c.Peer.Addr
		}
		if host == "" {
			return nil
		}
		return host
	}
}

// Option configures an Interceptor.
type Option func(*config)

type config struct {
	name   func(ctx context.Context, spec connect.Spec) string
	args   []ArgFunc
	block  BlockFunc // nil: policy's
	policy RefusalPolicy
	codes  uint32 // bit c set: code c is recorded as an error
	// rateLimit and xRateLimit: WithRateLimitHeaders.
	rateLimit, xRateLimit bool
	caller                func(ctx context.Context, c Call) string
}

// WithResourceName names each call's resource with f instead of its
// procedure ("/pkg.Service/Method"). If f returns "", the call goes through
// without any entry.
func WithResourceName(f func(ctx context.Context, spec connect.Spec) string) Option {
	return func(cf *config) { cf.name = f }
}

// WithArgs passes, for param rules, the values the extractors give, in
// order, as the entry's positional arguments (sluice.WithArgs). Later calls
// append.
func WithArgs(extractors ...ArgFunc) Option {
	return func(cf *config) { cf.args = append(cf.args, extractors...) }
}

// WithErrorCodes sets the codes that are recorded on the entry as errors,
// replacing the default set (Unknown, DeadlineExceeded, Unimplemented,
// Internal, Unavailable, DataLoss: the server failed, not the caller). An
// empty list records no errors.
func WithErrorCodes(cs ...connect.Code) Option {
	return func(cf *config) {
		cf.codes = 0
		for _, c := range cs {
			if c > 0 && c < 32 {
				cf.codes |= 1 << c
			}
		}
	}
}

const defaultCodes = 1<<connect.CodeUnknown | 1<<connect.CodeDeadlineExceeded | 1<<connect.CodeUnimplemented |
	1<<connect.CodeInternal | 1<<connect.CodeUnavailable | 1<<connect.CodeDataLoss

// record sets err on p when its code is one of the error codes. An error
// that is not a *connect.Error is CodeUnknown.
func (cf *config) record(p sluice.Pass, err error) {
	if err == nil {
		return
	}
	if c := connect.CodeOf(err); c < 32 && cf.codes&(1<<c) != 0 {
		p.SetError(err)
	}
}

// maxStackArgs is how many extracted arguments live on the stack.
const maxStackArgs = 4

// Interceptor is a connect.Interceptor that runs each call through an
// entry of its engine: handlers' calls inbound, clients' outbound. Give it
// to handlers and clients with connect.WithInterceptors.
type Interceptor struct {
	g  *sluice.Engine
	cf config
}

var _ connect.Interceptor = (*Interceptor)(nil)

// NewInterceptor returns an interceptor on g (nil means the default engine,
// looked up on each call). It is safe for concurrent use.
func NewInterceptor(g *sluice.Engine, opts ...Option) *Interceptor {
	i := &Interceptor{g: g, cf: config{codes: defaultCodes}}
	for _, o := range opts {
		o(&i.cf)
	}
	return i
}

func (i *Interceptor) resource(ctx context.Context, spec connect.Spec) string {
	if i.cf.name != nil {
		return i.cf.name(ctx, spec)
	}
	return spec.Procedure
}

// enter asks for the call's entry, and its budget into b when b is not
// nil. The options and the extracted arguments stay in this frame.
func (i *Interceptor) enter(ctx context.Context, name string, c *Call, b *sluice.Budget) (sluice.Pass, error) {
	var (
		ob  [4]sluice.EntryOption
		buf [maxStackArgs]any
	)
	traffic := sluice.Inbound
	if c.Spec.IsClient {
		traffic = sluice.Outbound
	}
	ob[0] = sluice.WithTraffic(traffic)
	n := 1
	if b != nil {
		ob[n] = sluice.WithBudget(b)
		n++
	}
	if i.cf.caller != nil {
		ob[n] = sluice.WithCaller(i.cf.caller(ctx, *c))
		n++
	}
	if len(i.cf.args) > 0 {
		args := buf[:0]
		for _, f := range i.cf.args {
			args = append(args, f(ctx, *c))
		}
		ob[n] = sluice.WithArgs(args...)
		n++
	}
	eo := ob[:n]
	if i.g == nil {
		return sluice.EntryContext(ctx, name, eo...)
	}
	return i.g.EntryContext(ctx, name, eo...)
}

// guard runs call inside an entry of the call's resource, for the calls
// whose entry ends when call returns (unary calls, handlers' streams). It
// returns call's error, or the refusal's without calling call. A call the
// resource name skips, or that meets an Entry error other than a block (a
// closed engine), runs unguarded. When call panics, the entry exits with
// ErrHandlerPanic and the panic goes on. A caller no entry may carry ends
// the call with CodeInvalidArgument, never failing open. With b (a
// handler's call under WithRateLimitHeaders), the entry's budget goes into
// *b.
func (i *Interceptor) guard(ctx context.Context, c *Call, b *sluice.Budget, call func() error) (err error) {
	name := i.resource(ctx, c.Spec)
	if name == "" {
		return call()
	}
	p, eer := i.enter(ctx, name, c, b)
	if eer != nil {
		if err := i.cf.notEntered(ctx, c.Spec, eer); err != nil {
			return err
		}
		return call() // fail open
	}
	done := false
	defer func() {
		if !done {
			p.SetError(ErrHandlerPanic)
		} else {
			i.cf.record(p, err)
		}
		p.Exit()
	}()
	err = call()
	done = true
	return err
}

// WrapUnary implements connect.Interceptor: unary calls, of handlers and
// clients.
func (i *Interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (resp connect.AnyResponse, err error) {
		c := Call{Spec: req.Spec(), Peer: req.Peer(), Header: req.Header(), Msg: req.Any()}
		var budget sluice.Budget
		b := i.budget(c.Spec, &budget)
		err = i.guard(ctx, &c, b, func() (cerr error) {
			resp, cerr = next(ctx, req)
			return cerr
		})
		switch {
		case b == nil:
		case c.Spec.IsClient:
			i.tellClient(resp, err, b)
		case err != nil:
			setErrorFields(err, b, i.cf.xRateLimit)
		case resp != nil:
			setRateLimitFields(resp.Header(), b, i.cf.xRateLimit)
		}
		return resp, err
	}
}

// WrapStreamingHandler implements connect.Interceptor: a handler's stream
// holds its entry until the handler returns.
func (i *Interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		c := Call{Spec: conn.Spec(), Peer: conn.Peer(), Header: conn.RequestHeader()}
		var budget sluice.Budget
		b := i.budget(c.Spec, &budget)
		err := i.guard(ctx, &c, b, func() error {
			if b != nil {
				setRateLimitFields(conn.ResponseHeader(), b, i.cf.xRateLimit)
			}
			return next(ctx, conn)
		})
		if b != nil && err != nil {
			setErrorFields(err, b, i.cf.xRateLimit)
		}
		return err
	}
}

// WrapStreamingClient implements connect.Interceptor: a client's stream
// holds its entry until it ends: Receive fails (io.EOF included) or
// CloseResponse is called, as connect asks of every caller. A refused
// stream fails its first Send and Receive with the refusal.
func (i *Interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		name := i.resource(ctx, spec)
		if name == "" {
			return next(ctx, spec)
		}
		c := Call{Spec: spec}
		var budget sluice.Budget
		b := i.budget(spec, &budget)
		p, eer := i.enter(ctx, name, &c, b)
		if eer != nil {
			if err := i.cf.notEntered(ctx, spec, eer); err != nil {
				if b != nil {
					i.tellClient(nil, err, b)
				}
				return &refusedConn{spec: spec, err: err, header: http.Header{}}
			}
			return next(ctx, spec)
		}
		s := &clientConn{cf: &i.cf, p: p}
		done := false
		defer func() {
			if !done {
				s.finish(ErrHandlerPanic, true)
			}
		}()
		s.StreamingClientConn = next(ctx, spec)
		done = true
		return s
	}
}

// clientConn holds a client stream's entry until the stream ends.
type clientConn struct {
	connect.StreamingClientConn
	cf   *config
	p    sluice.Pass
	once sync.Once
}

// finish exits the entry once, recording err when it counts (always with
// force).
func (s *clientConn) finish(err error, force bool) {
	s.once.Do(func() {
		switch {
		case force:
			s.p.SetError(err)
		case err != nil && !errors.Is(err, io.EOF):
			s.cf.record(s.p, err)
		}
		s.p.Exit()
	})
}

// Receive receives a message and ends the entry when the stream has ended.
func (s *clientConn) Receive(m any) error {
	err := s.StreamingClientConn.Receive(m)
	if err != nil {
		s.finish(err, false)
	}
	return err
}

// CloseResponse closes the stream and ends the entry.
func (s *clientConn) CloseResponse() error {
	err := s.StreamingClientConn.CloseResponse()
	s.finish(nil, false)
	return err
}

// refusedConn is a client stream that sluice refused: nothing is sent.
type refusedConn struct {
	spec   connect.Spec
	err    error
	header http.Header
}

func (r *refusedConn) Spec() connect.Spec           { return r.spec }
func (r *refusedConn) Peer() connect.Peer           { return connect.Peer{} }
func (r *refusedConn) Send(any) error               { return r.err }
func (r *refusedConn) RequestHeader() http.Header   { return r.header }
func (r *refusedConn) CloseRequest() error          { return nil }
func (r *refusedConn) Receive(any) error            { return r.err }
func (r *refusedConn) ResponseHeader() http.Header  { return http.Header{} }
func (r *refusedConn) ResponseTrailer() http.Header { return http.Header{} }
func (r *refusedConn) CloseResponse() error         { return nil }
