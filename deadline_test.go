package sluice

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sync/atomic"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
)

// timerCountingClock is a manual clock that counts the timers it starts.
type timerCountingClock struct {
	*sluicetest.ManualClock
	timers atomic.Int64
}

func (c *timerCountingClock) NewTimer(d time.Duration) core.Timer {
	c.timers.Add(1)
	return c.ManualClock.NewTimer(d)
}

// TestEntryContextFailsAtOnceWhenTheDeadlineIsTooShort checks that an
// entry whose turn on a pacing rule comes after its context's deadline is
// refused at once, as rate.Limiter.WaitN refuses it, instead of waiting
// until the deadline and failing then: the error matches ErrBlocked and
// context.DeadlineExceeded, the entry never waits (no timer), and the turn
// goes to the next caller.
func TestEntryContextFailsAtOnceWhenTheDeadlineIsTooShort(t *testing.T) {
	tests := []struct {
		name string
		rule rules.Flow
	}{
		{"pacing", rules.Flow{Threshold: 1, Throttle: &rules.Throttle{}}},
		{"token bucket", rules.Flow{Threshold: 1, Bucket: &rules.Bucket{Burst: 1}, Throttle: &rules.Throttle{}}},
		// Warm-up throttle reserves before it learns the wait and gives
		// the turn back when the wait fails at once.
		{"warm-up", rules.Flow{Threshold: 3, WarmUp: &rules.WarmUp{Period: time.Hour}, Throttle: &rules.Throttle{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &timerCountingClock{ManualClock: sluicetest.NewManualClock(0)}
			g := New(WithClock(clk))
			t.Cleanup(func() { _ = g.Close() })
			r := tt.rule
			r.Resource, r.StatInterval, r.Throttle = "r", time.Hour, &rules.Throttle{MaxQueueing: time.Hour}
			mustLoadFlow(t, g, r) // one request per hour (warm-up: its cold rate, 3/ColdFactor 3)
			require.True(t, try(g, "r"))

			// The next turn is an hour away; the deadline a few seconds.
			// Before the fix the entry waited those seconds (on the wall
			// clock) holding its turn, then failed.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			p, err := g.EntryContext(ctx, "r")
			require.Zero(t, p)
			require.ErrorIs(t, err, core.ErrBlocked)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Zero(t, clk.timers.Load(), "the entry started a wait")

			// The turn it did not take is the next caller's: an hour, not
			// two.
			done := make(chan int64, 1)
			go func() {
				p, err := g.Entry("r")
				if err == nil {
					p.Exit()
				}
				done <- clk.Nanotime()
			}()
			bctx, bcancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer bcancel()
			require.NoError(t, clk.BlockUntil(bctx, 1))
			clk.Advance(time.Hour)
			select {
			case at := <-done:
				assert.Equal(t, int64(time.Hour), at)
			case <-bctx.Done():
				t.Fatal("the next caller was not admitted after an hour")
			}
		})
	}
}

// TestParamPacingPastTheDeadlineFailsAtOnce is the same for a param rule
// that paces a value (Behavior throttle): the refusal matches ErrBlocked
// and context.DeadlineExceeded, no wait starts, and the turn stays the next
// caller's.
func TestParamPacingPastTheDeadlineFailsAtOnce(t *testing.T) {
	clk := &timerCountingClock{ManualClock: sluicetest.NewManualClock(0)}
	g := New(WithClock(clk))
	t.Cleanup(func() { _ = g.Close() })
	mustLoadParam(t, g, rules.Param{Resource: "r", Threshold: 1, Duration: time.Hour, Throttle: &rules.Throttle{MaxQueueing: time.Hour}})
	require.True(t, try(g, "r", WithArgs("u")))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := g.EntryContext(ctx, "r", WithArgs("u"))
	require.Zero(t, p)
	require.ErrorIs(t, err, core.ErrBlocked)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Zero(t, clk.timers.Load(), "the entry started a wait")

	clk.Advance(time.Hour)
	assert.True(t, try(g, "r", WithArgs("u")), "the turn an hour on is free")
}
