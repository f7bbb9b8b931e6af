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
// A request's resource is "METHOD pattern", where pattern is the route
// template that routed it, without any method or host prefix the pattern
// was registered with: a request to /users/42 routed by "GET /users/{id}" is
// the resource "GET /users/{id}", whatever the id. The pattern is found
// whichever way the middleware is installed:
//
//   - wrapping a single route (mux.Handle("GET /users/{id}", mw(h))), the
//     mux has already set http.Request.Pattern;
//   - wrapping a *http.ServeMux itself (mw(mux)), the middleware asks the mux
//     which pattern matches (http.ServeMux.Handler) before calling it. That
//     routes each request twice; wrap single routes where that matters.
//
// A request with no pattern (another router, or a path no route matches) is
// named by its path: "GET /no/such/page". Paths are unbounded, so the engine
// then counts resources beyond its limit together (sluice.WithMaxResources);
// for other routers, name resources with WithResourceName.
//
// # Outcomes
//
// A refused request gets the block handler's response: by default 429 Too
// Many Requests, with a Retry-After header (whole seconds, rounded up) when
// the rule that refused it knows how long to wait (see WithBlockHandler).
// Any other Entry error (a closed engine) lets the request through
// unguarded: flow control failing must not take the service down.
//
// A response with a 5xx status is recorded on the entry as an error, so
// circuit breakers see it (see WithErrorStatus). A handler that panics still
// exits its entry, with an error recorded, and the panic goes on to the
// server or to the recovery middleware outside this one.
package sluicehttp
