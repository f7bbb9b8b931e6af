package sluicegrpc

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice"
)

// ErrHandlerPanic is the error recorded on the entry of a call whose handler
// (or invoker) panicked.
var ErrHandlerPanic = errors.New("sluicegrpc: handler panicked")

// ArgFunc extracts one argument for param rules from a call. req is the
// request message of a unary call and nil for a stream. A nil result means
// the call has no value for it.
type ArgFunc func(ctx context.Context, method string, req any) any

// Metadata extracts the first value of the metadata key (lower-case, as
// gRPC keys are) as a string: from the incoming metadata on a server, from
// the outgoing metadata on a client. It gives nil when the key is absent.
func Metadata(key string) ArgFunc {
	return func(ctx context.Context, _ string, _ any) any {
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if v := md.Get(key); len(v) > 0 {
				return v[0]
			}
		}
		if md, ok := metadata.FromOutgoingContext(ctx); ok {
			if v := md.Get(key); len(v) > 0 {
				return v[0]
			}
		}
		return nil
	}
}

// PeerIP extracts the IP address of the peer a server call comes from, as a
// string, or nil when it is unknown or not an IP address.
func PeerIP() ArgFunc {
	return func(ctx context.Context, _ string, _ any) any {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return nil
		}
		switch a := p.Addr.(type) {
		case *net.TCPAddr:
			return a.IP.String()
		}
		if host, _, err := net.SplitHostPort(p.Addr.String()); err == nil && host != "" {
			return host
		}
		return nil
	}
}

// BlockFunc returns the error a refused call ends with. err matches
// sluice.ErrBlocked; errors.As gives the *sluice.BlockError. A nil result
// is replaced by DefaultBlockFunc's.
type BlockFunc func(ctx context.Context, method string, err error) error

// DefaultBlockFunc is the block func used without WithBlockFunc: a
// codes.ResourceExhausted status carrying err's message and, when the block
// error's RetryAfter is positive, a google.rpc.RetryInfo detail with that
// delay.
func DefaultBlockFunc(_ context.Context, _ string, err error) error {
	st := status.New(codes.ResourceExhausted, err.Error())
	var be *sluice.BlockError
	if errors.As(err, &be) && be.RetryAfter > 0 {
		if d, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(be.RetryAfter)}); derr == nil {
			st = d
		}
	}
	return st.Err()
}

// Option configures an interceptor.
type Option func(*config)

type config struct {
	traffic sluice.TrafficType // of the interceptor's entries
	name    func(ctx context.Context, method string) string
	args    []ArgFunc
	block   BlockFunc
	codes   uint32 // bit c set: code c is recorded as an error
}

// WithResourceName names each call's resource with f instead of its full
// method. If f returns "", the call goes through without any entry.
func WithResourceName(f func(ctx context.Context, method string) string) Option {
	return func(cf *config) { cf.name = f }
}

// WithArgs passes, for param rules, the values the extractors give, in order,
// as the entry's positional arguments (sluice.WithArgs). Later calls append.
func WithArgs(extractors ...ArgFunc) Option {
	return func(cf *config) { cf.args = append(cf.args, extractors...) }
}

// WithBlockFunc replaces DefaultBlockFunc as the error of refused calls.
func WithBlockFunc(f BlockFunc) Option {
	return func(cf *config) { cf.block = f }
}

// WithErrorCodes sets the status codes that are recorded on the entry as
// errors, replacing the default set (Unknown, DeadlineExceeded,
// Unimplemented, Internal, Unavailable, DataLoss). codes.OK is ignored; an
// empty list records no errors.
func WithErrorCodes(cs ...codes.Code) Option {
	return func(cf *config) {
		cf.codes = 0
		for _, c := range cs {
			if c != codes.OK && c < 32 {
				cf.codes |= 1 << c
			}
		}
	}
}

const defaultCodes = 1<<codes.Unknown | 1<<codes.DeadlineExceeded | 1<<codes.Unimplemented |
	1<<codes.Internal | 1<<codes.Unavailable | 1<<codes.DataLoss

