package sluicechi

import (
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/chi/internal/refusal"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
)

// NoRoute is the resource of every request no chi route serves (404, 405),
// the net/http adapter's name for such requests.
const NoRoute = sluicehttp.NoRoute

// Option configures Middleware. The options are the net/http adapter's,
// except WithResourceName, which Middleware sets (to its own naming unless
// given one): WithArgs, WithRefusalPolicy, WithBlockHandler, WithErrorStatus,
// WithCaller (sluicehttp.CallerSource) and WithRateLimitHeaders.
type Option = sluicehttp.Option

// Middleware returns chi middleware (for Router.Use, Router.With or Group)
// that runs each request through an inbound entry of g (nil means the
// default engine) named "METHOD pattern": the method, HEAD counting as GET,
// and the full route pattern that serves the request ("GET
// /users/{id}"), found in the router before it routes. The net/http
// adapter does the rest (refusals, errors, panics, streams); opts are its
// options.
func Middleware(g *sluice.Engine, opts ...Option) func(http.Handler) http.Handler {
	ns := new(refusal.Names)
	name := func(r *http.Request) string { return resource(ns, r) }
	all := append([]Option{sluicehttp.WithResourceName(name)}, opts...)
	return sluicehttp.Middleware(g, all...)
}

// contexts holds the routing contexts resource and URLParam look routes up
// with.
var contexts = sync.Pool{New: func() any { return chi.NewRouteContext() }}

// find returns the pattern of the route that serves r, "" for none, with
// the path parameters it finds in tc (a pooled context the caller resets
// and returns).
func find(r *http.Request, rctx *chi.Context, tc *chi.Context) string {
	if rctx.Routes == nil {
		return ""
	}
	method := rctx.RouteMethod // GetHead routes HEAD as GET
	if method == "" {
		method = r.Method
	}
	path := rctx.RoutePath // set by middleware before routing (GetHead, StripSlashes)
	if path == "" || len(rctx.RoutePatterns) > 0 {
		path = r.URL.RawPath
		if path == "" {
			path = r.URL.Path
		}
	}
	pattern := rctx.Routes.Find(tc, method, path)
	if pattern == "" && method == http.MethodHead {
		// A HEAD counts as GET, whether a GetHead inside this middleware
		// (in a subrouter) serves it with the GET route or not.
		tc.Reset()
		pattern = rctx.Routes.Find(tc, http.MethodGet, path)
	}
	return pattern
}

// resource returns the default resource name of r.
func resource(ns *refusal.Names, r *http.Request) string {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil {
		return NoRoute
	}
	tc := contexts.Get().(*chi.Context)
	tc.Reset()
	pattern := find(r, rctx, tc)
	contexts.Put(tc)
	if pattern == "" {
		return NoRoute
	}
	return ns.Get(routeMethod(r.Method), pattern)
}

// routeMethod is the method part of a resource name: HEAD counts as GET.
func routeMethod(m string) string {
	if m == http.MethodHead {
		return http.MethodGet
	}
	return m
}

// Header extracts the first value of the named request header as a string,
// or nil when it is absent or empty (sluicehttp.Header).
func Header(name string) sluicehttp.ArgFunc { return sluicehttp.Header(name) }

// ClientIP extracts the host of http.Request.RemoteAddr
// (sluicehttp.ClientIP); it reads no forwarding header.
func ClientIP() sluicehttp.ArgFunc { return sluicehttp.ClientIP() }

// URLParam extracts the named parameter of the route pattern ("{id}" is
// URLParam("id")) as a string, or nil when it is empty. Installed with
// Router.Use, the middleware runs before chi routes the request: the value
// is then found by looking the route up once more.
func URLParam(name string) sluicehttp.ArgFunc {
	return func(r *http.Request) any {
		rctx := chi.RouteContext(r.Context())
		if rctx == nil {
			return nil
		}
		v := rctx.URLParam(name)
		if v == "" {
			tc := contexts.Get().(*chi.Context)
			tc.Reset()
			if find(r, rctx, tc) != "" {
				v = tc.URLParam(name)
			}
			contexts.Put(tc)
		}
		if v == "" {
			return nil
		}
		return v
	}
}

// Query extracts the first value of the named URL query parameter as a
// string (as url.Values.Get gives it), or nil when it is absent or empty.
func Query(name string) sluicehttp.ArgFunc {
	return func(r *http.Request) any {
		if v := query(r.URL.RawQuery, name); v != "" {
			return v
		}
		return nil
	}
}

// query returns the first value of key in the raw query q, unescaped, as
// url.ParseQuery reads it, without parsing the whole query into a map.
func query(q, key string) string {
	for q != "" {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		if strings.Contains(kv, ";") {
			continue // url.ParseQuery rejects the pair
		}
		k, v, _ := strings.Cut(kv, "=")
		k, err := url.QueryUnescape(k)
		if err != nil || k != key {
			continue
		}
		if v, err = url.QueryUnescape(v); err == nil {
			return v
		}
	}
	return ""
}
