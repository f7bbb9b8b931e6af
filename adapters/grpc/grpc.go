package sluicegrpc

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

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

// Option configures an interceptor.
type Option func(*config)

type config struct {
	traffic sluice.TrafficType // of the interceptor's entries
	name    func(ctx context.Context, method string) string
	args    []ArgFunc
	block   BlockFunc // nil: policy's
	policy  RefusalPolicy
	codes   uint32 // bit c set: code c is recorded as an error
	// rateLimit and xRateLimit: WithRateLimitMetadata.
	rateLimit, xRateLimit bool
	caller                func(context.Context) string
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
	cf := &config{traffic: traffic, codes: defaultCodes}
	for _, o := range opts {
		o(cf)
	}
	return cf
}

// record sets err on p when its status code is one of the error codes.
func (cf *config) record(p sluice.Pass, err error) {
	if err == nil {
		return
	}
	if c := status.Code(err); c < 32 && cf.codes&(1<<c) != 0 {
		p.SetError(err)
	}
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

// notEntered ends a call whose Entry returned eer: with the block func's
// error for a refusal, InvalidArgument for a caller no entry may carry
// (never failing open past an authority rule), and otherwise by running
// call unguarded (fail open: a closed engine).
func (cf *config) notEntered(ctx context.Context, method string, eer error, call func() error) error {
	switch {
	case errors.Is(eer, sluice.ErrBlocked):
		return cf.blocked(ctx, method, eer)
	case errors.Is(eer, sluice.ErrBadCaller):
		return errBadCaller
	}
	return call()
}

// guard runs call inside an entry of the call's resource, for the
// interceptors whose entry ends when call returns (unary calls, server
// streams). It returns call's error, or the block func's error without
// calling call when the entry is refused. A call the resource name skips,
// or that meets an Entry error other than a block (a closed engine), runs
// unguarded. When call panics, the entry exits with ErrHandlerPanic and the
// panic goes on.
//
// call does not escape, so the options and the extracted arguments stay in
// this frame: the guarded call allocates nothing of its own
// (BenchmarkInterceptors).
//
// copts are a client call's options: with WithRateLimitMetadata, its budget
// goes into the metadata they ask for (ratelimit_client.go).
func (cf *config) guard(g *sluice.Engine, ctx context.Context, method string, req any, call func() error, copts ...grpc.CallOption) (err error) {
	name := cf.resource(ctx, method)
	if name == "" {
		return call()
	}
	var (
		ob     [4]sluice.EntryOption
		buf    [maxStackArgs]any
		p      sluice.Pass
		eer    error
		budget sluice.Budget
	)
	ob[0] = sluice.WithTraffic(cf.traffic)
	n := 1
	tell := cf.rateLimit && (cf.traffic == sluice.Inbound || clientAsks(copts))
	if tell {
		ob[n] = sluice.WithBudget(&budget)
		n++
	}
	if cf.caller != nil {
		ob[n] = sluice.WithCaller(cf.caller(ctx))
		n++
	}
	if args := cf.argsInto(&buf, ctx, method, req); args != nil {
		ob[n] = sluice.WithArgs(args...)
		n++
	}
	eo := ob[:n]
	if g == nil {
		p, eer = sluice.EntryContext(ctx, name, eo...)
	} else {
		p, eer = g.EntryContext(ctx, name, eo...)
	}
	if tell {
		cf.tellBefore(ctx, copts, &budget, eer)
	}
	if eer != nil {
		return cf.notEntered(ctx, method, eer, call)
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
	if tell && cf.traffic == sluice.Outbound {
		cf.tellClient(copts, &budget, false)
	}
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
		}, copts...)
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
		eng := g
		if eng == nil {
			eng = sluice.Default()
		}
		// Streams of this resource whose context the caller has already
		// cancelled give their entries back first, so this one is judged
		// without them (see openStreams).
		key := streamKey{eng, name}
		open.reap(key, false)
		ends := open.ends.Load()
		// The entry outlives this call (its Pass is kept in the stream);
		// the options and arguments stay in this frame.
		var (
			ob     [3]sluice.EntryOption
			buf    [maxStackArgs]any
			budget sluice.Budget
		)
		ob[0] = sluice.WithTraffic(cf.traffic)
		n := 1
		if cf.rateLimit && clientAsks(copts) {
			ob[n] = sluice.WithBudget(&budget)
			n++
		}
		if args := cf.argsInto(&buf, ctx, method, nil); args != nil {
			ob[n] = sluice.WithArgs(args...)
			n++
		}
		eo := ob[:n]
		p, eer := eng.EntryContext(ctx, name, eo...)
		// Refused: look through every listed stream, and ask once more if
		// that ended any, or if a stream ended meanwhile on its own (its
		// context's AfterFunc may have exited its entry just after this
		// one was refused, and taken it off the list before the look).
		if eer != nil && errors.Is(eer, sluice.ErrBlocked) && (open.reap(key, true) > 0 || open.ends.Load() != ends) {
			p, eer = eng.EntryContext(ctx, name, eo...)
		}
		if eer != nil {
			if errors.Is(eer, sluice.ErrBlocked) {
				cf.tellClient(copts, &budget, true) // nothing when not asked
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
		if done := ctx.Done(); done != nil {
			s.ctx, s.done, s.key = ctx, done, key
			s.stop = context.AfterFunc(ctx, s.cancelled)
			open.add(s)
		}
		return s, nil
	}
}

// clientStream holds a client stream's entry until the stream ends.
type clientStream struct {
	grpc.ClientStream
	cf            *config
	p             sluice.Pass
	unaryResponse bool // the server sends one message, then the stream ends
	once          sync.Once

	// Set only for a context that can end, before the stream is shared.
	ctx  context.Context
	done <-chan struct{} // ctx.Done()
	stop func() bool     // unregisters the context's AfterFunc
	key  streamKey       // where it is listed in open

	// Guarded by open.mu.
	prev, next *clientStream
	listed     bool // in open's list for key
	ended      bool // finished: never to be listed again
}

// finish exits the entry once, recording err (when it counts, or always
// with force), and takes the stream off the open list. It is safe for
// concurrent use: RecvMsg, SendMsg, the context's AfterFunc and a later
// stream's reap may race to it, and none of them returns before the entry
// has exited.
func (s *clientStream) finish(err error, force bool) {
	s.once.Do(func() {
		switch {
		case force:
			s.p.SetError(err)
		case err != nil && err != io.EOF:
			s.cf.record(s.p, err)
		}
		s.p.Exit()
		if s.done != nil {
			open.remove(s)
		}
	})
}

// cancelled ends the entry of a stream whose context is done. The
// context's AfterFunc calls it, and so does reap.
func (s *clientStream) cancelled() {
	s.finish(status.FromContextError(s.ctx.Err()).Err(), false)
}

// end finishes the stream from its owner's goroutine and unregisters the
// context's AfterFunc (stop is set before the owner has s).
func (s *clientStream) end(err error) {
	s.finish(err, false)
	if s.stop != nil {
		s.stop()
	}
}

// RecvMsg receives a message and ends the entry when the stream has ended.
func (s *clientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil || s.unaryResponse {
		s.end(err)
	}
	return err
}

// SendMsg sends a message. An error other than io.EOF (which says the
// stream has ended and RecvMsg will give its status) means gRPC has aborted
// the stream, and ends the entry.
func (s *clientStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err != nil && err != io.EOF {
		s.end(err)
	}
	return err
}

// streamKey names the entries a stream holds: engine and resource.
type streamKey struct {
	eng  *sluice.Engine
	name string
}

// openStreams lists the client streams that hold an entry and whose context
// can end, by engine and resource, so that a new stream can first end those
// whose context is already done.
//
// context.AfterFunc ends a cancelled stream's entry from a goroutine of its
// own, which may run milliseconds after cancel returns on a busy host. A
// caller that cancels a stream and at once opens another on the same
// resource would then find the old entry still held, and be refused by a
// concurrency limit it is not exceeding. A closed Done channel, though, is
// visible as soon as cancel returns (the standard library closes it, and
// those of derived contexts, before returning), so the new stream looks:
//
//   - before asking for its entry, when the resource has at most reapAhead
//     such streams open: the engine then never sees the cancelled entries,
//     and its statistics count no refusal for them;
//   - when refused, through all of them; if that ended any, or if a listed
//     stream ended on its own since it looked first (its AfterFunc may exit
//     the entry just after the refusal), it asks once more, and the
//     engine's statistics show the first refusal too.
//
// Listing costs one lock when a stream opens and one when it ends; looking
// costs one lock and one non-blocking receive per listed stream of the
// resource (BenchmarkInterceptors, stream-client).
type openStreams struct {
	mu    sync.Mutex
	lists map[streamKey]streamList // by value: a list that empties and refills costs no allocation
	// ends counts the listed streams taken off for good, each after its
	// entry exited: a refused stream asks again when it moved.
	ends atomic.Uint64
}

// streamList is the listed streams of one engine and resource.
type streamList struct {
	head *clientStream
	n    int
}

// reapAhead is the most open streams of a resource that a new stream looks
// through before asking for its entry, so that the look costs little beside
// opening a stream (BenchmarkInterceptors, stream-client/sluice-64-open).
const reapAhead = 64

// open is shared by every client interceptor, so that streams opened
// through different connections with one engine see each other.
var open = openStreams{lists: map[streamKey]streamList{}}

// add lists s, unless it has already ended.
func (o *openStreams) add(s *clientStream) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if s.ended {
		return
	}
	l := o.lists[s.key]
	s.listed = true
	s.next = l.head
	if s.next != nil {
		s.next.prev = s
	}
	l.head = s
	l.n++
	o.lists[s.key] = l
}

