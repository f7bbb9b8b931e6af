package sluiceconnect

import (
	"errors"
	"net/http"

	"connectrpc.com/connect"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/connect/internal/refusal"
)

// WithRateLimitHeaders makes the interceptor tell every client of a
// handler its remaining budget, as the net/http adapter's option of the
// same name does (sluicehttp.WithRateLimitHeaders): a call that passes
// carries the RateLimit-Policy and RateLimit fields of the tightest rate
// rule that decided it in its response headers, and a refused one (or one
// its handler fails with a *connect.Error) in its error's metadata, which
// connect sends as headers too; with xRateLimit, the X-RateLimit-Limit,
// -Remaining and -Reset fields as well. A procedure without a rate rule
// gets none. A client's calls get the budget of the client's own rules,
// added after the server's fields (ratelimit_client.go). Off by default.
func WithRateLimitHeaders(xRateLimit bool) Option {
	return func(cf *config) {
		cf.rateLimit = true
		cf.xRateLimit = xRateLimit
	}
}

// budget returns b when a call of spec reports its budget, else nil.
func (i *Interceptor) budget(spec connect.Spec, b *sluice.Budget) *sluice.Budget {
	if !i.cf.rateLimit {
		return nil
	}
	return b
}

// setErrorFields writes b's fields to err's metadata when err is a
// *connect.Error.
func setErrorFields(err error, b *sluice.Budget, x bool) {
	var ce *connect.Error
	if errors.As(err, &ce) {
		setRateLimitFields(ce.Meta(), b, x)
	}
}

// setRateLimitFields writes b's fields to h; nothing when no rate rule
// decided the entry.
func setRateLimitFields(h http.Header, b *sluice.Budget, x bool) {
	if b.Limit <= 0 {
		return
	}
	policy, state := refusal.RateLimitFields(*b)
	h[policyKey] = []string{policy}
	h[rateLimitKey] = []string{state}
	if x {
		l, r, t := refusal.XRateLimitFields(*b)
		h[xLimitKey] = []string{l}
		h[xRemainKey] = []string{r}
		h[xResetKey] = []string{t}
	}
}

// The fields' keys in an http.Header, canonical as Header.Set would make
// them, so that Header.Get and a later Set of the same field find them
// (the names on the wire are case-insensitive).
var (
	policyKey    = http.CanonicalHeaderKey(refusal.PolicyField)
	rateLimitKey = http.CanonicalHeaderKey(refusal.RateLimitField)
	xLimitKey    = http.CanonicalHeaderKey(refusal.XLimitField)
	xRemainKey   = http.CanonicalHeaderKey(refusal.XRemainField)
	xResetKey    = http.CanonicalHeaderKey(refusal.XResetField)
)
