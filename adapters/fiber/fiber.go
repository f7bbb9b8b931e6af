package sluicefiber

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gofiber/fiber/v2"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/fiber/internal/refusal"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
)

// NoRoute is the resource of every request no route serves (404, 405), the
// net/http adapter's name for such requests.
const NoRoute = sluicehttp.NoRoute

// ArgFunc extracts one argument for param rules from a request. A nil
// result means the request has no value for it. Values must not alias
// fasthttp's buffers, which it reuses once the request ends: the
// extractors of this package copy them.
type ArgFunc func(c *fiber.Ctx) any

// Param extracts the named path parameter of the route (":id" is
// Param("id")) as a string, or nil when it is empty. Path parameters are
// known to a middleware of the route itself (app.Get(path, mw, handler)),
// not to one installed with Use: see the package doc.
func Param(name string) ArgFunc {
	return func(c *fiber.Ctx) any { return orNil(c.Params(name)) }
}

// Header extracts the first value of the named request header as a string,
// or nil when it is absent or empty.
func Header(name string) ArgFunc {
	return func(c *fiber.Ctx) any { return orNil(c.Get(name)) }
}

// Query extracts the value of the named URL query parameter as a string,
// or nil when it is absent or empty.
func Query(name string) ArgFunc {
	return func(c *fiber.Ctx) any { return orNil(c.Query(name)) }
}

// ClientIP extracts the client's IP address as fiber.Ctx.IP reports it
// (forwarding headers only with the app's ProxyHeader and trusted proxies
// settings), as a string.
func ClientIP() ArgFunc {
	return func(c *fiber.Ctx) any { return orNil(c.IP()) }
}

// orNil returns a copy of s (fasthttp reuses the buffers fiber's strings
// point into), or nil when it is empty.
func orNil(s string) any {
	if s == "" {
		return nil
	}
	return strings.Clone(s)
}

// BlockHandler answers a request that sluice refused. err matches
// sluice.ErrBlocked; errors.As gives the *sluice.BlockError. Its result is the
// middleware's, as a handler's error would be.
type BlockHandler func(c *fiber.Ctx, err error) error

// Option configures Middleware.
type Option func(*config)

type config struct {
	name    func(*fiber.Ctx) string
	args    []ArgFunc
	block   BlockHandler // nil: policy's
	policy  sluicehttp.RefusalPolicy
	isError func(status int) bool
	// rateLimit and xRateLimit: WithRateLimitHeaders.
	rateLimit, xRateLimit bool
	caller                func(*fiber.Ctx) string
}

