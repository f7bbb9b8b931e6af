// Package sluicegrpc guards gRPC calls with sluice: interceptors for the
// server (inbound entries) and for the client (outbound entries), unary and
// streaming.
//
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(recovery, sluicegrpc.UnaryServerInterceptor(engine)),
//		grpc.ChainStreamInterceptor(recovery, sluicegrpc.StreamServerInterceptor(engine)),
//	)
//	conn, err := grpc.NewClient(target,
//		grpc.WithUnaryInterceptor(sluicegrpc.UnaryClientInterceptor(engine)),
//		grpc.WithStreamInterceptor(sluicegrpc.StreamClientInterceptor(engine)),
//	)
//
// The resource of a call is its full method name ("/pkg.Service/Method"),
// unless WithResourceName says otherwise. A process that both serves and
// calls the same method with one engine counts both sides under one
// resource; name one side differently with WithResourceName.
//
// # Entries and streams
//
// A unary entry lasts from the interceptor to the handler's (or the
// invoker's) return. A server stream entry lasts until the stream handler
// returns. A client stream entry lasts until the stream ends, which the
// interceptor sees when RecvMsg returns an error (io.EOF included), when
// RecvMsg returns the single response of a stream whose server does not
// stream, when SendMsg returns an error other than io.EOF, or when the
// call's context is done, whichever comes first; it starts no goroutine of
// its own for that. A client that abandons a stream without doing any of
// those (gRPC leaks such a stream too) keeps its entry in flight.
//
// When the caller cancels a stream's context, no later stream of the same
// engine and resource (through any client interceptor) is refused for the
// cancelled stream's entry, even if nothing reads the cancelled stream: a
// new stream first ends the entries of the streams of its resource whose
// context is done. It does so before asking for its own entry when at most
// 64 such streams are open, and otherwise only when refused, asking again
// if that ended any (the engine's statistics then count the first
// refusal). The context's AfterFunc ends the entry too, from a goroutine of
// its own, for the case that no stream follows; that may run milliseconds
// after cancel on a busy host. This holds for contexts of the standard
// library, whose cancel closes the Done channels of the context and of
// those derived from it before returning.
//
// # Outcomes
//
// A refused call returns the refusal policy's status (RefusalPolicy,
// WithRefusalPolicy), or the block func's error (WithBlockFunc). By default
// a rate limit (a flow rule counting QPS, a param rule, a cluster or custom
// rule) is codes.ResourceExhausted and overload (a full concurrency limit,
// system protection, an open or probing circuit breaker) codes.Unavailable,
// as the HTTP adapters answer 429 and 503. The message is the same for
// every refusal of one block type ("sluice: blocked by flow rule") and names
// no resource, number or wait, so errors group by message and callers learn
// nothing of the limits. A google.rpc.RetryInfo detail carries the rule's
// wait when it knows one, or 1 s for overload without one; a
// google.rpc.ErrorInfo with the resource, the measurement and the limit is
// added only with RefusalPolicy.Details. Any other Entry error (a closed
// engine) lets the call through unguarded. With WithRateLimitMetadata
// the server interceptors send the caller its remaining budget as the
// RateLimit keys in response metadata: the header of an admitted call, the
// trailer of a refused one.
//
// A call that ends with an error whose status code is one of the error
// codes (by default those meaning the server failed: Unknown,
// DeadlineExceeded, Unimplemented, Internal, Unavailable and DataLoss; see
// WithErrorCodes) records that error on the entry, so circuit breakers see
// it. A handler that panics still exits its entry, with ErrHandlerPanic
// recorded, and the panic goes on to the recovery interceptor chained
// before this one.
package sluicegrpc
