// Package refusal holds what the HTTP and gRPC adapters share of their
// answers to refused requests and of their resource names: the default
// status of a refusal and its Retry-After, and the cache of "METHOD
// template" names.
package refusal

import (
	"errors"
	"net/http"
	"time"

	"github.com/sluice-go/sluice/internal/core"
)

// NoRoute is the resource of every request no route pattern names: a path
// no route matches (404), a method the matching route does not serve (405),
// a redirect the mux makes itself, and any request through a handler that
// is neither a ServeMux nor routed by one. One resource for all of them
// keeps a scan of random paths or methods from making a resource per path;
// a rule on NoRoute limits such traffic as a whole.
const NoRoute = "(no route)"

// OtherMethod is the method part of the resource name of a request served by
// a pattern without a method (such as "/files/") whose method is none of the
// nine net/http names (http.MethodGet to http.MethodTrace): "/files/"
// serving PROPFIND is the resource "OTHER /files/".
const OtherMethod = "OTHER"

// DefaultStatus is the response status of a refusal under the default
// policy: 403 Forbidden for a caller an authority rule refuses
// (core.BlockAuthority), 503 Service Unavailable for overload
// (be.Overloaded), 429 Too Many Requests otherwise.
func DefaultStatus(be *core.BlockError) int {
	if be.Type == core.BlockAuthority {
		return http.StatusForbidden
	}
	if be.Overloaded() {
		return http.StatusServiceUnavailable
	}
	return http.StatusTooManyRequests
}

// DefaultOverloadRetryAfter is the wait the default policy advertises with
// an overload refusal whose rule cannot tell when capacity frees (a
// concurrency limit, system protection, a half-open breaker), so that
// clients that retry in a loop back off instead of retrying at once.
const DefaultOverloadRetryAfter = time.Second

// Response is the status and Retry-After (whole seconds, 0 for none) of a
// refusal under a sluicehttp.RefusalPolicy of those fields: statusOf (nil:
// DefaultStatus; a status outside 100-999 means DefaultStatus too), the
// block error's RetryAfter when positive, else for overload
// overloadRetryAfter (0: DefaultOverloadRetryAfter; negative: none). An
// error that is not a *core.BlockError gets 429 and no Retry-After.
func Response(statusOf func(be *core.BlockError) int, overloadRetryAfter time.Duration, err error) (status int, retryAfter int64) {
	var be *core.BlockError
	if !errors.As(err, &be) {
		return http.StatusTooManyRequests, 0
	}
	status = DefaultStatus(be)
	if statusOf != nil {
		if s := statusOf(be); s >= 100 && s <= 999 {
			status = s
		}
	}
	wait := be.RetryAfter
	if wait <= 0 && be.Overloaded() {
		wait = overloadRetryAfter
		if wait == 0 {
			wait = DefaultOverloadRetryAfter
		}
	}
	return status, seconds(wait)
}

// RetryAfterSeconds returns the wait a block error asks for, in whole
// seconds rounded up, or 0 when err is not a *core.BlockError or carries
// no RetryAfter. (RefusalPolicy.Response adds the default wait of overload
// refusals.)
func RetryAfterSeconds(err error) int64 {
	var be *core.BlockError
	if !errors.As(err, &be) {
		return 0
	}
	return seconds(be.RetryAfter)
}

// seconds returns d in whole seconds rounded up, or 0 when d is not
// positive.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}
