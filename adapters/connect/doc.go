// Package sluiceconnect guards connect RPCs (connectrpc.com/connect) with
// sluice: one interceptor for handlers (inbound entries) and clients
// (outbound entries), unary and streaming.
//
//	limit := sluiceconnect.NewInterceptor(engine)
//	mux.Handle(greetv1connect.NewGreetServiceHandler(svc, connect.WithInterceptors(limit)))
//	client := greetv1connect.NewGreetServiceClient(http.DefaultClient, url, connect.WithInterceptors(limit))
//
// The resource of a call is its procedure ("/pkg.Service/Method"), unless
// WithResourceName says otherwise; a process that serves and calls one
// procedure with one engine counts both under one resource.
//
// # Entries and streams
//
// A unary entry lasts until the handler (or, on a client, the call)
// returns. A handler's stream holds its entry until the handler returns, so
// a concurrency rule counts open streams. A client's stream holds its entry
// until Receive fails (io.EOF included: the stream ended) or CloseResponse
// is called, which connect asks of every caller; a refused client stream
// fails its first Send and Receive with the refusal, and sends nothing.
//
// # Outcomes
//
// A refused call ends with the refusal policy's error (RefusalPolicy,
// WithRefusalPolicy) or the block func's (WithBlockFunc). By default a rate
// limit is CodeResourceExhausted and overload (a full concurrency limit,
// system protection, an open or probing breaker) CodeUnavailable, which the
// connect protocol sends as HTTP 429 and 503, as the gRPC adapter answers;
// a caller an authority rule refuses (WithCaller) is CodePermissionDenied
// (HTTP 403).
// The message is one per block type ("sluice: blocked by flow rule"); a
// google.rpc.RetryInfo detail and a Retry-After header carry the rule's
// wait, or 1 s for overload without one. Any other Entry error (a closed
// engine) lets the call through unguarded.
//
// A call that ends with an error whose code is one of the error codes (by
// default those meaning the server failed: Unknown, DeadlineExceeded,
// Unimplemented, Internal, Unavailable, DataLoss; see WithErrorCodes)
// records it on the entry for circuit breakers; the caller's mistakes
// (InvalidArgument, NotFound, ...) are not. A handler that panics exits its
// entry with ErrHandlerPanic, and the panic goes on (to connect's
// WithRecover, or the HTTP server).
//
// WithArgs passes values for param rules: Header, PeerIP, or any ArgFunc,
// which sees the request message of a unary call (Call.Msg).
package sluiceconnect
