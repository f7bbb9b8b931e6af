package sluicegrpc

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/grpc/internal/refusal"
)

// WithRateLimitMetadata makes the server interceptors tell every caller
// its remaining budget, as the HTTP adapters' WithRateLimitHeaders do, in
// response metadata: the keys "ratelimit-policy" and "ratelimit" (the
// RateLimit-Policy and RateLimit fields of draft-ietf-httpapi-ratelimit-
// headers, for the tightest rate rule that decided the call, such as
// `"api";q=100;w=1` and `"api";r=42;t=1`) and, with xRateLimit,
// "x-ratelimit-limit", "x-ratelimit-remaining" and "x-ratelimit-reset".
// An admitted call gets them in its header metadata (grpc.Header on the
// client), a refused one in its trailer (grpc.Trailer). A call whose
// resource has no rate rule gets none. The client interceptors take the
// option too: a call given grpc.Header or grpc.Trailer gets the budget of
// the client's own rules there (appended to the server's in the header of
// an admitted unary call; alone in the trailer of a call the client
// refuses). Off by default.
func WithRateLimitMetadata(xRateLimit bool) Option {
	return func(cf *config) {
		cf.rateLimit = true
		cf.xRateLimit = xRateLimit
	}
}

// sendBudget sends b's metadata with the call of ctx: in the header of an
// admitted call, in the trailer of a refused one. A call whose header has
// gone already (a stream handler that sent it) cannot take more; the
// error is ignored.
func (cf *config) sendBudget(ctx context.Context, b *sluice.Budget, refused bool) {
	if b.Limit <= 0 {
		return
	}
	policy, state := refusal.RateLimitFields(*b)
	kv := make([]string, 0, 10)
	kv = append(kv, strings.ToLower(refusal.PolicyField), policy, strings.ToLower(refusal.RateLimitField), state)
	if cf.xRateLimit {
		l, r, t := refusal.XRateLimitFields(*b)
		kv = append(kv, strings.ToLower(refusal.XLimitField), l, strings.ToLower(refusal.XRemainField), r, strings.ToLower(refusal.XResetField), t)
	}
	md := metadata.Pairs(kv...)
	if refused {
		_ = grpc.SetTrailer(ctx, md)
	} else {
		_ = grpc.SetHeader(ctx, md)
	}
}
