package sluiceconnect

import (
	"errors"
	"net/http"

	"connectrpc.com/connect"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/connect/internal/refusal"
)

// A client's own budget (docs/middleware.md, "RateLimit headers on a
// public API"): with WithRateLimitHeaders, a client's unary call asks its
// entry for the budget of the client's own rules and adds the fields where
// the caller reads the server's, after them: to the response headers of a
// call that passed, to the metadata of its error otherwise (alone there
// when the client refused the call: the server never saw it). A header
// then lists the server's policies and the client's (their rule IDs tell
// them apart). A client stream the client refuses has them in its error's
// metadata; one that passes has only the server's.

// addRateLimitFields adds b's fields to h after those h holds; nothing
// when no rate rule decided the entry.
func addRateLimitFields(h http.Header, b *sluice.Budget, x bool) {
	if b.Limit <= 0 {
		return
	}
	policy, state := refusal.RateLimitFields(*b)
	h.Add(refusal.PolicyField, policy)
	h.Add(refusal.RateLimitField, state)
	if x {
		l, r, t := refusal.XRateLimitFields(*b)
		h.Add(refusal.XLimitField, l)
		h.Add(refusal.XRemainField, r)
		h.Add(refusal.XResetField, t)
	}
}

// tellClient adds b's fields to a client call's response headers, or to
// its error's metadata when err is a *connect.Error.
func (i *Interceptor) tellClient(resp connect.AnyResponse, err error, b *sluice.Budget) {
	if err == nil {
		if resp != nil {
			addRateLimitFields(resp.Header(), b, i.cf.xRateLimit)
		}
		return
	}
	var ce *connect.Error // on the heap: only on an error
	if errors.As(err, &ce) {
		addRateLimitFields(ce.Meta(), b, i.cf.xRateLimit)
	}
}
