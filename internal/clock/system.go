package clock

import (
	"time"

	"github.com/sluice-go/sluice/internal/core"
)

// System returns the process's real monotonic clock, the default of every
// engine and store. Reading it costs
// about half of time.Now: it reads only the monotonic clock.
func System() core.Clock { return systemClock{} }

var clockBase = time.Now()

type systemClock struct{}

func (systemClock) Nanotime() int64 { return int64(time.Since(clockBase)) }

func (systemClock) NewTimer(d time.Duration) core.Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

// WallOffset returns what turns a reading of c into Unix ns: the system
// clock's origin on the wall clock, or 0 for any other clock (a manual
// clock is read as Unix ns).
func WallOffset(c core.Clock) int64 {
	if _, ok := c.(systemClock); ok {
		return clockBase.UnixNano()
	}
	return 0
}
