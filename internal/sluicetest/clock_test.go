package sluicetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/internal/clock"
	"github.com/sluice-go/sluice/internal/core"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// failsafe bounds waits that only a bug can make long, so that a regression
// fails the test instead of hanging it. No test waits on it to pass.
const failsafe = 10 * time.Second

// testContext returns a context that ends after failsafe.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failsafe)
	t.Cleanup(cancel)
	return ctx
}

// receive returns the next value of ch, failing the test if none comes
// within failsafe.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(failsafe):
		t.Fatalf("%s: nothing received after %v", what, failsafe)
		panic("unreachable")
	}
}

// fired reports whether tm has fired, and the time it carried. It does not
// wait: a ManualClock timer's channel is filled before Advance or Set
// returns.
func fired(t *testing.T, tm core.Timer) (time.Time, bool) {
	t.Helper()
	select {
	case v := <-tm.C():
		return v, true
	default:
		return time.Time{}, false
	}
}

// requireFiredAt requires that tm has fired, carrying the instant at
// nanoseconds.
func requireFiredAt(t *testing.T, tm core.Timer, at int64, name string) {
	t.Helper()
	v, ok := fired(t, tm)
	require.Truef(t, ok, "timer %s did not fire", name)
	require.Equalf(t, at, v.UnixNano(), "timer %s fired with", name)
}

// requirePending requires that tm has not fired.
func requirePending(t *testing.T, tm core.Timer, name string) {
	t.Helper()
	_, ok := fired(t, tm)
	require.Falsef(t, ok, "timer %s fired early", name)
}

func TestManualClockFiresAtDeadlineInOrder(t *testing.T) {
	const start = 1_000
	// Three timers, created out of deadline order. Each step moves the clock
	// (by Advance or by Set) and names the timers that must fire during it;
	// the steps stop 1 ns short of each deadline, then reach it exactly.
	type step struct {
		advance time.Duration // used when set is 0
		set     int64
		want    []string // timers that fire in this step, all others stay pending
	}
	deadlines := map[string]time.Duration{"c": 30, "a": 10, "b": 20}
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "advance one nanosecond short, then to the deadline",
			steps: []step{
				{advance: 9},
				{advance: 1, want: []string{"a"}},
				{advance: 9},
				{advance: 1, want: []string{"b"}},
				{advance: 9},
				{advance: 1, want: []string{"c"}},
			},
		},
		{
			name: "set one nanosecond short, then to the deadline",
			steps: []step{
				{set: start + 9},
				{set: start + 10, want: []string{"a"}},
				{set: start + 19},
				{set: start + 20, want: []string{"b"}},
				{set: start + 29},
				{set: start + 30, want: []string{"c"}},
			},
		},
		{
			name: "one advance past all",
			steps: []step{
				{advance: time.Hour, want: []string{"a", "b", "c"}},
			},
		},
		{
			name: "set past two, then the third exactly",
			steps: []step{
				{set: start + 25, want: []string{"a", "b"}},
				{set: start + 29},
				{set: start + 30, want: []string{"c"}},
			},
		},
		{
			name: "zero advance fires nothing",
			steps: []step{
				{advance: 0},
				{set: start},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewManualClock(start)
			timers := map[string]core.Timer{}
			for _, name := range []string{"c", "a", "b"} {
				timers[name] = c.NewTimer(deadlines[name])
			}
			require.Equal(t, 3, c.Waiters())
			done := map[string]bool{}
			for i, st := range tt.steps {
				if st.set != 0 {
					c.Set(st.set)
				} else {
					c.Advance(st.advance)
				}
				for _, name := range st.want {
					requireFiredAt(t, timers[name], start+int64(deadlines[name]), name)
					done[name] = true
				}
				for name, tm := range timers {
					if !done[name] {
						requirePending(t, tm, name)
					}
				}
				require.Equalf(t, 3-len(done), c.Waiters(), "Waiters after step %d", i)
			}
		})
	}
}

func TestManualClockReadings(t *testing.T) {
	c := NewManualClock(5)
	assert.Equal(t, int64(5), c.Nanotime())
	c.Advance(time.Microsecond)
	assert.Equal(t, int64(1005), c.Nanotime())
	assert.Equal(t, 1005*time.Nanosecond, c.Elapsed())
	c.Set(2 * int64(time.Second))
	assert.Equal(t, 2*time.Second, c.Elapsed())
	c.Set(2 * int64(time.Second)) // setting the same time is allowed
	assert.Equal(t, 2*time.Second, c.Elapsed())
}

