package sluicehttp

import (
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/refusal"
)

// ErrHandlerPanic is the error recorded on the entry of a request whose
// handler panicked.
var ErrHandlerPanic = errors.New("sluicehttp: handler panicked")

// StatusError is the error recorded on the entry of a request whose response
// status counts as a failure (by default, any 5xx).
type StatusError struct {
	// Code is the response's HTTP status code.
	Code int
}

// Error returns "sluicehttp: response status N".
func (e *StatusError) Error() string {
	return "sluicehttp: response status " + strconv.Itoa(e.Code)
}

// ArgFunc extracts one argument for param rules from a request. A nil
// result means the request has no value for it.
type ArgFunc func(r *http.Request) any

// ClientIP extracts the client's IP address: the host part of
// http.Request.RemoteAddr, as a string. It does not read forwarding headers,
// which any client can forge; behind a trusted proxy use
// Header("X-Real-Ip") or your own ArgFunc.
func ClientIP() ArgFunc {
	return func(r *http.Request) any {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		if host == "" {
			return nil
		}
		return host
	}
}

// Header extracts the first value of the named request header as a string,
// or nil when the header is absent or empty.
func Header(name string) ArgFunc {
	key := http.CanonicalHeaderKey(name)
	return func(r *http.Request) any {
		if v := r.Header.Get(key); v != "" {
			return v
		}
		return nil
	}
}

// PathValue extracts the named wildcard of the route pattern
// (http.Request.PathValue) as a string, or nil when it is empty. The value is
// known only once a ServeMux has routed the request, so the middleware must
// wrap the route (mux.Handle(pattern, mw(h))), not the mux.
func PathValue(name string) ArgFunc {
	return func(r *http.Request) any {
		if v := r.PathValue(name); v != "" {
			return v
		}
		return nil
	}
}

// The block handler writes the response to a request that sluice refused. err
// matches sluice.ErrBlocked; errors.As gives the *sluice.BlockError.

// Option configures Middleware.
type Option func(*config)

type config struct {
	name    func(*http.Request) string
	args    []ArgFunc
	block   func(w http.ResponseWriter, r *http.Request, err error) // nil: policy's
	policy  RefusalPolicy
	isError func(status int) bool
	// rateLimit and xRateLimit: WithRateLimitHeaders.
	rateLimit, xRateLimit bool
	caller                func(*http.Request) string // nil: no caller (caller.go)
}

// WithRefusalPolicy answers refused requests with p's status and
// Retry-After instead of the default policy's. WithBlockHandler, which
// writes the whole response, takes precedence.
func WithRefusalPolicy(p RefusalPolicy) Option {
	return func(c *config) { c.policy = p }
}

// WithResourceName names each request's resource with f instead of the
// default "METHOD pattern". If f returns "", the request is served without
// any entry (for health checks, say).
func WithResourceName(f func(r *http.Request) string) Option {
	return func(c *config) { c.name = f }
}

// WithArgs passes, for param rules, the values the extractors give, in order,
// as the entry's positional arguments (sluice.WithArgs). Later calls append.
func WithArgs(extractors ...ArgFunc) Option {
	return func(c *config) { c.args = append(c.args, extractors...) }
}

// WithBlockHandler replaces the refusal policy's response to refused
// requests (the default policy's by default) with h, which writes the whole
// response. The next handler is not called for them.
func WithBlockHandler(h func(w http.ResponseWriter, r *http.Request, err error)) Option {
	return func(c *config) { c.block = h }
}

// WithErrorStatus decides which response statuses are recorded on the entry
// as errors (a *StatusError), for circuit breakers and error statistics. The
// default counts 500 to 599.
func WithErrorStatus(f func(status int) bool) Option {
	return func(c *config) { c.isError = f }
}

func serverError(status int) bool { return status >= 500 && status < 600 }

// Middleware returns middleware that runs each request through an inbound
// entry of g (nil means the default engine, sluice.Default, looked up on each
// request). The returned function, and the handlers it makes, are safe for
// concurrent use.
func Middleware(g *sluice.Engine, opts ...Option) func(http.Handler) http.Handler {
	cf := config{isError: serverError}
	for _, o := range opts {
		o(&cf)
	}
	if cf.block == nil {
		p := cf.policy
		cf.block = func(w http.ResponseWriter, _ *http.Request, err error) { p.write(w, err) }
	}
	if cf.isError == nil {
		cf.isError = serverError
	}
	return func(next http.Handler) http.Handler {
		mux, _ := next.(*http.ServeMux)
		return &handler{eng: g, cf: cf, next: next, mux: mux}
	}
}

type handler struct {
	eng   *sluice.Engine
	cf    config
	next  http.Handler
	mux   *http.ServeMux // next, when it is one
	names refusal.Names
}

// maxStackArgs is how many extracted arguments live on the stack.
const maxStackArgs = 4

