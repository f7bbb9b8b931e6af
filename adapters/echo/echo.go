package sluiceecho

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/echo/internal/refusal"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
)

// NoRoute is the resource of every request no route serves (404, 405, the
// router's answer to OPTIONS), the net/http adapter's name for such
// requests.
const NoRoute = sluicehttp.NoRoute

// ArgFunc extracts one argument for param rules from a request. A nil
// result means the request has no value for it.
type ArgFunc func(c echo.Context) any

// Param extracts the named path parameter of the route (":id" is
// Param("id")) as a string, or nil when it is empty.
func Param(name string) ArgFunc {
	return func(c echo.Context) any { return orNil(c.Param(name)) }
}

// Header extracts the first value of the named request header as a string,
// or nil when it is absent or empty.
func Header(name string) ArgFunc {
	key := http.CanonicalHeaderKey(name)
	return func(c echo.Context) any { return orNil(c.Request().Header.Get(key)) }
}

// Query extracts the first value of the named URL query parameter as a
// string (echo.Context.QueryParam's value, found without parsing the whole
// query), or nil when it is absent or empty.
func Query(name string) ArgFunc {
	return func(c echo.Context) any { return orNil(query(c.Request().URL.RawQuery, name)) }
}

// ClientIP extracts the client's IP address as a string: the echo
// instance's IPExtractor's when it has one (see echo's documentation on
// trusting proxies), otherwise the host of http.Request.RemoteAddr. It does
// not read forwarding headers on its own, which any client can forge.
func ClientIP() ArgFunc {
	return func(c echo.Context) any {
		r := c.Request()
		if x := c.Echo().IPExtractor; x != nil {
			return orNil(x(r))
		}
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		return orNil(host)
	}
}

func orNil(s string) any {
	if s == "" {
		return nil
	}
	return s
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

// BlockHandler answers a request that sluice refused. err matches
// sluice.ErrBlocked; errors.As gives the *sluice.BlockError. Its result is the
// middleware's, as a handler's error would be.
type BlockHandler func(c echo.Context, err error) error

// Option configures Middleware.
type Option func(*config)

type config struct {
	name    func(echo.Context) string
	args    []ArgFunc
	block   BlockHandler // nil: policy's
	policy  sluicehttp.RefusalPolicy
	isError func(status int) bool
	// rateLimit and xRateLimit: WithRateLimitHeaders.
	rateLimit, xRateLimit bool
	caller                func(*http.Request) string
}

// WithResourceName names each request's resource with f instead of the
// default "METHOD template". If f returns "", the request is served without
// any entry.
func WithResourceName(f func(c echo.Context) string) Option {
	return func(cf *config) { cf.name = f }
}

// WithArgs passes, for param rules, the values the extractors give, in
// order, as the entry's positional arguments (sluice.WithArgs). Later calls
// append.
func WithArgs(extractors ...ArgFunc) Option {
	return func(cf *config) { cf.args = append(cf.args, extractors...) }
}

// WithRefusalPolicy answers refused requests with p's status and
// Retry-After instead of the default policy's, as the net/http adapter's
// option of the same name does. WithBlockHandler takes precedence.
func WithRefusalPolicy(p sluicehttp.RefusalPolicy) Option {
	return func(cf *config) { cf.policy = p }
}

// WithBlockHandler replaces the refusal policy's response to refused
// requests with h.
func WithBlockHandler(h BlockHandler) Option {
	return func(cf *config) { cf.block = h }
}

// WithErrorStatus decides which statuses are recorded on the entry as
// errors (a *sluicehttp.StatusError, or the handler's error), for circuit
// breakers and error statistics. The status of a handler's error is its
// *echo.HTTPError's code, or 500 for any other error, as echo's default
// error handler answers. The default counts 500 to 599.
func WithErrorStatus(f func(status int) bool) Option {
	return func(cf *config) { cf.isError = f }
}

func serverError(status int) bool { return status >= 500 && status < 600 }

// refuse answers c with p's response to the refusal err: its status and
// Retry-After, and the status text as the body.
func refuse(c echo.Context, p sluicehttp.RefusalPolicy, err error) error {
	status, wait := p.Response(err)
	if wait > 0 {
		c.Response().Header().Set("Retry-After", strconv.FormatInt(wait, 10))
	}
	return c.String(status, http.StatusText(status))
}

// maxStackArgs is how many extracted arguments live on the stack.
const maxStackArgs = 4

// Handlers of the requests no route serves.
var (
	notFound         = reflect.ValueOf(echo.NotFoundHandler).Pointer()
	methodNotAllowed = reflect.ValueOf(echo.MethodNotAllowedHandler).Pointer()
)

// resource returns the default resource name of c: "METHOD template",
// HEAD counting as GET, or NoRoute.
func resource(ns *refusal.Names, c echo.Context) string {
	path := c.Path()
	if path == "" {
		return NoRoute
	}
	if h := reflect.ValueOf(c.Handler()).Pointer(); h == notFound || h == methodNotAllowed || c.Get(echo.ContextKeyHeaderAllow) != nil {
		return NoRoute
	}
	m := c.Request().Method
	if m == http.MethodHead {
		m = http.MethodGet
	}
	return ns.Get(m, path)
}

// Middleware returns echo middleware (for Echo.Use, Group.Use or a route)
// that runs each request through an inbound entry of g (nil means the
// default engine, looked up on each request). It is safe for concurrent
// use.
func Middleware(g *sluice.Engine, opts ...Option) echo.MiddlewareFunc {
	cf := config{isError: serverError}
	for _, o := range opts {
		o(&cf)
	}
	if cf.block == nil {
		p := cf.policy
		cf.block = func(c echo.Context, err error) error { return refuse(c, p, err) }
	}
	if cf.isError == nil {
		cf.isError = serverError
	}
	m := &middleware{cf: cf, g: g}
	// echo applies middleware to each request's handler: this closure,
	// which holds two words, is its one allocation per request
	// (BenchmarkMiddleware), as it is of any echo middleware.
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { return m.handle(c, next) }
	}
}