func TestManualClockStop(t *testing.T) {
	tests := []struct {
		name        string
		advance     time.Duration // before the first Stop
		wantStopped bool          // first Stop's report
	}{
		{name: "pending timer", advance: 0, wantStopped: true},
		{name: "1 ns before its deadline", advance: 99, wantStopped: true},
		{name: "already fired", advance: 100, wantStopped: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewManualClock(0)
			tm := c.NewTimer(100)
			other := c.NewTimer(200)
			c.Advance(tt.advance)
			firedBefore := tt.advance >= 100
			if firedBefore {
				requireFiredAt(t, tm, 100, "tm")
			}

			require.Equal(t, tt.wantStopped, tm.Stop(), "first Stop")
			require.False(t, tm.Stop(), "second Stop")
			require.Equal(t, 1, c.Waiters(), "only the other timer is pending")

			c.Advance(time.Hour)
			requirePending(t, tm, "tm") // a stopped timer never fires; a fired one fires once
			requireFiredAt(t, other, 200, "other")
			require.False(t, other.Stop(), "Stop after firing")
			require.Zero(t, c.Waiters())
		})
	}
}

func TestManualClockPanicsGoingBack(t *testing.T) {
	tests := []struct {
		name string
		give func(c *ManualClock)
	}{
		{name: "negative Advance", give: func(c *ManualClock) { c.Advance(-1) }},
		{name: "Set 1 ns back", give: func(c *ManualClock) { c.Set(99) }},
		{name: "Set to zero", give: func(c *ManualClock) { c.Set(0) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewManualClock(100)
			tm := c.NewTimer(1)
			require.Panics(t, func() { tt.give(c) })
			assert.Equal(t, int64(100), c.Nanotime(), "reading after the panic")
			assert.Equal(t, 1, c.Waiters())
			requirePending(t, tm, "tm")
			// The clock still works: its lock was released.
			c.Advance(1)
			requireFiredAt(t, tm, 101, "tm")
		})
	}
}

func TestManualClockNewTimerNonPositiveFiresAtOnce(t *testing.T) {
	tests := []struct {
		name string
		give time.Duration
	}{
		{name: "zero", give: 0},
		{name: "minus 1 ns", give: -1},
		{name: "minus an hour", give: -time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewManualClock(int64(time.Hour) * 2)
			tm := c.NewTimer(tt.give)
			requireFiredAt(t, tm, c.Nanotime()+int64(tt.give), "tm")
			assert.Zero(t, c.Waiters())
			assert.False(t, tm.Stop(), "Stop of a fired timer")
		})
	}
}

func TestManualClockBlockUntil(t *testing.T) {
	tests := []struct {
		name   string
		timers int // started by other goroutines
		n      int
	}{
		{name: "zero needs nothing", timers: 0, n: 0},
		{name: "one", timers: 1, n: 1},
		{name: "three of three", timers: 3, n: 3},
		{name: "two of five", timers: 5, n: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewManualClock(0)
			ctx := testContext(t)
			errs := make(chan error, tt.timers)
			for i := range tt.timers {
				go func() { errs <- clock.Sleep(ctx, c, time.Duration(i+1)*time.Second) }()
			}
			require.NoError(t, c.BlockUntil(ctx, tt.n))
			require.GreaterOrEqual(t, c.Waiters(), tt.n)

			// Release the sleepers once they are all parked.
			require.NoError(t, c.BlockUntil(ctx, tt.timers))
			c.Advance(time.Duration(tt.timers) * time.Second)
			for range tt.timers {
				require.NoError(t, receive(t, errs, "Sleep"))
			}
			require.Zero(t, c.Waiters())
		})
	}
}

func TestManualClockBlockUntilContextEnds(t *testing.T) {
	tests := []struct {
		name    string
		ctx     func() (context.Context, context.CancelFunc)
		wantErr error
	}{
		{
			name:    "cancelled while waiting",
			ctx:     func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			wantErr: context.Canceled,
		},
		{
			name: "deadline already passed",
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithDeadline(context.Background(), time.Unix(0, 0))
			},
			wantErr: context.DeadlineExceeded,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewManualClock(0)
			c.NewTimer(time.Second) // one pending: not enough
			ctx, cancel := tt.ctx()
			defer cancel()
			got := make(chan error, 1)
			go func() { got <- c.BlockUntil(ctx, 2) }()
			cancel()
			require.ErrorIs(t, receive(t, got, "BlockUntil"), tt.wantErr)
			assert.Equal(t, 1, c.Waiters())
		})
	}
}

func TestManualClockWaiters(t *testing.T) {
	c := NewManualClock(0)
	require.Zero(t, c.Waiters())
	a := c.NewTimer(10)
	c.NewTimer(20)
	c.NewTimer(0) // fires at once: never pending
	require.Equal(t, 2, c.Waiters())
	require.True(t, a.Stop())
	require.Equal(t, 1, c.Waiters())
	c.Advance(20)
	require.Zero(t, c.Waiters())
}
func TestManualClockConcurrent(t *testing.T) {
	const sleepers = 50
	c := NewManualClock(0)
	ctx := testContext(t)
	errs := make(chan error, sleepers)
	for i := range sleepers {
		go func() { errs <- clock.Sleep(ctx, c, time.Duration(i%7+1)*time.Millisecond) }()
	}
	require.NoError(t, c.BlockUntil(ctx, sleepers))
	for range 7 {
		c.Advance(time.Millisecond)
		_ = c.Waiters()
	}
	for range sleepers {
		require.NoError(t, receive(t, errs, "Sleep"))
	}
	require.Zero(t, c.Waiters())
}