// WithResourceName names each request's resource with f instead of the
// default "METHOD template". If f returns "", the request is served without
// any entry.
func WithResourceName(f func(c *fiber.Ctx) string) Option {
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
// errors (the handler's error, or a *sluicehttp.StatusError), for circuit
// breakers and error statistics. The status of a handler's error is its
// *fiber.Error's code, or 500 for any other error, as fiber's default error
// handler answers. The default counts 500 to 599.
func WithErrorStatus(f func(status int) bool) Option {
	return func(cf *config) { cf.isError = f }
}

func serverError(status int) bool { return status >= 500 && status < 600 }

// refuse answers c with p's response to the refusal err: its status and
// Retry-After, and the status text as the body.
func refuse(c *fiber.Ctx, p sluicehttp.RefusalPolicy, err error) error {
	status, wait := p.Response(err)
	if wait > 0 {
		c.Set("Retry-After", strconv.FormatInt(wait, 10))
	}
	return c.Status(status).SendString(http.StatusText(status))
}

// maxStackArgs is how many extracted arguments live on the stack.
const maxStackArgs = 4

// Middleware returns a fiber handler that runs each request through an
// inbound entry of g (nil means the default engine, looked up on each
// request), for a route (app.Get(path, mw, handler)), a group or Use. It
// is safe for concurrent use.
func Middleware(g *sluice.Engine, opts ...Option) fiber.Handler {
	m := &middleware{g: g, cf: config{isError: serverError}}
	for _, o := range opts {
		o(&m.cf)
	}
	if m.cf.block == nil {
		p := m.cf.policy
		m.cf.block = func(c *fiber.Ctx, err error) error { return refuse(c, p, err) }
	}
	if m.cf.isError == nil {
		m.cf.isError = serverError
	}
	return m.handle
}

type middleware struct {
	g      *sluice.Engine
	cf     config
	names  refusal.Names
	routes routeIndex
}

// handle runs the rest of c's handlers inside an entry.
//
// complexity: the request path (name, options, entry, refusal, RateLimit fields, exit) in one function, so that the options, arguments and budget stay on the stack
func (m *middleware) handle(c *fiber.Ctx) (err error) {
	var name string
	if m.cf.name != nil {
		if name = m.cf.name(c); name == "" {
			return c.Next()
		}
	} else {
		name = m.resource(c)
	}
	opts := [4]sluice.EntryOption{sluice.WithTraffic(sluice.Inbound)}
	n := 1
	var budget sluice.Budget
	if m.cf.rateLimit {
		opts[n] = sluice.WithBudget(&budget)
		n++
	}
	if m.cf.caller != nil {
		opts[n] = sluice.WithCaller(m.cf.caller(c))
		n++
	}
	if len(m.cf.args) > 0 {
		var buf [maxStackArgs]any
		args := buf[:0]
		for _, f := range m.cf.args {
			args = append(args, f(c))
		}
		opts[n] = sluice.WithArgs(args...)
		n++
	}
	var (
		p   sluice.Pass
		eer error
	)
	ctx := c.UserContext()
	if m.g == nil {
		p, eer = sluice.EntryContext(ctx, name, opts[:n]...)
	} else {
		p, eer = m.g.EntryContext(ctx, name, opts[:n]...)
	}
	if m.cf.rateLimit {
		setRateLimitHeaders(c, &budget, m.cf.xRateLimit)
	}
	if eer != nil {
		switch {
		case errors.Is(eer, sluice.ErrBlocked):
			return m.cf.block(c, eer)
		case errors.Is(eer, sluice.ErrBadCaller):
			// never fail open past an authority rule
			return c.Status(http.StatusBadRequest).SendString(http.StatusText(http.StatusBadRequest))
		}
		return c.Next() // fail open: see the package doc
	}
	done := false
	defer func() {
		var rec error
		if !done {
			rec = sluicehttp.ErrHandlerPanic
		} else if st := status(c, err); m.cf.isError(st) {
			rec = err
			if rec == nil {
				rec = &sluicehttp.StatusError{Code: st}
			}
		}
		if !done || !handOver(c, p, rec) {
			if rec != nil {
				p.SetError(rec)
			}
			p.Exit()
		}
	}()
	err = c.Next()
	done = true
	return err
}

// status is the response status of a request its handlers ended with err:
// err's as fiber's default error handler answers it (a *fiber.Error's
// code, 500 for other errors), else the status set.
func status(c *fiber.Ctx, err error) int {
	if err == nil {
		return c.Response().StatusCode()
	}
	var fe *fiber.Error
	if errors.As(err, &fe) {
		return fe.Code
	}
	return fiber.StatusInternalServerError
}

// resource returns the default resource name of c: "METHOD template",
// HEAD counting as GET, or NoRoute.
func (m *middleware) resource(c *fiber.Ctx) string {
	path := m.routes.template(c)
	if path == "" {
		return NoRoute
	}
	method := c.Method()
	if method == fiber.MethodHead {
		method = fiber.MethodGet
	}
	return m.names.Get(method, path)
}

// routeIndex tells the app's Use routes from its routes, so that a
// middleware installed with Use finds the route that will serve the
// request. It is rebuilt when the app's handler count changes.
type routeIndex struct {
	mu  sync.Mutex
	cur atomic.Pointer[routes]
}

type routes struct {
	app      *fiber.App
	handlers uint32
	// pos is the stack position of every route: its method's index and
	// its index in that method's stack; use marks the Use routes.
	pos map[*fiber.Route]position
}

type position struct {
	method, index int
	use           bool
}

// template returns the path template of the route that serves c, "" for
// none: c's route when the middleware is one of its handlers, else (Use)
// the first route after it in the stack whose pattern matches the path.
func (x *routeIndex) template(c *fiber.Ctx) string {
	r := c.Route()
	rs := x.load(c.App())
	p, ok := rs.pos[r]
	if !ok {
		return ""
	}
	if !p.use {
		return r.Path
	}
	stack := c.App().Stack()[p.method]
	path := c.Path()
	cfg := c.App().Config()
	for _, s := range stack[p.index+1:] {
		if !rs.pos[s].use && fiber.RoutePatternMatch(path, s.Path, cfg) {
			return s.Path
		}
	}
	return ""
}

// load returns the index of app, rebuilt when routes were added.
func (x *routeIndex) load(app *fiber.App) *routes {
	if rs := x.cur.Load(); rs != nil && rs.app == app && rs.handlers == app.HandlersCount() {
		return rs
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	rs := &routes{app: app, handlers: app.HandlersCount(), pos: map[*fiber.Route]position{}}
	// GetRoutes(true) lists the routes that are not Use routes, in stack
	// order: a stack route is one when it is the next of that list.
	plain := app.GetRoutes(true)
	j := 0
	for mi, stack := range app.Stack() {
		for i, r := range stack {
			use := true
			if j < len(plain) && same(&plain[j], r) {
				use = false
				j++
			}
			rs.pos[r] = position{method: mi, index: i, use: use}
		}
	}
	x.cur.Store(rs)
	return rs
}

// same reports whether a (a copy GetRoutes made) is the route b.
func same(a, b *fiber.Route) bool {
	return a.Method == b.Method && a.Path == b.Path && len(a.Handlers) == len(b.Handlers) &&
		(len(a.Handlers) == 0 || &a.Handlers[0] == &b.Handlers[0])
}
