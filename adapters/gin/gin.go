package sluicegin

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/gin/internal/callerid"
	"github.com/sluice-go/sluice/adapters/gin/internal/refusal"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
)

// NoRoute is the resource of every request no route serves: gin runs global
// middleware for those too, before its 404 (or 405, with
// HandleMethodNotAllowed). It is the net/http adapter's name for such requests, so one rule limits such
// traffic through either adapter, and a scan of random paths or methods
// makes one resource, not one per path.
const NoRoute = sluicehttp.NoRoute

// ArgFunc extracts one argument for param rules from a request. A nil result
// means the request has no value for it.
type ArgFunc func(c *gin.Context) any

// ClientIP extracts the client's IP address as gin.Context.ClientIP reports
// it (which trusts forwarding headers only from the engine's trusted
// proxies), as a string.
func ClientIP() ArgFunc {
	return func(c *gin.Context) any {
		if ip := c.ClientIP(); ip != "" {
			return ip
		}
		return nil
	}
}

// Header extracts the first value of the named request header as a string,
// or nil when it is absent or empty.
func Header(name string) ArgFunc {
	key := http.CanonicalHeaderKey(name)
	return func(c *gin.Context) any {
		if v := c.Request.Header.Get(key); v != "" {
			return v
		}
		return nil
	}
}

// Param extracts the named path parameter of the route (":id" is
// Param("id")) as a string, or nil when it is empty.
func Param(name string) ArgFunc {
	return func(c *gin.Context) any {
		if v := c.Param(name); v != "" {
			return v
		}
		return nil
	}
}

// Query extracts the first value of the named URL query parameter as a
// string, or nil when it is absent or empty.
func Query(name string) ArgFunc {
	return func(c *gin.Context) any {
		if v := c.Query(name); v != "" {
			return v
		}
		return nil
	}
}

// BlockHandler writes the response to a request that sluice refused. err
// matches sluice.ErrBlocked; errors.As gives the *sluice.BlockError. The
// middleware aborts the context after it returns.
type BlockHandler func(c *gin.Context, err error)

// DefaultBlockHandler is the block handler used without WithBlockHandler or
// WithRefusalPolicy: the default sluicehttp.RefusalPolicy's response, the
// same as the net/http adapter's (429 for rate limits, 503 for overload,
// with Retry-After; see sluicehttp.RefusalPolicy).
func DefaultBlockHandler(c *gin.Context, err error) {
	refuse(c, sluicehttp.RefusalPolicy{}, err)
}

// refuse aborts c with p's response to the refusal err: its status and
// Retry-After, and the status text as the body.
func refuse(c *gin.Context, p sluicehttp.RefusalPolicy, err error) {
	status, wait := p.Response(err)
	if wait > 0 {
		c.Header("Retry-After", strconv.FormatInt(wait, 10))
	}
	c.Abort()
	c.String(status, http.StatusText(status))
}

// DefaultErrorFunc is the error func used without WithErrorFunc: the last
// error recorded with gin.Context.Error whose type is not
// gin.ErrorTypeBind, or else a *sluicehttp.StatusError when the response
// status is 5xx, or else nil.
func DefaultErrorFunc(c *gin.Context) error {
	for i := len(c.Errors) - 1; i >= 0; i-- {
		if e := c.Errors[i]; e.Type != gin.ErrorTypeBind && e.Err != nil {
			return e.Err
		}
	}
	if st := c.Writer.Status(); st >= 500 && st < 600 {
		return &sluicehttp.StatusError{Code: st}
	}
	return nil
}

// Option configures Middleware.
type Option func(*config)

type config struct {
	name   func(*gin.Context) string
	args   []ArgFunc
	block  BlockHandler // nil: policy's
	policy sluicehttp.RefusalPolicy
	errf   func(*gin.Context) error
	// rateLimit and xRateLimit: WithRateLimitHeaders.
	rateLimit, xRateLimit bool
	caller                func(*http.Request) string
}

// WithResourceName names each request's resource with f instead of the
// default "METHOD template". If f returns "", the request is served without
// any entry.
func WithResourceName(f func(c *gin.Context) string) Option {
	return func(cf *config) { cf.name = f }
}

