// Package sluicechi guards go-chi/chi v5 routers with sluice.
//
// Middleware returns chi middleware that runs every request through an
// inbound sluice entry:
//
//	r := chi.NewRouter()
//	r.Use(middleware.Recoverer, sluicechi.Middleware(engine))
//	r.Get("/users/{id}", getUser) // resource "GET /users/{id}"
//
// # Resource names
//
// A request's resource is "METHOD pattern": its method and the full route
// pattern that serves it, mounted subrouters included ("GET
// /api/users/{id}"), whatever the parameters. Middleware installed with
// Router.Use runs before chi routes the request, so the middleware looks
// the route up in the router first (chi's Routes.Find, with a pooled
// routing context): the same lookup chi makes next. HEAD counts as GET: chi
// serves HEAD with GET routes behind middleware.GetHead, and a HEAD route
// of its own is named GET too. Every request no route serves (404, 405) is
// the one resource NoRoute, the net/http adapter's, so a scan of random
// paths makes one resource.
//
// # Everything else
//
// The net/http adapter (sluicehttp) does the rest, and Middleware takes its
// options: a refusal is 429 with Retry-After, or 503 for overload
// (sluicehttp.RefusalPolicy, sluicehttp.WithRefusalPolicy,
// sluicehttp.WithBlockHandler); a 5xx response is recorded as an error for
// circuit breakers and a 4xx is not (sluicehttp.WithErrorStatus); a
// handler that panics exits its entry with an error; a streamed response
// holds its entry until the handler returns. sluicehttp.WithArgs takes the
// argument extractors of this package (URLParam, Query, Header,
// ClientIP) and any sluicehttp.ArgFunc.
package sluicechi
