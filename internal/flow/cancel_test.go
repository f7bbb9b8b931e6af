package flow

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
)

// failsafe bounds waits that only a bug can make long, so that a regression
// fails the test instead of hanging it. No test waits on it to pass.
const failsafe = 10 * time.Second

// queued is a check waiting on a manual clock in a goroutine of its own.
type queued struct {
	cancel context.CancelFunc
	done   chan *core.BlockError
	ec     *entry.Context
}

// enqueue starts a check of a batch of n at now on clk and returns once it
// waits (the clock holds one more timer).
func enqueue(t *testing.T, c *Controller, clk *sluicetest.ManualClock, now, n int64) *queued {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	q := &queued{cancel: cancel, done: make(chan *core.BlockError, 1), ec: newEntry(now, n)}
	before := clk.Waiters()
	go func() { q.done <- c.Check(ctx, q.ec, clk) }()
	bctx, bcancel := context.WithTimeout(context.Background(), failsafe)
	defer bcancel()
	require.NoError(t, clk.BlockUntil(bctx, before+1), "the check did not wait")
	return q
}

// result returns the check's outcome, failing the test if none comes within
// failsafe.
func (q *queued) result(t *testing.T) *core.BlockError {
	t.Helper()
	select {
	case be := <-q.done:
		return be
	case <-time.After(failsafe):
		t.Fatal("a queued check did not return")
		return nil
	}
}

// TestCancelledWaitGivesBackOnlyWhatNoLaterWaiterHolds queues A, B and C on
// a 10/s pacing rule at one instant, cancels B's wait and asks when D, at
// the same instant, gets its turn. B gives back only the tokens (the slots)
// no later waiter depends on (rate.Reservation.CancelAt), so D never shares
// an instant with C beyond the burst: with Burst 1 (and with plain pacing),
// D's turn is after C's, not C's own. Each expected wait is also
// rate.Limiter's for the same reservations, where the rule is a token
// bucket.
func TestCancelledWaitGivesBackOnlyWhatNoLaterWaiterHolds(t *testing.T) {
	const t0 = int64(time.Second)
	tests := []struct {
		name     string
		pacing   bool // Direct + Throttle rather than a token bucket
		burst    int
		batches  [3]int64 // A, B, C
		cancel   int      // index of the cancelled one: 1 (B) or 2 (C)
		d        int64
		wantWait time.Duration // D's
	}{
		// A holds the burst, B is due at 100 ms, C at 200 ms; B's token is
		// C's: D comes after C.
		{name: "bucket burst 1", burst: 1, batches: [3]int64{1, 1, 1}, cancel: 1, d: 1, wantWait: 300 * time.Millisecond},
		// B's 2 tokens: C took one after it, one goes back; D's 2 are due
		// at 400 ms (before the fix 300 ms: C's 1 and D's 2, three tokens
		// at one instant with Burst 2).
		{name: "bucket burst 2", burst: 2, batches: [3]int64{2, 2, 1}, cancel: 1, d: 2, wantWait: 400 * time.Millisecond},
		// B's 4 tokens: 3 go back; D's 4 due at 600 ms (before: 500 ms,
		// with C's 1, five at one instant with Burst 4).
		{name: "bucket burst 4", burst: 4, batches: [3]int64{4, 4, 1}, cancel: 1, d: 4, wantWait: 600 * time.Millisecond},
		// The latest waiter gives back all it took.
		{name: "bucket burst 1, latest cancelled", burst: 1, batches: [3]int64{1, 1, 1}, cancel: 2, d: 1, wantWait: 200 * time.Millisecond},
		{name: "bucket burst 4, latest cancelled", burst: 4, batches: [3]int64{4, 1, 3}, cancel: 2, d: 3, wantWait: 400 * time.Millisecond},
		// Pacing: C keeps its turn, after B's slot; B's slot cannot go to
		// D without D sharing C's: D gets the slot after C's.
		{name: "pacing", pacing: true, batches: [3]int64{1, 1, 1}, cancel: 1, d: 1, wantWait: 300 * time.Millisecond},
		{name: "pacing, batches", pacing: true, batches: [3]int64{1, 3, 1}, cancel: 1, d: 2, wantWait: 500 * time.Millisecond},
		{name: "pacing, latest cancelled", pacing: true, batches: [3]int64{1, 1, 1}, cancel: 2, d: 1, wantWait: 200 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rules.Flow{Resource: "r", Threshold: 10, Throttle: &rules.Throttle{MaxQueueing: time.Hour}}
			if !tt.pacing {
				r.Bucket = &rules.Bucket{Burst: float64(tt.burst)}
			}
			c, err := NewController(r, nodes(nil))
			require.NoError(t, err)
			clk := sluicetest.NewManualClock(t0)
			require.Nil(t, c.Check(context.Background(), newEntry(t0, tt.batches[0]), clk), "A passes at once")
			var q [3]*queued
			for i := 1; i < 3; i++ {
				q[i] = enqueue(t, c, clk, t0, tt.batches[i])
			}
			q[tt.cancel].cancel()
			be := q[tt.cancel].result(t)
			require.NotNil(t, be)
			require.ErrorIs(t, be.Cause, context.Canceled)

			rec := &zeroClock{}
			require.Nil(t, c.Check(context.Background(), newEntry(t0, tt.d), rec))
			assert.Equal(t, tt.wantWait, rec.last(), "D's wait")

			if !tt.pacing {
				lim := rate.NewLimiter(10, tt.burst)
				at := rateTime(t0)
				var rs [3]*rate.Reservation
				for i := range rs {
					rs[i] = lim.ReserveN(at, int(tt.batches[i]))
				}
				rs[tt.cancel].CancelAt(at)
				assert.Equal(t, tt.wantWait, lim.ReserveN(at, int(tt.d)).DelayFrom(at), "rate.Limiter's D")
			}

			// Let the other waiter through.
			clk.Advance(time.Hour)
			other := 3 - tt.cancel
			require.Nil(t, q[other].result(t))
		})
	}
}

