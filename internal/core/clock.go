package core

import "time"

// Clock is the source of time for an engine. Everything in sluice that reads
// time, sleeps or ticks goes through a Clock, so tests can drive time by hand
// with a ManualClock.
//
// Implementations must be safe for concurrent use.
type Clock interface {
	// Nanotime returns monotonic time in nanoseconds since an arbitrary fixed
	// instant. It never goes backwards.
	Nanotime() int64
	// NewTimer returns a timer whose channel receives once, after d.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer made by a Clock.
type Timer interface {
	// C returns the channel that receives when the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It reports whether it stopped it.
	Stop() bool
}