func newConfig(traffic sluice.TrafficType, opts []Option) *config {
	cf := &config{traffic: traffic, block: DefaultBlockFunc, codes: defaultCodes}
	for _, o := range opts {
		o(cf)
	}
	if cf.block == nil {
		cf.block = DefaultBlockFunc
	}
	return cf
}

// record sets err on p when its status code is one of the error codes.
func (cf *config) record(p *sluice.Pass, err error) {
	if err == nil {
		return
	}
	if c := status.Code(err); c < 32 && cf.codes&(1<<c) != 0 {
		p.SetError(err)
	}
}

// blocked returns the error for a refused call.
func (cf *config) blocked(ctx context.Context, method string, err error) error {
	if e := cf.block(ctx, method, err); e != nil {
		return e
	}
	return DefaultBlockFunc(ctx, method, err)
}

// maxStackArgs is how many extracted arguments live on the stack.
const maxStackArgs = 4

// argsInto extracts the call's arguments into buf and returns them, or nil
// without extractors.
func (cf *config) argsInto(buf *[maxStackArgs]any, ctx context.Context, method string, req any) []any {
	if len(cf.args) == 0 {
		return nil
	}
	args := buf[:0]
	for _, f := range cf.args {
		args = append(args, f(ctx, method, req))
	}
	return args
}

func (cf *config) resource(ctx context.Context, method string) string {
	if cf.name != nil {
		return cf.name(ctx, method)
	}
	return method
}

// entry enters name on g (the default engine when nil). The Pass it returns
// is on the heap: it is for entries that outlive the call that made them.
func entry(g *sluice.Engine, ctx context.Context, name string, opts []sluice.EntryOption) (*sluice.Pass, error) {
	if g == nil {
		return sluice.EntryContext(ctx, name, opts...)
	}
	return g.EntryContext(ctx, name, opts...)
}

// guard runs call inside an entry of the call's resource, for the
// interceptors whose entry ends when call returns (unary calls, server
// streams). It returns call's error, or the block func's error without
// calling call when the entry is refused. A call the resource name skips,
// or that meets an Entry error other than a block (a closed engine), runs
// unguarded. When call panics, the entry exits with ErrHandlerPanic and the
// panic goes on.
//
// Entry is called here, not in a helper, and call does not escape, so the
// Pass, the options and the extracted arguments stay in this frame: the
// guarded call allocates nothing of its own (BenchmarkInterceptors).
func (cf *config) guard(g *sluice.Engine, ctx context.Context, method string, req any, call func() error) (err error) {
	name := cf.resource(ctx, method)
	if name == "" {
		return call()
	}
	var (
		ob  [2]sluice.EntryOption
		buf [maxStackArgs]any
		p   *sluice.Pass
		eer error
	)
	ob[0] = sluice.WithTraffic(cf.traffic)
	eo := ob[:1]
	if args := cf.argsInto(&buf, ctx, method, req); args != nil {
		ob[1] = sluice.WithArgs(args...)
		eo = ob[:2]
	}
	if g == nil {
		p, eer = sluice.EntryContext(ctx, name, eo...)
	} else {
		p, eer = g.EntryContext(ctx, name, eo...)
	}
	if eer != nil {
		if errors.Is(eer, sluice.ErrBlocked) {
			return cf.blocked(ctx, method, eer)
		}
		return call() // fail open
	}
	done := false
	defer func() {
		if !done {
			p.SetError(ErrHandlerPanic)
		} else {
			cf.record(p, err)
		}
		p.Exit()
	}()
	err = call()
	done = true
	return err
}

// UnaryServerInterceptor returns a server interceptor that runs each unary
// call through an inbound entry of g (nil means the default engine, looked
// up on each call).
func UnaryServerInterceptor(g *sluice.Engine, opts ...Option) grpc.UnaryServerInterceptor {
	cf := newConfig(sluice.Inbound, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		err = cf.guard(g, ctx, info.FullMethod, req, func() (herr error) {
			resp, herr = handler(ctx, req)
			return herr
		})
		return resp, err
	}
}