// TestLaterRefusalAfterAWaitGivesBackOnlyWhatNoLaterWaiterHolds is the
// same for an entry that waited its turn and was then refused by a later
// check: it gives back only what no later entry depends on.
func TestLaterRefusalAfterAWaitGivesBackOnlyWhatNoLaterWaiterHolds(t *testing.T) {
	for _, pacing := range []bool{false, true} {
		t.Run(fmt.Sprintf("pacing=%v", pacing), func(t *testing.T) {
			r := rules.Flow{Resource: "r", Threshold: 10, Throttle: &rules.Throttle{MaxQueueing: time.Hour}}
			if !pacing {
				r.Bucket = &rules.Bucket{Burst: 1}
			}
			c, err := NewController(r, nodes(nil))
			require.NoError(t, err)
			clk := &zeroClock{}
			require.Nil(t, c.Check(context.Background(), newEntry(0, 1), clk)) // A, at once
			b := newEntry(0, 1)
			require.Nil(t, c.Check(context.Background(), b, clk)) // B, 100 ms
			require.Nil(t, c.Check(context.Background(), newEntry(0, 1), clk))
			require.Equal(t, 200*time.Millisecond, clk.last(), "C")
			b.ReleaseTickets(entry.ExitInfo{Start: 0, End: 0, Batch: 1, Blocked: true})
			require.Nil(t, c.Check(context.Background(), newEntry(0, 1), clk))
			assert.Equal(t, 300*time.Millisecond, clk.last(), "D comes after C, not in C's turn")

			// The latest entry refused after its wait gives its turn back.
			e := newEntry(0, 1)
			require.Nil(t, c.Check(context.Background(), e, clk))
			require.Equal(t, 400*time.Millisecond, clk.last(), "E")
			e.ReleaseTickets(entry.ExitInfo{Start: 0, End: 0, Batch: 1, Blocked: true})
			require.Nil(t, c.Check(context.Background(), newEntry(0, 1), clk))
			assert.Equal(t, 400*time.Millisecond, clk.last(), "F takes E's turn")
		})
	}
}

