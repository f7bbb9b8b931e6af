package sluicehttp

import (
	"net/http"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/refusal"
)

// WithRateLimitHeaders makes the middleware tell every client its
// remaining budget: each request's entry asks for it (sluice.WithBudget),
// and the response, whether the request passed or was refused (with
// Retry-After as before), carries the RateLimit-Policy and RateLimit
// header fields of draft-ietf-httpapi-ratelimit-headers for the tightest
// rate rule that decided it:
//
//	RateLimit-Policy: "api";q=100;w=1
//	RateLimit: "api";r=42;t=1
//
// The policy's name is the rule's ID ("default" without one), q its
// limit, w its window in seconds, r the requests remaining and t the
// seconds until the budget is whole again (rounded up). With xRateLimit,
// the response also carries X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset (seconds from now). A resource without a rate rule
// gets none of them. Off by default: asking for the budget costs each
// entry a little (docs/design/benchmarks.md, "Remaining budget"), and
// what a rule allows is the service's business until it chooses to tell.
// docs/middleware.md says what "remaining" means for each kind of rule,
// and what an instance knows of a cluster rule's.
func WithRateLimitHeaders(xRateLimit bool) Option {
	return func(c *config) {
		c.rateLimit = true
		c.xRateLimit = xRateLimit
	}
}

// setRateLimitHeaders writes b's header fields to h; nothing when no rate
// rule decided the entry.
func setRateLimitHeaders(h http.Header, b *sluice.Budget, x bool) {
	if b.Limit <= 0 {
		return
	}
	policy, state := refusal.RateLimitFields(*b)
	v := []string{policy, state} // one allocation for both fields' values
	h[policyKey] = v[0:1:1]
	h[rateLimitKey] = v[1:2:2]
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
