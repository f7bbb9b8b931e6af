package sluiceconnect

import (
	"context"
	"errors"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice"
)

// DefaultCode is the code of a refusal under the default policy:
// CodePermissionDenied for a caller an authority rule refuses
// (sluice.BlockAuthority; HTTP 403), CodeUnavailable for overload (a full
// concurrency limit, system protection, an open or probing circuit
// breaker; see sluice.BlockError.Overloaded; HTTP 503), CodeResourceExhausted
// for rate limits and everything else (HTTP 429), as the gRPC adapter
// answers.
func DefaultCode(be *sluice.BlockError) connect.Code {
	if be.Type == sluice.BlockAuthority {
		return connect.CodePermissionDenied
	}
	if be.Overloaded() {
		return connect.CodeUnavailable
	}
	return connect.CodeResourceExhausted
}

// RefusalPolicy decides the error of refused calls. The zero value is the
// default policy: DefaultCode's code; one message per block type ("sluice:
// blocked by flow rule"), without resource, measurement, limit or wait; a
// google.rpc.RetryInfo detail and a Retry-After header (whole seconds,
// rounded up) carrying the rule's wait when it knows one, and for overload
// without one a second, as the other adapters do.
type RefusalPolicy struct {
	// Code returns the code of a refusal. Nil, or a result of 0, means
	// DefaultCode.
	Code func(be *sluice.BlockError) connect.Code
	// OverloadRetryAfter is the retry delay of an overload refusal whose
	// block error carries no RetryAfter. Zero means one second; a negative
	// value sends none.
	OverloadRetryAfter time.Duration
}

// Error returns the error of a refused call whose Entry returned err. An
// err that is not a *sluice.BlockError gets CodeResourceExhausted and the
// message "sluice: blocked".
func (p RefusalPolicy) Error(err error) *connect.Error {
	var be *sluice.BlockError
	if !errors.As(err, &be) {
		return connect.NewError(connect.CodeResourceExhausted, errors.New("sluice: blocked"))
	}
	code := DefaultCode(be)
	if p.Code != nil {
		if c := p.Code(be); c != 0 {
			code = c
		}
	}
	wait := be.RetryAfter
	if wait <= 0 && be.Overloaded() {
		wait = p.OverloadRetryAfter
		if wait == 0 {
			wait = time.Second
		}
	}
	ce := connect.NewError(code, errors.New("sluice: blocked by "+be.Type.String()+" rule"))
	if wait > 0 {
		if d, derr := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}); derr == nil {
			ce.AddDetail(d)
		}
		s := int64(wait / time.Second)
		if wait%time.Second != 0 {
			s++
		}
		ce.Meta().Set("Retry-After", strconv.FormatInt(s, 10))
	}
	return ce
}

// BlockFunc returns the error a refused call ends with. err matches
// sluice.ErrBlocked; errors.As gives the *sluice.BlockError. A nil result is
// replaced by the refusal policy's.
type BlockFunc func(ctx context.Context, spec connect.Spec, err error) error

// WithRefusalPolicy ends refused calls with p's error instead of the
// default policy's. WithBlockFunc takes precedence.
func WithRefusalPolicy(p RefusalPolicy) Option {
	return func(cf *config) { cf.policy = p }
}

// WithBlockFunc replaces the refusal policy as the maker of refused calls'
// errors.
func WithBlockFunc(f BlockFunc) Option {
	return func(cf *config) { cf.block = f }
}

// blocked returns the error for a refused call.
func (cf *config) blocked(ctx context.Context, spec connect.Spec, err error) error {
	if cf.block != nil {
		if e := cf.block(ctx, spec, err); e != nil {
			return e
		}
	}
	return cf.policy.Error(err)
}
