package sluicetest

import (
	"context"
	"time"

	"github.com/sluice-go/sluice"
	isluicetest "github.com/sluice-go/sluice/internal/sluicetest"
)

var _ sluice.Clock = (*ManualClock)(nil)

// ManualClock is a Clock that moves only when told to. Timers fire, in order
// of their deadlines, when Advance or Set moves the clock past them. It is
// safe for concurrent use.
type ManualClock struct{ c *isluicetest.ManualClock }

// NewManualClock returns a ManualClock that reads start nanoseconds.
func NewManualClock(start int64) *ManualClock {
	return &ManualClock{isluicetest.NewManualClock(start)}
}

// Nanotime returns the clock's current reading. time.Duration(Nanotime())
// prints it readably in test output.
func (c *ManualClock) Nanotime() int64 { return c.c.Nanotime() }

// Advance moves the clock forward by d and fires every timer that is due, in
// deadline order. A negative d panics: monotonic clocks never go back.
func (c *ManualClock) Advance(d time.Duration) { c.c.Advance(d) }

// Set moves the clock to t nanoseconds and fires every timer that is due. It
// panics if t is before the current reading.
func (c *ManualClock) Set(t int64) { c.c.Set(t) }

// Waiters returns the number of timers that have not fired or been stopped.
func (c *ManualClock) Waiters() int { return c.c.Waiters() }

// BlockUntil waits until at least n timers are pending, so a test can advance
// time only once the goroutines it drives are parked on the clock. It returns
// ctx.Err() if ctx ends first.
func (c *ManualClock) BlockUntil(ctx context.Context, n int) error { return c.c.BlockUntil(ctx, n) }

// NewTimer returns a timer that fires when the clock reaches now+d. A
// non-positive d fires at once.
func (c *ManualClock) NewTimer(d time.Duration) sluice.Timer { return c.c.NewTimer(d) }