type middleware struct {
	cf config
	g  *sluice.Engine
	ns refusal.Names
}

func (m *middleware) handle(c echo.Context, next echo.HandlerFunc) error {
	var name string
	if m.cf.name != nil {
		if name = m.cf.name(c); name == "" {
			return next(c)
		}
	} else {
		name = resource(&m.ns, c)
	}
	return m.cf.serve(m.g, name, c, next)
}

// serve runs next inside an entry of name.
func (cf *config) serve(g *sluice.Engine, name string, c echo.Context, next echo.HandlerFunc) (err error) {
	opts := [4]sluice.EntryOption{sluice.WithTraffic(sluice.Inbound)}
	n := 1
	var budget sluice.Budget
	if cf.rateLimit {
		opts[n] = sluice.WithBudget(&budget)
		n++
	}
	if cf.caller != nil {
		opts[n] = sluice.WithCaller(cf.caller(c.Request()))
		n++
	}
	if len(cf.args) > 0 {
		var buf [maxStackArgs]any
		args := buf[:0]
		for _, f := range cf.args {
			args = append(args, f(c))
		}
		opts[n] = sluice.WithArgs(args...)
		n++
	}
	var (
		p   sluice.Pass
		eer error
	)
	ctx := c.Request().Context()
	if g == nil {
		p, eer = sluice.EntryContext(ctx, name, opts[:n]...)
	} else {
		p, eer = g.EntryContext(ctx, name, opts[:n]...)
	}
	if cf.rateLimit {
		setRateLimitHeaders(c.Response().Header(), &budget, cf.xRateLimit)
	}
	if eer != nil {
		switch {
		case errors.Is(eer, sluice.ErrBlocked):
			return cf.block(c, eer)
		case errors.Is(eer, sluice.ErrBadCaller):
			// never fail open past an authority rule
			return c.String(http.StatusBadRequest, http.StatusText(http.StatusBadRequest))
		}
		return next(c) // fail open: see the package doc
	}
	done := false
	defer func() {
		if !done {
			p.SetError(sluicehttp.ErrHandlerPanic)
		} else if st := status(c, err); cf.isError(st) {
			if err != nil {
				p.SetError(err)
			} else {
				p.SetError(&sluicehttp.StatusError{Code: st})
			}
		}
		p.Exit()
	}()
	err = next(c)
	done = true
	return err
}

// status is the response status of a request its handler ended with err:
// the status written when the response is committed, else err's as echo's
// default error handler answers it (an *echo.HTTPError's code, 500 for
// other errors), else the status set.
func status(c echo.Context, err error) int {
	resp := c.Response()
	if err == nil || resp.Committed {
		return resp.Status
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return he.Code
	}
	return http.StatusInternalServerError
}
