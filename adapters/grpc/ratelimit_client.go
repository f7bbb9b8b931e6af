package sluicegrpc

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/grpc/internal/refusal"
)

// A client's own budget (docs/middleware.md, "RateLimit headers on a
// public API"): with WithRateLimitMetadata, the client interceptors ask
// the entry of a call for its budget when the call was given grpc.Header
// or grpc.Trailer, and hand it over where the caller reads the server's:
// a refused call (the server never asked) gets the keys in the metadata
// of its grpc.Trailer, as a server's refusal does; an admitted unary call
// gets them appended to its grpc.Header metadata, after the values the
// server sent, so that the list of policies a "ratelimit" key holds names
// both the server's and the client's own (their rule IDs tell them
// apart). An admitted stream's header is the server's alone: gRPC writes
// it when the stream ends, on a goroutine of its own.

// clientAsks reports whether a client call given copts has somewhere to
// put its budget.
func clientAsks(copts []grpc.CallOption) bool {
	for _, o := range copts {
		switch o.(type) {
		case grpc.HeaderCallOption, grpc.TrailerCallOption:
			return true
		}
	}
	return false
}

// tellBefore hands the budget b of an entry that Entry answered with eer
// over before the call runs: to a server's caller, or into the trailer of a
// client's call refused.
func (cf *config) tellBefore(ctx context.Context, copts []grpc.CallOption, b *sluice.Budget, eer error) {
	switch {
	case cf.traffic == sluice.Inbound:
		cf.sendBudget(ctx, b, eer != nil)
	case errors.Is(eer, sluice.ErrBlocked):
		cf.tellClient(copts, b, true)
	}
}

// tellClient appends b's keys to the trailer (refused) or header (admitted)
// metadata that copts ask for.
func (cf *config) tellClient(copts []grpc.CallOption, b *sluice.Budget, refused bool) {
	if b.Limit <= 0 {
		return
	}
	for _, o := range copts {
		var md *metadata.MD
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			if !refused {
				md = o.HeaderAddr
			}
		case grpc.TrailerCallOption:
			if refused {
				md = o.TrailerAddr
			}
		}
		if md == nil {
			continue
		}
		if *md == nil {
			*md = metadata.MD{}
		}
		policy, state := refusal.RateLimitFields(*b)
		md.Append(strings.ToLower(refusal.PolicyField), policy)
		md.Append(strings.ToLower(refusal.RateLimitField), state)
		if cf.xRateLimit {
			l, r, t := refusal.XRateLimitFields(*b)
			md.Append(strings.ToLower(refusal.XLimitField), l)
			md.Append(strings.ToLower(refusal.XRemainField), r)
			md.Append(strings.ToLower(refusal.XResetField), t)
		}
	}
}