// remove takes s off its list for good. It does nothing when s is not
// listed.
func (o *openStreams) remove(s *clientStream) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s.ended = true
	if s.listed {
		o.ends.Add(1)
	}
	o.unlink(s)
}

// unlink takes s off its list. Must hold mu.
func (o *openStreams) unlink(s *clientStream) {
	if !s.listed {
		return
	}
	s.listed = false
	l := o.lists[s.key]
	if s.prev != nil {
		s.prev.next = s.next
	} else {
		l.head = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	}
	s.prev, s.next = nil, nil
	if l.n--; l.n == 0 {
		delete(o.lists, s.key)
	} else {
		o.lists[s.key] = l
	}
}

// reap ends the listed streams of key whose context is done, and returns
// how many it ended, once their entries have exited. Unless all, it looks
// only when at most reapAhead streams are listed.
func (o *openStreams) reap(key streamKey, all bool) int {
	var gone []*clientStream
	o.mu.Lock()
	l := o.lists[key]
	if l.n == 0 || (!all && l.n > reapAhead) {
		o.mu.Unlock()
		return 0
	}
	for s := l.head; s != nil; {
		next := s.next
		select {
		case <-s.done:
			o.unlink(s)
			gone = append(gone, s)
		default:
		}
		s = next
	}
	o.mu.Unlock()
	for _, s := range gone {
		s.cancelled()
		s.stop() // listed after stop was set, under mu
	}
	return len(gone)
}
