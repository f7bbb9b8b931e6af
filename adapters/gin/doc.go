// Package sluicegin guards gin routes with sluice.
//
// Middleware returns a gin.HandlerFunc that runs each request through an
// inbound sluice entry:
//
//	r := gin.New()
//	r.Use(gin.Recovery(), sluicegin.Middleware(engine))
//	r.GET("/users/:id", getUser)
//
// # Resource names
//
// A request's resource is "METHOD template", with the route template gin
// matched (gin.Context.FullPath): every request to /users/42, /users/43...
// is the one resource "GET /users/:id". A request is counted against the
// route that serves it, and gin, unlike net/http's ServeMux, does not serve
// HEAD with GET routes: a HEAD route ("HEAD /users/:id") is a resource of its
// own, and a HEAD without one is a 404. Every request no route serves (gin
// runs global middleware for those too, before its 404 or 405) is the one
// resource NoRoute, whatever its path or method. WithResourceName overrides
// the naming.
//
// # Outcomes
//
// A refused request is aborted with the refusal policy's response
// (WithRefusalPolicy), or the block handler's (WithBlockHandler). The policy
// is sluicehttp.RefusalPolicy, so both HTTP adapters answer alike: by
// default 429 Too Many Requests for rate limits and 503 Service Unavailable
// for overload (sluicehttp.Overload), with a Retry-After header (whole
// seconds, rounded up) carrying the rule's wait, or 1 s for overload
// without one, and the status text as the body. Any other Entry error (a
// closed engine) lets the request through unguarded. With
// WithRateLimitHeaders every response under a rate rule, passed or
// refused, carries the RateLimit header fields (see the net/http adapter).
//
// When the handlers are done, the entry records as its error the last error
// they added with gin.Context.Error (other than binding errors, which are
// the client's fault) or, failing that, a *sluicehttp.StatusError for a 5xx
// status; WithErrorFunc replaces that choice. A handler that panics still
// exits its entry, with sluicehttp.ErrHandlerPanic recorded, and the panic
// goes on to gin.Recovery (which must be installed before this middleware to
// see it).
package sluicegin
