// Package sluiceecho guards labstack/echo v4 servers with sluice.
//
// Middleware returns echo middleware that runs every request through an
// inbound sluice entry:
//
//	e := echo.New()
//	e.Use(middleware.Recover(), sluiceecho.Middleware(engine))
//	e.GET("/users/:id", getUser) // resource "GET /users/:id"
//
// # Resource names
//
// A request's resource is "METHOD template": its method and the route
// template that serves it (echo.Context.Path), whatever the parameters.
// HEAD counts as GET: echo serves HEAD only with a HEAD route (e.Match,
// e.HEAD), and a HEAD route is named as the GET route of its path, so one
// rule limits both. Every request no route serves (404, 405, the router's
// own answer to OPTIONS) is the one resource NoRoute, the net/http
// adapter's name, so a scan of random paths makes one resource.
//
// # Outcomes
//
// A refused request gets the net/http adapter's answer
// (sluicehttp.RefusalPolicy): 429 Too Many Requests for a rate limit, 503
// Service Unavailable for overload, a Retry-After header and the status
// text as the body (WithRefusalPolicy, WithBlockHandler). Any other Entry
// error (a closed engine) lets the request through unguarded.
//
// A handler's error is recorded on the entry when its status counts as a
// failure (WithErrorStatus; by default 5xx): an *echo.HTTPError's code, 500
// for any other error, as echo's error handler answers them. A 4xx is not
// a failure of the service and is not recorded. A handler that panics
// exits its entry with sluicehttp.ErrHandlerPanic and the panic goes on to
// middleware.Recover outside. A streamed response holds its entry until
// the handler returns.
//
// WithArgs passes values for param rules: Param, Header, Query, ClientIP,
// or any ArgFunc.
package sluiceecho
