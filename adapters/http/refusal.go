package sluicehttp

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-go/sluice/core"
)

// DefaultStatus is the response status of a refusal under the default
// policy: 503 Service Unavailable for overload (be.Overloaded), 429 Too
// Many Requests otherwise.
func DefaultStatus(be *core.BlockError) int {
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

// RefusalPolicy decides the status and the Retry-After header of refused
// requests. The zero value is the default policy: DefaultStatus, the block
// error's RetryAfter when it is positive, and DefaultOverloadRetryAfter for
// an overload refusal without one. A RefusalPolicy is a plain value, safe
// for concurrent use when its Status func is.
type RefusalPolicy struct {
	// Status returns the response status of a refusal. Nil, or a result
	// outside 100-999, means DefaultStatus.
	Status func(be *core.BlockError) int
	// OverloadRetryAfter is the wait advertised with an overload refusal
	// (see BlockError.Overloaded) whose block error carries no RetryAfter. Zero means
	// DefaultOverloadRetryAfter; a negative value sends no Retry-After for
	// them.
	OverloadRetryAfter time.Duration
}

// Response returns the status of the response to a refusal err and its
// Retry-After in whole seconds, rounded up (at least 1), or 0 for no
// header. An err that is not a *sluice.BlockError gets 429 and no header.
func (p RefusalPolicy) Response(err error) (status int, retryAfter int64) {
	var be *core.BlockError
	if !errors.As(err, &be) {
		return http.StatusTooManyRequests, 0
	}
	status = DefaultStatus(be)
	if p.Status != nil {
		if s := p.Status(be); s >= 100 && s <= 999 {
			status = s
		}
	}
	wait := be.RetryAfter
	if wait <= 0 && be.Overloaded() {
		wait = p.OverloadRetryAfter
		if wait == 0 {
			wait = DefaultOverloadRetryAfter
		}
	}
	return status, seconds(wait)
}

// Write answers a refused request: the status and Retry-After of Response,
// and the status text as a plain-text body. The body names neither the rule
// nor its numbers, which are the service's business, and is the same for
// every refusal of one status, so that clients and logs can group them.
func (p RefusalPolicy) Write(w http.ResponseWriter, err error) {
	status, wait := p.Response(err)
	if wait > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(wait, 10))
	}
	http.Error(w, http.StatusText(status), status)
}

// RetryAfterSeconds returns the wait a block error asks for, in whole
// seconds rounded up, or 0 when err is not a *sluice.BlockError or carries
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
