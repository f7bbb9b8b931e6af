package sluicehttp

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/refusal"
)

// NoRoute is the resource of every request no route pattern names: a path
// no route matches (404), a method the matching route does not serve
// (405), a redirect the mux makes itself, and any request through a
// handler that is neither a ServeMux nor routed by one. A rule on NoRoute
// limits such traffic as a whole; the gin adapter names such requests the
// same (sluicegin.NoRoute).
const NoRoute = refusal.NoRoute

// RefusalPolicy decides the status and the Retry-After header of refused
// requests. The zero value is the default policy: the default status (503 for overload, sluice.BlockError.Overloaded, 429 otherwise), the block
// error's RetryAfter when it is positive, and one second for
// an overload refusal without one. A RefusalPolicy is a plain value, safe
// for concurrent use when its Status func is.
type RefusalPolicy struct {
	// Status returns the response status of a refusal. Nil, or a result
	// outside 100-999, means the default status (503 for overload, sluice.BlockError.Overloaded, 429 otherwise).
	Status func(be *sluice.BlockError) int
	// OverloadRetryAfter is the wait advertised with an overload refusal
	// (see BlockError.Overloaded) whose block error carries no RetryAfter. Zero means
	// one second; a negative value sends no Retry-After for
	// them.
	OverloadRetryAfter time.Duration
}

// Response returns the status and Retry-After (in whole seconds, rounded
// up; 0 for none) the policy gives a refusal whose Entry returned err. An
// err that is not a *sluice.BlockError gets 429 and no Retry-After. The gin
// adapter answers with it too, so both HTTP adapters refuse alike.
func (p RefusalPolicy) Response(err error) (status int, retryAfter int64) {
	return refusal.Response(p.Status, p.OverloadRetryAfter, err)
}

// Write answers a refused request: the status and Retry-After of Response,
// and the status text as a plain-text body. The body names neither the rule
// nor its numbers, which are the service's business, and is the same for
// every refusal of one status, so that clients and logs can group them.
func (p RefusalPolicy) write(w http.ResponseWriter, err error) {
	status, wait := p.Response(err)
	if wait > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(wait, 10))
	}
	http.Error(w, http.StatusText(status), status)
}
