package clock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/internal/sluicetest"
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

func TestSleep(t *testing.T) {
	t.Run("full wait returns nil", func(t *testing.T) {
		c := sluicetest.NewManualClock(0)
		done := make(chan error, 1)
		go func() { done <- Sleep(testContext(t), c, 100*time.Millisecond) }()
		require.NoError(t, c.BlockUntil(testContext(t), 1))

		c.Advance(100*time.Millisecond - 1)
		select {
		case err := <-done:
			t.Fatalf("Sleep returned %v 1 ns before its end", err)
		default:
		}
		require.Equal(t, 1, c.Waiters())

		c.Advance(1)
		require.NoError(t, receive(t, done, "Sleep"))
		require.Zero(t, c.Waiters())
	})

	t.Run("cancelled while waiting returns ctx.Err and stops its timer", func(t *testing.T) {
		c := sluicetest.NewManualClock(0)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- Sleep(ctx, c, time.Hour) }()
		require.NoError(t, c.BlockUntil(testContext(t), 1))
		require.Equal(t, 1, c.Waiters())

		cancel()
		require.ErrorIs(t, receive(t, done, "Sleep"), context.Canceled)
		require.Zero(t, c.Waiters(), "the cancelled Sleep left its timer pending")
	})

	tests := []struct {
		name      string
		cancelled bool
		give      time.Duration
		wantErr   error
	}{
		{name: "zero, live context", give: 0},
		{name: "negative, live context", give: -time.Second},
		{name: "zero, cancelled context", cancelled: true, give: 0, wantErr: context.Canceled},
		{name: "positive, cancelled context", cancelled: true, give: time.Hour, wantErr: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := sluicetest.NewManualClock(0)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancelled {
				cancel()
			}
			err := Sleep(ctx, c, tt.give)
			if tt.wantErr == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.wantErr)
			}
			require.Zero(t, c.Waiters())
			require.Zero(t, c.Nanotime(), "Sleep moved the clock")
		})
	}
}

// TestManualClockConcurrent runs many sleepers on one clock under -race:
// each returns nil once the clock passes its deadline.
func TestSystemClock(t *testing.T) {
	c := System()
	t.Run("Nanotime never decreases", func(t *testing.T) {
		prev := c.Nanotime()
		require.GreaterOrEqual(t, prev, int64(0))
		for i := range 100_000 {
			now := c.Nanotime()
			require.GreaterOrEqualf(t, now, prev, "read %d went backwards", i)
			prev = now
		}
	})
	t.Run("timer", func(t *testing.T) {
		tm := c.NewTimer(time.Hour)
		require.True(t, tm.Stop(), "Stop of a pending timer")
		require.False(t, tm.Stop(), "second Stop")

		now := c.NewTimer(0)
		receive(t, now.C(), "zero timer") // fires at once
	})
	t.Run("Sleep returns at once when cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.ErrorIs(t, Sleep(ctx, c, time.Hour), context.Canceled)
		require.NoError(t, Sleep(context.Background(), c, 0))
	})
}

var sinkNanos int64

// BenchmarkClockRead measures one read of the monotonic clock as the
// engine makes it (core.SystemClock's Nanotime, time.Since of a base
// instant), beside time.Now, which reads the wall clock too.
func BenchmarkClockRead(b *testing.B) {
	b.Run("Nanotime", func(b *testing.B) {
		b.ReportAllocs()
		c := System()
		for b.Loop() {
			sinkNanos += c.Nanotime()
		}
	})
	b.Run("time.Now", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sinkNanos += time.Now().UnixNano()
		}
	})
}