// WithArgs passes, for param rules, the values the extractors give, in order,
// as the entry's positional arguments (sluice.WithArgs). Later calls append.
func WithArgs(extractors ...ArgFunc) Option {
	return func(cf *config) { cf.args = append(cf.args, extractors...) }
}

// WithBlockHandler replaces the refusal policy's response to refused
// requests (DefaultBlockHandler by default) with h, which writes the whole
// response.
func WithBlockHandler(h BlockHandler) Option {
	return func(cf *config) { cf.block = h }
}

// WithRefusalPolicy answers refused requests with p's status and
// Retry-After instead of the default policy's, as the net/http adapter's
// option of the same name does. WithBlockHandler, which writes the whole
// response, takes precedence.
func WithRefusalPolicy(p sluicehttp.RefusalPolicy) Option {
	return func(cf *config) { cf.policy = p }
}

// WithErrorFunc replaces DefaultErrorFunc: once the handlers are done, f
// returns the error to record on the entry (nil for success), for circuit
// breakers and error statistics.
func WithErrorFunc(f func(c *gin.Context) error) Option {
	return func(cf *config) { cf.errf = f }
}

// WithCaller makes the middleware read each request's caller from src, as
// the net/http adapter's option of the same name does (see
// sluicehttp.CallerSource, and its note on trust): a caller an authority
// rule refuses gets 403, and a caller no entry may carry 400 without
// entering. It panics on a src that sets no field, more than one, or an
// unknown Cert.
func WithCaller(src sluicehttp.CallerSource) Option {
	f := callerid.HTTP("sluicegin", src.Header, src.Cert, src.Func)
	return func(cf *config) { cf.caller = f }
}

// notEntered answers a request whose Entry returned err: the block
// handler's answer to a refusal, 400 to a caller no entry may carry (never
// failing open past an authority rule), and otherwise the next handlers'
// (fail open: see the package doc).
func notEntered(c *gin.Context, cf *config, err error) {
	switch {
	case errors.Is(err, sluice.ErrBlocked):
		cf.block(c, err)
		c.Abort()
	case errors.Is(err, sluice.ErrBadCaller):
		c.AbortWithStatus(http.StatusBadRequest)
	default:
		c.Next()
	}
}

// maxStackArgs is how many extracted arguments live on the stack.
const maxStackArgs = 4

// Middleware returns a gin middleware that runs each request through an
// inbound entry of g (nil means the default engine, looked up on each
// request). It is safe for concurrent use.
//
// complexity: the request path (name, options, entry, refusal, RateLimit fields, exit) in one closure, so that the options, arguments and budget stay on the stack
func Middleware(g *sluice.Engine, opts ...Option) gin.HandlerFunc {
	cf := config{errf: DefaultErrorFunc}
	for _, o := range opts {
		o(&cf)
	}
	if cf.block == nil {
		p := cf.policy
		cf.block = func(c *gin.Context, err error) { refuse(c, p, err) }
	}
	if cf.errf == nil {
		cf.errf = DefaultErrorFunc
	}
	ns := new(refusal.Names)
	return func(c *gin.Context) {
		var name string
		if cf.name != nil {
			if name = cf.name(c); name == "" {
				c.Next()
				return
			}
		} else if tmpl := c.FullPath(); tmpl != "" {
			name = ns.Get(c.Request.Method, tmpl)
		} else {
			name = NoRoute
		}
		opts := [4]sluice.EntryOption{sluice.WithTraffic(sluice.Inbound)}
		n := 1
		var budget sluice.Budget
		if cf.rateLimit {
			opts[n] = sluice.WithBudget(&budget)
			n++
		}
		if cf.caller != nil {
			opts[n] = sluice.WithCaller(cf.caller(c.Request))
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
			err error
		)
		if g == nil {
			p, err = sluice.EntryContext(c.Request.Context(), name, opts[:n]...)
		} else {
			p, err = g.EntryContext(c.Request.Context(), name, opts[:n]...)
		}
		if cf.rateLimit {
			setRateLimitHeaders(c.Writer.Header(), &budget, cf.xRateLimit)
		}
		if err != nil {
			notEntered(c, &cf, err)
			return
		}
		done := false
		defer func() {
			if !done {
				p.SetError(sluicehttp.ErrHandlerPanic)
			} else if err := cf.errf(c); err != nil {
				p.SetError(err)
			}
			p.Exit()
		}()
		c.Next()
		done = true
	}
}
