// Package sluicefiber guards gofiber/fiber v2 apps with sluice.
//
// Middleware returns a fiber handler that runs every request through an
// inbound sluice entry:
//
//	app := fiber.New()
//	app.Use(recover.New(), sluicefiber.Middleware(engine))
//	app.Get("/users/:id", getUser) // resource "GET /users/:id"
//
// # Resource names
//
// A request's resource is "METHOD template": its method and the path of the
// route that serves it (fiber.Route.Path), whatever the parameters. fiber
// serves HEAD with GET routes (app.Get registers both), and HEAD counts as
// GET. Every request no route serves (404, 405) is the one resource
// NoRoute, the net/http adapter's name, so a scan of random paths makes one
// resource.
//
// Where the middleware is installed decides what it knows:
//
//   - as a handler of the route (app.Get("/users/:id", mw, getUser)), it
//     has the route and its path parameters at no cost;
//   - installed with Use (app or group), it runs before fiber has chosen
//     the route, so it looks the route up: the first route after the Use
//     route in fiber's stack whose path matches the request
//     (fiber.RoutePatternMatch), as fiber's router does next. The lookup
//     costs a little per route it passes over (BenchmarkMiddleware), and
//     Param has no value there: fiber parses path parameters only for the
//     route it runs. Limit by path parameter with the middleware on the
//     route.
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
// failure (WithErrorStatus; by default 5xx): a *fiber.Error's code, 500 for
// any other error, as fiber's error handler answers them; a 4xx is not
// recorded. A handler that panics exits its entry with
// sluicehttp.ErrHandlerPanic and the panic goes on to the recover
// middleware outside.
//
// fasthttp writes a body stream after the handlers have returned, outside
// every middleware: write it with SetBodyStreamWriter, which holds the
// entry until the stream writer returns, so that a concurrency rule counts
// open streams.
//
// WithArgs passes values for param rules: Param, Header, Query, ClientIP,
// or any ArgFunc. Values are copied out of fasthttp's reused buffers.
//
// fiber v3 needs Go 1.25; this module keeps the repository's Go 1.24 floor
// and serves fiber v2 (docs/middleware.md).
package sluicefiber
