package lease

import (
	"context"
	"time"

	"github.com/sluice-go/sluice/internal/clock"
	"github.com/sluice-go/sluice/internal/core"
)

// callContext returns the context of one Store call: a child of parent that
// ends d after now on clock c. With the system clock that is
// context.WithTimeout, whose deadline a Store passes on to its sockets. With
// any other clock (a test's ManualClock) the context carries no deadline and
// is cancelled, with cause context.DeadlineExceeded, when a timer of c
// fires; a goroutine waits for the timer and the returned cancel function
// waits for that goroutine, so none outlives the call.
func callContext(parent context.Context, c core.Clock, d time.Duration) (context.Context, context.CancelFunc) {
	if c == clock.System() {
		return context.WithTimeout(parent, d)
	}
	ctx, cancel := context.WithCancelCause(parent)
	t := c.NewTimer(d)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case <-t.C():
			cancel(context.DeadlineExceeded)
		case <-ctx.Done():
			t.Stop()
		}
	}()
	return ctx, func() {
		cancel(context.Canceled)
		<-exited
	}
}
