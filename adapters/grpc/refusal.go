package sluicegrpc

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice"
)

// DefaultCode is the status code of a refusal under the default policy:
// codes.Unavailable for overload (a full concurrency limit, system
// protection, an open or probing circuit breaker; see sluice.BlockError.Overloaded,
// which the HTTP adapters answer with 503), and codes.ResourceExhausted for
// rate limits and everything else (HTTP 429). Unavailable tells clients the
// server is momentarily short of capacity and a retry with backoff, perhaps
// elsewhere, may succeed; ResourceExhausted that the caller used up a quota.
// A caller an authority rule refuses (sluice.BlockAuthority) gets
// codes.PermissionDenied (HTTP 403): retrying will not help.
func DefaultCode(be *sluice.BlockError) codes.Code {
	if be.Type == sluice.BlockAuthority {
		return codes.PermissionDenied
	}
	if be.Overloaded() {
		return codes.Unavailable
	}
	return codes.ResourceExhausted
}

// ErrorInfoDomain is the domain of the google.rpc.ErrorInfo detail a
// RefusalPolicy with Details adds; its reason is the block type in upper
// case ("FLOW", "ISOLATION", ...).
const ErrorInfoDomain = "sluice"

// RefusalPolicy decides the status of refused calls. The zero value is the
// default policy:
//
//   - the code is DefaultCode's;
//   - the message is the same for every refusal of one block type ("sluice:
//     blocked by flow rule"): it carries no resource, measurement, limit or
//     wait, so callers can group errors by message and learn nothing of the
//     service's configuration;
//   - a google.rpc.RetryInfo detail carries the rule's wait when it knows
//     one, and for overload without one a second, as the HTTP
//     adapters' Retry-After does.
//
// A RefusalPolicy is a plain value, safe for concurrent use when its Code
// func is.
type RefusalPolicy struct {
	// Code returns the status code of a refusal. Nil, or a result of
	// codes.OK, means DefaultCode.
	Code func(be *sluice.BlockError) codes.Code
	// OverloadRetryAfter is the RetryInfo delay of an overload refusal
	// whose block error carries no RetryAfter. Zero means
	// one second; a negative value sends no
	// RetryInfo for them.
	OverloadRetryAfter time.Duration
	// Details adds a google.rpc.ErrorInfo detail (domain ErrorInfoDomain,
	// reason the block type) whose metadata name the resource ("resource"),
	// the value the rule measured ("observed"), its limit ("threshold"),
	// the rule's ID ("rule_id") and reason ("reason") when it has them. That
	// is the service's configuration: set it only when the callers are
	// trusted, such as services of the same owner.
	Details bool
}

// defaultOverloadRetryAfter is the wait of an overload refusal when the
// policy's OverloadRetryAfter is zero: one second, as the HTTP adapters'
// default policy advertises.
const defaultOverloadRetryAfter = time.Second

// Status returns the status of a refused call whose Entry returned err. An
// err that is not a *sluice.BlockError gets codes.ResourceExhausted and the
// message "sluice: blocked", without details.
func (p RefusalPolicy) Status(err error) *status.Status {
	var be *sluice.BlockError
	if !errors.As(err, &be) {
		return status.New(codes.ResourceExhausted, "sluice: blocked")
	}
	code := DefaultCode(be)
	if p.Code != nil {
		if c := p.Code(be); c != codes.OK {
			code = c
		}
	}
	wait := be.RetryAfter
	if wait <= 0 && be.Overloaded() {
		wait = p.OverloadRetryAfter
		if wait == 0 {
			wait = defaultOverloadRetryAfter
		}
	}
	st := status.New(code, message(be))
	if wait > 0 {
		st = withDetail(st, &errdetails.RetryInfo{RetryDelay: durationpb.New(wait)})
	}
	if p.Details {
		st = withDetail(st, errorInfo(be))
	}
	return st
}

// withDetail returns st with d added; st when d cannot be added (it can,
// as st is not OK).
func withDetail(st *status.Status, d protoadapt.MessageV1) *status.Status {
	if ds, err := st.WithDetails(d); err == nil {
		return ds
	}
	return st
}

// message is the status message of a refusal: one per block type.
func message(be *sluice.BlockError) string {
	return "sluice: blocked by " + be.Type.String() + " rule"
}

// errorInfo describes be for callers a policy with Details trusts.
func errorInfo(be *sluice.BlockError) *errdetails.ErrorInfo {
	md := map[string]string{
		"resource":  be.Resource,
		"observed":  strconv.FormatFloat(be.Observed, 'g', -1, 64),
		"threshold": strconv.FormatFloat(be.Threshold, 'g', -1, 64),
	}
	if id := be.Rule.ID; id != "" {
		md["rule_id"] = id
	}
	if be.Reason != "" {
		md["reason"] = be.Reason
	}
	return &errdetails.ErrorInfo{
		Reason:   strings.ToUpper(be.Type.String()),
		Domain:   ErrorInfoDomain,
		Metadata: md,
	}
}

// BlockFunc returns the error a refused call ends with. err matches
// sluice.ErrBlocked; errors.As gives the *sluice.BlockError. A nil result
// is replaced by the refusal policy's.
type BlockFunc func(ctx context.Context, method string, err error) error

// DefaultBlockFunc is the block func used without WithBlockFunc or
// WithRefusalPolicy: the default RefusalPolicy's status, as an error.
func DefaultBlockFunc(_ context.Context, _ string, err error) error {
	return RefusalPolicy{}.Status(err).Err()
}

// WithRefusalPolicy ends refused calls with p's status instead of the
// default policy's. WithBlockFunc, which makes the whole error, takes
// precedence.
func WithRefusalPolicy(p RefusalPolicy) Option {
	return func(cf *config) { cf.policy = p }
}

// WithBlockFunc replaces the refusal policy (DefaultBlockFunc by default)
// as the maker of refused calls' errors.
func WithBlockFunc(f BlockFunc) Option {
	return func(cf *config) { cf.block = f }
}

// blocked returns the error for a refused call.
func (cf *config) blocked(ctx context.Context, method string, err error) error {
	if cf.block != nil {
		if e := cf.block(ctx, method, err); e != nil {
			return e
		}
	}
	return cf.policy.Status(err).Err()
}
