package flow

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/rules"
)

// TestPacingExactAtLargeClockReadings queues 200,000 entries behind a
// throttle rule on a clock that reads 30 days and a year of uptime (and
// near the end of the int64 range), arriving at adversarial instants
// before their turns: entry k's wait ends at t0 + k·interval/R rounded to
// the nearest nanosecond, computed in integers, every one of them. (With the
// schedule in float64 nanoseconds, slots at 30 days were up to 333 ns off,
// and 8.9 µs after 200,000.)
func TestPacingExactAtLargeClockReadings(t *testing.T) {
	const entries = 200_000
	day := int64(24 * time.Hour)
	for _, t0 := range []int64{30 * day, 365 * day, 1<<62 + 12345} {
		for _, tc := range []struct {
			rate     int64
			interval time.Duration
		}{
			{7000, time.Second},
			{12_345, time.Second},
			{999_983, time.Second},
			{3, 10 * time.Millisecond},
		} {
			t.Run(fmt.Sprintf("t0=%d/%d per %v", t0, tc.rate, tc.interval), func(t *testing.T) {
				r := rules.Flow{Resource: "r", Threshold: float64(tc.rate), StatInterval: tc.interval, Throttle: &rules.Throttle{MaxQueueing: time.Hour}}
				if tc.interval == time.Second {
					r.StatInterval = 0
				}
				c, err := NewController(r, nodes(nil))
				require.NoError(t, err)
				clk := &zeroClock{}
				rng := rand.New(rand.NewSource(t0 ^ tc.rate))
				per := int64(tc.interval)
				// slot returns the exact instant of slot k, rounded to the
				// nearest nanosecond (half away from zero).
				slot := func(k int64) int64 {
					q, rem := k*per/tc.rate, k*per%tc.rate
					if 2*rem >= tc.rate {
						q++
					}
					return t0 + q
				}
				now := t0
				for k := int64(0); k < entries; k++ {
					// Arrive at or before the slot: at once, 1 ns before,
					// or up to an hour's queue before.
					due := slot(k)
					switch rng.Intn(4) {
					case 0:
						now = max(now, due-1)
					case 1:
						now = max(now, due-rng.Int63n(int64(time.Millisecond)))
					}
					now = min(now, due) // never past the slot: the queue stays busy
					clk.waits = clk.waits[:0]
					ec := newEntry(now, 1)
					be := c.Check(context.Background(), ec, clk)
					require.Nil(t, be, "entry %d at %d", k, now)
					var wait int64
					if len(clk.waits) > 0 {
						wait = int64(clk.last())
					}
					if got := now + wait; got != due {
						t.Fatalf("entry %d arriving at t0%+d ns: turn at t0%+d ns, want t0%+d ns (%+d ns off)", k, now-t0, got-t0, due-t0, got-due)
					}
				}
			})
		}
	}
}

// TestWarmUpPacingExactAtLargeClockReadings queues 200,000 entries at once
// behind a warm-up throttle rule at 7,000/s on a clock at 30 days and a
// year of uptime: once the queue has warmed it (10,000 entries in), every
// turn is k/7000 s after entry 10,000's, within the nanosecond of rounding
// (a float64 schedule drifted by hundreds of nanoseconds).
func TestWarmUpPacingExactAtLargeClockReadings(t *testing.T) {
	const entries, warm, rate = 200_000, 10_000, 7000
	day := int64(24 * time.Hour)
	for _, t0 := range []int64{30 * day, 365 * day} {
		t.Run(fmt.Sprint(t0), func(t *testing.T) {
			c, err := NewController(rules.Flow{Resource: "r", Threshold: rate, WarmUp: &rules.WarmUp{Period: time.Second}, Throttle: &rules.Throttle{MaxQueueing: time.Hour}}, nodes(nil))
			require.NoError(t, err)
			clk := &zeroClock{}
			var base int64
			for k := int64(0); k < entries; k++ {
				n := len(clk.waits)
				require.Nil(t, c.Check(context.Background(), newEntry(t0, 1), clk), "entry %d", k)
				var turn int64
				if len(clk.waits) > n {
					turn = int64(clk.last())
				}
				if k == warm {
					base = turn
				}
				if k <= warm {
					continue
				}
				// k·10⁹/7000 ns after base, within the rounding of both.
				d := (k - warm) * int64(time.Second)
				want := base + d/rate
				if got := turn - want; got < 0 || got > 1 {
					t.Fatalf("entry %d: turn at t0%+d ns, want t0%+d ns (+0 or 1 ns)", k, turn, want)
				}
			}
		})
	}
}