// ServeHTTP runs the request through its entry.
//
// complexity: the request path (name, options, entry, refusal, RateLimit fields, exit) in one frame, so that the options, arguments and budget stay on the stack
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var name string
	if h.cf.name != nil {
		name = h.cf.name(r)
		if name == "" {
			h.next.ServeHTTP(w, r)
			return
		}
	} else {
		name = h.resource(r)
	}
	eng := h.eng
	if eng == nil {
		eng = sluice.Default()
	}
	if outer := enteredBy(w); outer != nil && outer.eng == eng && outer.name == name {
		// The same middleware, outside this one (around the mux and around
		// the route), already entered this resource for this request.
		h.next.ServeHTTP(w, r)
		return
	}
	opts := [4]sluice.EntryOption{sluice.WithTraffic(sluice.Inbound)}
	n := 1
	var budget sluice.Budget
	if h.cf.rateLimit {
		opts[n] = sluice.WithBudget(&budget)
		n++
	}
	if h.cf.caller != nil {
		opts[n] = sluice.WithCaller(h.cf.caller(r))
		n++
	}
	if len(h.cf.args) > 0 {
		var buf [maxStackArgs]any
		args := buf[:0]
		for _, f := range h.cf.args {
			args = append(args, f(r))
		}
		opts[n] = sluice.WithArgs(args...)
		n++
	}
	var (
		p   sluice.Pass
		err error
	)
	if h.eng == nil {
		p, err = sluice.EntryContext(r.Context(), name, opts[:n]...)
	} else {
		p, err = h.eng.EntryContext(r.Context(), name, opts[:n]...)
	}
	if h.cf.rateLimit {
		setRateLimitHeaders(w.Header(), &budget, h.cf.xRateLimit)
	}
	if err != nil {
		h.notEntered(w, r, err)
		return
	}
	sw := &statusWriter{ResponseWriter: w, eng: eng, name: name}
	done := false
	defer func() {
		if !done {
			p.SetError(ErrHandlerPanic)
		} else if st := sw.code(); !sw.hijacked && h.cf.isError(st) {
			p.SetError(&StatusError{Code: st})
		}
		p.Exit()
	}()
	h.next.ServeHTTP(sw, r)
	done = true
}

// notEntered answers a request whose Entry returned err: the block
// handler's answer to a refusal, 400 to a caller no entry may carry (never
// failing open past an authority rule), and otherwise the next handler's
// (fail open: see the package doc).
func (h *handler) notEntered(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, sluice.ErrBlocked):
		h.cf.block(w, r, err)
	case errors.Is(err, sluice.ErrBadCaller):
		refuseBadCaller(w)
	default:
		h.next.ServeHTTP(w, r)
	}
}

// maxUnwrap bounds the writers enteredBy looks through.
const maxUnwrap = 16

// enteredBy returns the writer of the middleware that already entered an
// entry for this request, outside this one: w itself, or a writer w unwraps
// to (the Unwrap method http.ResponseController uses), or nil.
func enteredBy(w http.ResponseWriter) *statusWriter {
	for range maxUnwrap {
		switch x := w.(type) {
		case *statusWriter:
			return x
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return nil
		}
	}
	return nil
}

// resource returns the default resource name of r.
func (h *handler) resource(r *http.Request) string {
	pattern := r.Pattern
	if pattern == "" && h.mux != nil {
		_, pattern = h.mux.Handler(r)
		if redirected(r, pattern) {
			pattern = ""
		}
	}
	if pattern == "" {
		return refusal.NoRoute
	}
	method, template := splitPattern(pattern)
	if method == "" {
		method = routeMethod(r.Method)
	}
	return h.names.Get(method, template)
}

// redirected reports whether pattern, given by ServeMux.Handler for r, is
// the path of a trailing-slash redirect rather than a route pattern (the
// mux does that for CONNECT requests): the path with "/" added. A pattern
// that matched r's path cannot be that.
func redirected(r *http.Request, pattern string) bool {
	p := r.URL.Path
	return len(pattern) == len(p)+1 && pattern[len(p)] == '/' && pattern[:len(p)] == p
}

// routeMethod is the method part of the name of a request served by a
// pattern without a method. HEAD is GET, as a "GET" pattern serves it; a
// method net/http does not name is OtherMethod.
func routeMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead:
		return http.MethodGet
	case http.MethodPost:
		return http.MethodPost
	case http.MethodPut:
		return http.MethodPut
	case http.MethodPatch:
		return http.MethodPatch
	case http.MethodDelete:
		return http.MethodDelete
	case http.MethodConnect:
		return http.MethodConnect
	case http.MethodOptions:
		return http.MethodOptions
	case http.MethodTrace:
		return http.MethodTrace
	}
	return refusal.OtherMethod
}

// splitPattern splits a ServeMux pattern into its method, "" when it has
// none, and the rest ("GET /a" gives "GET" and "/a").
func splitPattern(p string) (method, rest string) {
	if i := strings.IndexAny(p, " \t"); i >= 0 {
		return p[:i], strings.TrimLeft(p[i+1:], " \t")
	}
	return "", p
}