// TestRaisingBurstOnAFullBucketCarriesItsTokens reloads an idle (full)
// 5/s bucket of Burst 2 with Burst 4: it holds 2, not 4, as
// rate.Limiter.SetBurstAt and the documented carry-over give; it then
// fills to 4 at 5/s.
func TestRaisingBurstOnAFullBucketCarriesItsTokens(t *testing.T) {
	for _, b := range []behavior{behReject, behThrottle} {
		t.Run(string(b), func(t *testing.T) {
			nf := nodes(nil)
			r := rules.Flow{Resource: "r", Threshold: 5, Bucket: &rules.Bucket{Burst: 2}, Throttle: b.section(0)}
			cs, err := Build([]rules.Flow{r}, nil, nf, nil)
			require.NoError(t, err)
			t0 := int64(time.Hour) // idle: full
			be, _ := check(t, cs["r"][0], t0, 1)
			require.Nil(t, be)
			r.Bucket = &rules.Bucket{Burst: 4}
			cs, err = Build([]rules.Flow{r}, cs, nf, nil)
			require.NoError(t, err)
			t1 := t0 + int64(time.Hour) // idle again: full at Burst 2
			got := 0
			for i := 0; i < 6; i++ {
				if be, _ := check(t, cs["r"][0], t1, 1); be == nil {
					got++
				}
			}
			lim := rate.NewLimiter(5, 2)
			lim.AllowN(rateTime(t0), 1)
			lim.SetBurstAt(rateTime(t1), 4)
			want := 0
			for i := 0; i < 6; i++ {
				if lim.AllowN(rateTime(t1), 1) {
					want++
				}
			}
			assert.Equal(t, 2, want, "rate.Limiter")
			assert.Equal(t, want, got, "tokens at once after raising Burst from 2 to 4 on a full bucket")

			// It refills to the new Burst: 4 tokens after 800 ms.
			t2 := t1 + int64(time.Hour)
			got = 0
			for i := 0; i < 6; i++ {
				if be, _ := check(t, cs["r"][0], t2, 1); be == nil {
					got++
				}
			}
			assert.Equal(t, 4, got, "full at the new Burst after idling")
		})
	}
}

// TestCancellingEveryWaiterGivesEverythingBack cancels three waiters of a
// 3/s bucket of Burst 1, latest first: every token comes back, and the next
// request waits as if they had never come (a third of a second after the
// one admitted). rate.Limiter withholds one: it steps its latest instant
// back by a third of a second truncated to 333,333,333 ns, which lands a
// nanosecond after the middle waiter's instant, so that cancelling it no
// longer counts as cancelling the latest, and the first waiter's token is
// then held for the middle one's (a difference listed in
// docs/design/conformance.md).
func TestCancellingEveryWaiterGivesEverythingBack(t *testing.T) {
	r := rules.Flow{Resource: "r", Threshold: 3, Bucket: &rules.Bucket{Burst: 1}, Throttle: &rules.Throttle{MaxQueueing: time.Hour}}
	c, err := NewController(r, nodes(nil))
	require.NoError(t, err)
	clk := sluicetest.NewManualClock(2)
	lim := rate.NewLimiter(3, 1)
	require.Nil(t, c.Check(context.Background(), newEntry(0, 1), clk))
	lim.ReserveN(rateTime(0), 1)
	var q []*queued
	var rs []*rate.Reservation
	for now := int64(0); now < 3; now++ { // B, C, D at 0, 1 and 2 ns
		q = append(q, enqueue(t, c, clk, now, 1))
		rs = append(rs, lim.ReserveN(rateTime(now), 1))
	}
	for i := 2; i >= 0; i-- {
		q[i].cancel()
		require.NotNil(t, q[i].result(t))
		rs[i].CancelAt(rateTime(2))
	}
	rec := &zeroClock{}
	require.Nil(t, c.Check(context.Background(), newEntry(2, 1), rec))
	assert.Equal(t, time.Duration(333333333-2), rec.last(), "the next token after A's")
	assert.Equal(t, time.Duration(666666665), lim.ReserveN(rateTime(2), 1).DelayFrom(rateTime(2)), "rate.Limiter holds one token back")
}

// TestPacingChecksAllocOnlyWhenTheyWait checks that a pacing or token-bucket
// throttle check that need not wait allocates nothing, its undo ticket
// included (an entry that waits allocates its timer, and its undo ticket
// with it), and that a later refusal of such an entry gives its turn back.
func TestPacingChecksAllocOnlyWhenTheyWait(t *testing.T) {
	for _, pacing := range []bool{false, true} {
		t.Run(fmt.Sprintf("pacing=%v", pacing), func(t *testing.T) {
			r := rules.Flow{Resource: "r", Threshold: 1e9, Throttle: &rules.Throttle{MaxQueueing: time.Second}}
			if !pacing {
				r.Bucket = &rules.Bucket{Burst: 1}
			}
			c, err := NewController(r, nodes(nil))
			require.NoError(t, err)
			ec := newEntry(0, 1)
			now := int64(0)
			allocs := testing.AllocsPerRun(100, func() {
				now += int64(time.Second) // idle: no wait
				ec.Start = now
				if be := c.Check(context.Background(), ec, neverClock{}); be != nil {
					t.Fatal(be)
				}
				ec.ReleaseRefused() // a later rule refused it: the turn goes back
			})
			if !raceEnabled {
				assert.Zero(t, allocs)
			}
			// The turn went back each time: the next request at the same
			// instant passes at once.
			rec := &zeroClock{}
			require.Nil(t, c.Check(context.Background(), newEntry(now, 1), rec))
			assert.Empty(t, rec.waits)
		})
	}
}

