package sluicefiber

import (
	"fmt"
	"net/http"

	"github.com/gofiber/fiber/v2"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/fiber/internal/callerid"
	"github.com/sluice-go/sluice/adapters/fiber/internal/refusal"
)

// CallerSource says where the middleware reads each request's caller
// identity (sluice.WithCaller), which authority rules and per-caller flow
// rules read, as the net/http adapter's sluicehttp.CallerSource does (see
// its note on trust). Set exactly one field. A request whose source gives
// no caller enters without one; one whose caller is not an identity an
// entry may carry is answered 400 Bad Request without entering, and a
// caller an authority rule refuses gets 403 (the refusal policy's status
// for sluice.BlockAuthority).
type CallerSource struct {
	// Header names the request header that holds the caller ("X-Caller").
	Header string
	// Cert takes the caller from the leaf of the client certificate chain
	// the TLS handshake verified (a server whose tls.Config verifies client
	// certificates, fasthttp serving the *tls.Conn): "cn", "dns", "uri" or
	// "email", as sluicehttp.CallerSource.Cert.
	Cert string
	// Func returns the caller of a request, "" for none. A string it
	// returns may be one of fiber's (valid during the request only): the
	// entry does not keep it.
	Func func(c *fiber.Ctx) string
}

// WithCaller makes the middleware read each request's caller from src (see
// CallerSource). It panics when src sets no field, more than one, or an
// unknown Cert: a mistake of the program, not of a request.
func WithCaller(src CallerSource) Option {
	f := callerFunc(src)
	return func(cf *config) { cf.caller = f }
}

func callerFunc(src CallerSource) func(c *fiber.Ctx) string {
	set := 0
	for _, b := range []bool{src.Header != "", src.Cert != "", src.Func != nil} {
		if b {
			set++
		}
	}
	if set != 1 {
		panic(fmt.Sprintf("sluicefiber: a CallerSource sets exactly one of Header, Cert and Func; this one sets %d", set))
	}
	switch {
	case src.Func != nil:
		return src.Func
	case src.Header != "":
		name := http.CanonicalHeaderKey(src.Header)
		return func(c *fiber.Ctx) string { return c.Get(name) }
	}
	field := callerid.CertField(src.Cert)
	return func(c *fiber.Ctx) string {
		st := c.Context().TLSConnectionState()
		if st == nil || len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
			return ""
		}
		return field(st.VerifiedChains[0][0])
	}
}

// WithRateLimitHeaders makes the middleware tell every client its
// remaining budget, as the net/http adapter's option of the same name does
// (sluicehttp.WithRateLimitHeaders): every response, passed or refused,
// carries the RateLimit-Policy and RateLimit header fields of the
// tightest rate rule that decided the request, and with xRateLimit the
// X-RateLimit-Limit, -Remaining and -Reset fields too. Off by default.
func WithRateLimitHeaders(xRateLimit bool) Option {
	return func(cf *config) {
		cf.rateLimit = true
		cf.xRateLimit = xRateLimit
	}
}

// setRateLimitHeaders writes b's header fields to c's response; nothing
// when no rate rule decided the entry.
func setRateLimitHeaders(c *fiber.Ctx, b *sluice.Budget, x bool) {
	if b.Limit <= 0 {
		return
	}
	policy, state := refusal.RateLimitFields(*b)
	c.Set(refusal.PolicyField, policy)
	c.Set(refusal.RateLimitField, state)
	if x {
		l, r, t := refusal.XRateLimitFields(*b)
		c.Set(refusal.XLimitField, l)
		c.Set(refusal.XRemainField, r)
		c.Set(refusal.XResetField, t)
	}
}
