package sluiceecho

import (
	"net/http"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/echo/internal/callerid"
	"github.com/sluice-go/sluice/adapters/echo/internal/refusal"
	sluicehttp "github.com/sluice-go/sluice/adapters/http"
)

// WithCaller makes the middleware read each request's caller from src, as
// the net/http adapter's option of the same name does (see
// sluicehttp.CallerSource, and its note on trust): a caller an authority
// rule refuses gets 403 (the refusal policy's status for
// sluice.BlockAuthority), and a caller no entry may carry 400 without
// entering. It panics when src sets no field, more than one, or an unknown
// Cert.
func WithCaller(src sluicehttp.CallerSource) Option {
	f := callerid.HTTP("sluiceecho", src.Header, src.Cert, src.Func)
	return func(cf *config) { cf.caller = f }
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

// setRateLimitHeaders writes b's header fields to h; nothing when no rate
// rule decided the entry.
func setRateLimitHeaders(h http.Header, b *sluice.Budget, x bool) {
	if b.Limit <= 0 {
		return
	}
	policy, state := refusal.RateLimitFields(*b)
	h[refusal.PolicyField] = []string{policy}
	h[refusal.RateLimitField] = []string{state}
	if x {
		l, r, t := refusal.XRateLimitFields(*b)
		h[refusal.XLimitField] = []string{l}
		h[refusal.XRemainField] = []string{r}
		h[refusal.XResetField] = []string{t}
	}
}
