package sluicetest

import (
	"context"
	"sort"
	"sync"
	"time"

	"sync/atomic"

	"github.com/sluice-go/sluice/internal/core"
)

var _ core.Clock = (*ManualClock)(nil)

// ManualClock is a Clock that moves only when told to. Timers fire, in order
// of their deadlines, when Advance or Set moves the clock past them. It is
// safe for concurrent use.
type ManualClock struct {
	now atomic.Int64

	mu     sync.Mutex
	cond   *sync.Cond
	timers []*manualTimer
}

// NewManualClock returns a ManualClock that reads start nanoseconds.
func NewManualClock(start int64) *ManualClock {
	c := &ManualClock{}
	c.now.Store(start)
	c.cond = sync.NewCond(&c.mu)
	return c
}

// Nanotime returns the clock's current reading.
func (c *ManualClock) Nanotime() int64 { return c.now.Load() }

// Elapsed returns the clock's reading as the time.Duration since its zero,
// which prints readably in test output.
func (c *ManualClock) Elapsed() time.Duration { return time.Duration(c.now.Load()) }

// Advance moves the clock forward by d and fires every timer that is due, in
// deadline order. A negative d panics: monotonic clocks never go back.
func (c *ManualClock) Advance(d time.Duration) {
	if d < 0 {
		panic("core: ManualClock.Advance with negative duration")
	}
	c.Set(c.now.Load() + int64(d))
}

// Set moves the clock to t nanoseconds and fires every timer that is due. It
// panics if t is before the current reading.
func (c *ManualClock) Set(t int64) {
	c.mu.Lock()
	if t < c.now.Load() {
		c.mu.Unlock()
		panic("core: ManualClock.Set before current time")
	}
	c.now.Store(t)
	var due []*manualTimer
	keep := c.timers[:0]
	for _, tm := range c.timers {
		if tm.deadline <= t {
			due = append(due, tm)
		} else {
			keep = append(keep, tm)
		}
	}
	for i := len(keep); i < len(c.timers); i++ {
		c.timers[i] = nil
	}
	c.timers = keep
	c.cond.Broadcast()
	c.mu.Unlock()
	sort.SliceStable(due, func(i, j int) bool { return due[i].deadline < due[j].deadline })
	for _, tm := range due {
		tm.ch <- time.Unix(0, tm.deadline)
	}
}

// Waiters returns the number of timers that have not fired or been stopped.
func (c *ManualClock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// BlockUntil waits until at least n timers are pending, so a test can advance
// time only once the goroutines it drives are parked on the clock. It returns
// ctx.Err() if ctx ends first.
func (c *ManualClock) BlockUntil(ctx context.Context, n int) error {
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.timers) < n {
		if err := ctx.Err(); err != nil {
			return err
		}
		c.cond.Wait()
	}
	return nil
}

// NewTimer returns a timer that fires when the clock reaches now+d. A
// non-positive d fires at once.
func (c *ManualClock) NewTimer(d time.Duration) core.Timer {
	tm := &manualTimer{c: c, ch: make(chan time.Time, 1)}
	c.mu.Lock()
	tm.deadline = c.now.Load() + int64(d)
	if d <= 0 {
		c.mu.Unlock()
		tm.ch <- time.Unix(0, tm.deadline)
		return tm
	}
	c.timers = append(c.timers, tm)
	c.cond.Broadcast()
	c.mu.Unlock()
	return tm
}

type manualTimer struct {
	c        *ManualClock
	deadline int64
	ch       chan time.Time
}

func (t *manualTimer) C() <-chan time.Time { return t.ch }

func (t *manualTimer) Stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, tm := range c.timers {
		if tm == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			c.cond.Broadcast()
			return true
		}
	}
	return false
}