// StreamServerInterceptor returns a server interceptor that runs each
// stream through an inbound entry of g (nil means the default engine), held
// until the stream handler returns.
func StreamServerInterceptor(g *sluice.Engine, opts ...Option) grpc.StreamServerInterceptor {
	cf := newConfig(sluice.Inbound, opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return cf.guard(g, ss.Context(), info.FullMethod, nil, func() error {
			return handler(srv, ss)
		})
	}
}

// UnaryClientInterceptor returns a client interceptor that runs each unary
// call through an outbound entry of g (nil means the default engine).
func UnaryClientInterceptor(g *sluice.Engine, opts ...Option) grpc.UnaryClientInterceptor {
	cf := newConfig(sluice.Outbound, opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, copts ...grpc.CallOption) error {
		return cf.guard(g, ctx, method, req, func() error {
			return invoker(ctx, method, req, reply, cc, copts...)
		})
	}
}

// StreamClientInterceptor returns a client interceptor that runs each
// stream through an outbound entry of g (nil means the default engine), held
// until the stream ends (see the package doc). A refused stream fails at
// creation.
func StreamClientInterceptor(g *sluice.Engine, opts ...Option) grpc.StreamClientInterceptor {
	cf := newConfig(sluice.Outbound, opts)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, copts ...grpc.CallOption) (grpc.ClientStream, error) {
		name := cf.resource(ctx, method)
		if name == "" {
			return streamer(ctx, desc, cc, method, copts...)
		}
		// The entry outlives this call, so its Pass is on the heap anyway;
		// the options and arguments still stay in this frame.
		var (
			ob  [2]sluice.EntryOption
			buf [maxStackArgs]any
		)
		ob[0] = sluice.WithTraffic(cf.traffic)
		eo := ob[:1]
		if args := cf.argsInto(&buf, ctx, method, nil); args != nil {
			ob[1] = sluice.WithArgs(args...)
			eo = ob[:2]
		}
		p, eer := entry(g, ctx, name, eo)
		if eer != nil {
			if errors.Is(eer, sluice.ErrBlocked) {
				return nil, cf.blocked(ctx, method, eer)
			}
			return streamer(ctx, desc, cc, method, copts...)
		}
		s := &clientStream{cf: cf, p: p, unaryResponse: !desc.ServerStreams}
		done := false
		defer func() {
			if !done {
				s.finish(ErrHandlerPanic, true)
			}
		}()
		cs, err := streamer(ctx, desc, cc, method, copts...)
		done = true
		if err != nil {
			s.finish(err, false)
			return nil, err
		}
		s.ClientStream = cs
		s.stop = context.AfterFunc(ctx, func() {
			s.finish(status.FromContextError(ctx.Err()).Err(), false)
		})
		return s, nil
	}
}

// clientStream holds a client stream's entry until the stream ends.
type clientStream struct {
	grpc.ClientStream
	cf            *config
	p             *sluice.Pass
	stop          func() bool // unregisters the context's AfterFunc
	unaryResponse bool        // the server sends one message, then the stream ends
	once          sync.Once
}

// finish exits the entry once, recording err (when it counts, or always
// with force). It is safe for concurrent use: RecvMsg and the context's
// AfterFunc may race to it, and neither returns before the entry has exited.
func (s *clientStream) finish(err error, force bool) {
	s.once.Do(func() {
		switch {
		case force:
			s.p.SetError(err)
		case err != nil && err != io.EOF:
			s.cf.record(s.p, err)
		}
		s.p.Exit()
	})
}

// RecvMsg receives a message and ends the entry when the stream has ended.
func (s *clientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil || s.unaryResponse {
		s.finish(err, false)
		s.stop() // the stream's owner: stop is set before it has s
	}
	return err
}
