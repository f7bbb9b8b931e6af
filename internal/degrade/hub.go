package degrade

import (
	"sync"

	"github.com/sluice-go/sluice/internal/notify"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// State and its values are the public stat.BreakerState and
// stat.BreakerClosed (...), named here as the breakers know them.
type State = stat.BreakerState

const (
	Closed   = stat.BreakerClosed
	Open     = stat.BreakerOpen
	HalfOpen = stat.BreakerHalfOpen
)

// Transition is one change of a circuit breaker's state, as the
// engine's event stream receives it (stat.EventBreaker).
type Transition struct {
	// Resource is the breaker's resource.
	Resource string
	// Rule is the breaker's rule in force when it changed state.
	Rule rules.CircuitBreaker
	// From and To are the states before and after.
	From, To State
	// Snapshot is the value that caused the change:
	//   - Closed to Open: the observed value that crossed the threshold (the
	//     ratio of slow or failed calls, or the error count);
	//   - Open to HalfOpen: 0;
	//   - HalfOpen to Open: the failed probe's response time in
	//     milliseconds, or, when probes that never exited were given up, the
	//     milliseconds since the last of them was admitted;
	//   - HalfOpen to Closed: the number of successful probes.
	Snapshot float64
	// At is the clock reading of the change, in nanoseconds.
	At int64
}

// Listener receives breaker state changes. It runs outside any lock of the
// breaker and may call back into the engine.
type Listener func(Transition)

// Hub is what the breakers of one engine share: the error classifier, the
// listeners, and the ordered delivery of state changes (a notify.Hub: in
// order, one at a time, outside every lock, re-entrant). It is safe for
// concurrent use.
type Hub struct {
	isFailure func(error) bool

	mu     sync.Mutex // serializes transitions, which queue under it
	events notify.Hub[Transition]
}

// NewHub returns a Hub whose breakers count an error recorded with SetError
// as a failure when isFailure reports true for it. A nil isFailure counts
// every non-nil error.
func NewHub(isFailure func(error) bool) *Hub { return &Hub{isFailure: isFailure} }

// AddListener registers l to receive every state change that happens after
// it returns, and returns a function that unregisters it (calling that more
// than once does nothing). A nil l is ignored.
func (h *Hub) AddListener(l Listener) (remove func()) { return h.events.Listen(l) }

// drain delivers queued transitions, in order, unless another call is
// already doing so (possibly further up this goroutine's stack, when a
// listener caused a transition): that call delivers them when the current
// listener returns. A panicking listener propagates its panic; the
// transitions still queued are delivered by the next drain.
func (h *Hub) drain() { h.events.Drain() }