// TestWarmUpThrottleGivesBackOnlyWhatNoLaterWaiterHolds is the cancelled
// and the later-refused wait on a cold warm-up throttle rule (10/s, cold
// factor 3: slots of about 300 ms while cold, a little shorter as each
// admission takes a token): A passes at once, B waits a slot, C two. B's
// wait ending early gives back nothing C depends on, so D comes after C
// (three slots), not in C's slot (two); the latest waiter gives its slot
// back whole.
func TestWarmUpThrottleGivesBackOnlyWhatNoLaterWaiterHolds(t *testing.T) {
	const t0 = int64(time.Hour)
	r := rules.Flow{Resource: "r", Threshold: 10, WarmUp: &rules.WarmUp{Period: 10 * time.Second, ColdFactor: 3}, Throttle: &rules.Throttle{MaxQueueing: time.Hour}}
	t.Run("cancelled", func(t *testing.T) {
		c, err := NewController(r, nodes(nil))
		require.NoError(t, err)
		clk := sluicetest.NewManualClock(t0)
		require.Nil(t, c.Check(context.Background(), newEntry(t0, 1), clk), "A passes at once")
		b := enqueue(t, c, clk, t0, 1)
		cq := enqueue(t, c, clk, t0, 1)
		b.cancel()
		require.NotNil(t, b.result(t))
		rec := &zeroClock{}
		require.Nil(t, c.Check(context.Background(), newEntry(t0, 1), rec))
		inSlots(t, 3, rec.last(), "D comes after C, not in C's slot")
		// C cancelled now is no longer the latest (D is): D keeps its
		// slot, and E comes after it.
		cq.cancel()
		require.NotNil(t, cq.result(t))
		require.Nil(t, c.Check(context.Background(), newEntry(t0, 1), rec))
		inSlots(t, 4, rec.last(), "E comes after D")
	})
	t.Run("latest cancelled", func(t *testing.T) {
		c, err := NewController(r, nodes(nil))
		require.NoError(t, err)
		clk := sluicetest.NewManualClock(t0)
		require.Nil(t, c.Check(context.Background(), newEntry(t0, 1), clk))
		b := enqueue(t, c, clk, t0, 1)
		cq := enqueue(t, c, clk, t0, 1)
		cq.cancel()
		require.NotNil(t, cq.result(t))
		rec := &zeroClock{}
		require.Nil(t, c.Check(context.Background(), newEntry(t0, 1), rec))
		inSlots(t, 2, rec.last(), "D takes C's slot")
		clk.Advance(time.Hour)
		require.Nil(t, b.result(t))
	})
	t.Run("refused later", func(t *testing.T) {
		c, err := NewController(r, nodes(nil))
		require.NoError(t, err)
		clk := &zeroClock{}
		require.Nil(t, c.Check(context.Background(), newEntry(t0, 1), clk)) // A
		b := newEntry(t0, 1)
		require.Nil(t, c.Check(context.Background(), b, clk)) // B, 300 ms
		require.Nil(t, c.Check(context.Background(), newEntry(t0, 1), clk))
		inSlots(t, 2, clk.last(), "C")
		b.ReleaseTickets(entry.ExitInfo{Start: t0, End: t0, Batch: 1, Blocked: true})
		require.Nil(t, c.Check(context.Background(), newEntry(t0, 1), clk))
		inSlots(t, 3, clk.last(), "D comes after C, not in C's slot")
		e := newEntry(t0, 1)
		require.Nil(t, c.Check(context.Background(), e, clk))
		e4 := clk.last()
		inSlots(t, 4, e4, "E")
		e.ReleaseTickets(entry.ExitInfo{Start: t0, End: t0, Batch: 1, Blocked: true})
		require.Nil(t, c.Check(context.Background(), newEntry(t0, 1), clk))
		assert.Equal(t, e4, clk.last(), "F takes E's slot")
	})
}

// inSlots checks that a wait on the cold 10/s warm-up rule of
// TestWarmUpThrottleGivesBackOnlyWhatNoLaterWaiterHolds is n cold slots:
// each between 280 and 300 ms (the slot shrinks as admissions take tokens;
// a slot is 300 ms at the coldest, 100 ms warm).
func inSlots(t *testing.T, n int, wait time.Duration, what string) {
	t.Helper()
	lo, hi := time.Duration(n)*280*time.Millisecond, time.Duration(n)*300*time.Millisecond
	assert.True(t, wait >= lo && wait <= hi, "%s waits %v, want %d slots: %v to %v", what, wait, n, lo, hi)
}
