// Package clock holds what the engine's slots need of time beyond the
// core.Clock interface: a context-aware sleep.
package clock

import (
	"context"
	"time"

	"github.com/sluice-go/sluice/internal/core"
)

// Sleep waits for d on clock c, or until ctx is done. It returns nil after a
// full wait and ctx.Err() if the context ended first. A non-positive d
// returns at once (with ctx.Err() if ctx is already done).
func Sleep(ctx context.Context, c core.Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := c.NewTimer(d)
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
}
