// Package sluicehttp guards net/http handlers with sluice.
//
// Middleware returns a func(http.Handler) http.Handler that runs every
// request through an inbound sluice entry:
//
//	mux := http.NewServeMux()
//	mux.HandleFunc("GET /users/{id}", getUser)
//	srv := &http.Server{Handler: sluicehttp.Middleware(engine)(mux)}
//
// # Resource names
//
// A request's resource is "METHOD template": the route pattern that serves
// it, with its method, or with the request's method when the pattern has
// none. A request to /users/42 routed by "GET /users/{id}" is the resource
// "GET /users/{id}", whatever the id. The pattern is found whichever way the
// middleware is installed:
//
//   - wrapping a single route (mux.Handle("GET /users/{id}", mw(h))), the
//     mux has already set http.Request.Pattern;
//   - wrapping a *http.ServeMux itself (mw(mux)), the middleware asks the mux
//     which pattern matches (http.ServeMux.Handler) before calling it. That
//     routes each request twice; wrap single routes where that matters.
//
// Installed both ways at once (around the mux and around a route), on the
// same engine, a request is entered once: the inner middleware sees that
// the outer one already entered the same resource for this request (its
// ResponseWriter is the outer's, or unwraps to it through the Unwrap method
// http.ResponseController uses, as wrapping middleware between the two
// should provide) and calls the handler without a second entry. A different
// engine, or a different resource name (WithResourceName), inside is a
// second, deliberate limit and counts the request again.
//
// A request is counted against the route that serves it. ServeMux serves
// HEAD requests with "GET" patterns, so a HEAD to /users/42 is the resource
// "GET /users/{id}" too, and a rule on that name limits both. For a pattern
// without a method ("/files/"), the name takes the request's method, HEAD
// again counting as GET, and any method other than net/http's nine as
// OtherMethod: "DELETE /files/", "OTHER /files/".
//
// Every request no pattern names (a path no route matches, a method the
// route refuses, the mux's own redirects, or a handler that is not a
// ServeMux) is the one resource NoRoute, so a scan of random paths or
// methods makes one resource, not one per path. For other routers, name
// resources with WithResourceName.
//
// # Outcomes
//
// A refused request gets the refusal policy's response (RefusalPolicy,
// WithRefusalPolicy), or the block handler's (WithBlockHandler). By default
// a rate limit (a flow rule counting QPS, a param rule, a cluster or custom
// rule) is 429 Too Many Requests, and overload (a full concurrency limit,
// system protection, an open or probing circuit breaker; see Overload) is
// 503 Service Unavailable. A Retry-After header, in whole seconds rounded
// up, carries the rule's wait when it knows one, and for overload without
// one DefaultOverloadRetryAfter (1 s), so that clients retrying in a loop
// back off. The body is the status text: it names neither the rule nor its
// numbers, and is the same for every refusal of one status.
//
// Any other Entry error (a closed engine) lets the request through
// unguarded: flow control failing must not take the service down.
//
// With WithRateLimitHeaders every response under a rate rule, passed or
// refused, tells the client its remaining budget in the RateLimit-Policy
// and RateLimit header fields (and X-RateLimit-* on request); off by
// default.
//
// A response with a 5xx status is recorded on the entry as an error, so
// circuit breakers see it (see WithErrorStatus). A handler that panics still
// exits its entry, with an error recorded, and the panic goes on to the
// server or to the recovery middleware outside this one.
package sluicehttp
