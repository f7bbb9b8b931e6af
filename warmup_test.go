package sluice

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
)

// offer enters a request every step from the clock's reading until until
// (exclusive), and returns the times of the admissions.
func offer(g *Engine, clk *sluicetest.ManualClock, step, until int64) []int64 {
	var at []int64
	for now := clk.Nanotime(); now < until; now += step {
		clk.Set(now)
		if try(g, "r") {
			at = append(at, now)
		}
	}
	clk.Set(until)
	return at
}

// A warm-up rule is cold again after idling several warm-up periods,
// whatever its cold rate: also when Threshold/ColdFactor is below one
// request per interval (2/s with ColdFactor 3: 0.67 per second), where
// "used below the cold rate" must be read over more than one interval.
func TestFlowWarmUpCoolsDownAtLowColdRates(t *testing.T) {
	for _, tt := range []struct {
		threshold float64
		period    time.Duration
	}{
		{2, 4 * time.Second},   // cold slot 1.5 s, warm slot 500 ms
		{20, 4 * time.Second},  // cold slot 150 ms, warm slot 50 ms
		{0.5, 8 * time.Second}, // cold slot 6 s, warm slot 2 s
	} {
		t.Run(fmt.Sprint(tt.threshold), func(t *testing.T) {
			g, clk := newTestEngine(t, 0)
			mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: tt.threshold, WarmUp: &rules.WarmUp{Period: tt.period}, Throttle: &rules.Throttle{}})
			cold := int64(float64(time.Second) * 3 / tt.threshold)
			warm := int64(float64(time.Second) / tt.threshold)
			at := offer(g, clk, ms, 3*int64(tt.period))
			require.GreaterOrEqual(t, len(at), 3)
			assert.Equal(t, cold, at[1]-at[0], "the first slot is cold")
			assert.Equal(t, warm, at[len(at)-1]-at[len(at)-2], "warm after saturating three warm-up periods")
			// Idle for three warm-up periods: cold again.
			clk.Set(6 * int64(tt.period))
			at = offer(g, clk, ms, 6*int64(tt.period)+cold+ms)
			require.Len(t, at, 2)
			assert.Equal(t, cold, at[1]-at[0], "cold again after idling three warm-up periods")
		})
	}
}

// A warm-up rule that refuses at once admits a lone request even while
// its allowance is below one request per interval (2/s with ColdFactor 3
// starts at 0.67 per second): it admits single requests spaced by the
// allowance, 1.5 s apart when cold, and warms up with the traffic it
// admits. The same holds for a threshold below one request per interval.
func TestFlowWarmUpRejectAdmitsBelowOnePerInterval(t *testing.T) {
	t.Run("2/s, cold factor 3", func(t *testing.T) {
		g, clk := newTestEngine(t, 0)
		mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 2, WarmUp: &rules.WarmUp{Period: 4 * time.Second}})
		at := offer(g, clk, 5*ms, 8*int64(time.Second))
		t.Logf("admitted at %v", at)
		require.GreaterOrEqual(t, len(at), 3)
		assert.Equal(t, int64(0), at[0], "the first request of a cold resource")
		assert.Equal(t, 1500*ms, at[1], "the second one cold slot later")
		assert.Less(t, at[2]-at[1], 1500*ms, "warming")
		// Warm within the warm-up period: the last two seconds admit the
		// threshold, no more.
		assert.Equal(t, 4, admittedIn(at, 2*int64(time.Second)), "at most 2 per second")
		n := 0
		for _, a := range at {
			if a >= 6*int64(time.Second) {
				n++
			}
		}
		assert.Equal(t, 4, n, "warm: 2 per second in [6 s, 8 s)")
	})
	t.Run("0.5/s", func(t *testing.T) {
		g, clk := newTestEngine(t, 0)
		mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 0.5, WarmUp: &rules.WarmUp{Period: 4 * time.Second}})
		require.True(t, try(g, "r"))
		clk.Set(6*int64(time.Second) - ms)
		be := refusal(t, g, "r")
		assert.Equal(t, ms, int64(be.RetryAfter), "one request per 6 s while cold")
		clk.Set(6 * int64(time.Second))
		require.True(t, try(g, "r"))
	})
	t.Run("1e-300/s", func(t *testing.T) {
		g, clk := newTestEngine(t, 0)
		mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 1e-300, WarmUp: &rules.WarmUp{Period: time.Second}})
		require.True(t, try(g, "r"), "the first request of a cold resource")
		clk.Advance(1000 * time.Hour)
		be := refusal(t, g, "r")
		assert.Equal(t, time.Duration(math.MaxInt64), be.RetryAfter, "the next one in more than 292 years")
	})
}

// Reloading a warm-up throttle rule keeps its queue schedule, as a plain
// throttle rule does, and with an unchanged curve (only MaxQueueing or ID
// changed) its warm-up tokens too.
func TestFlowWarmUpThrottleReloadKeepsTheSchedule(t *testing.T) {
	const T = 10 // cold slot 300 ms, warm slot 100 ms
	base := rules.Flow{Resource: "r", Threshold: T, WarmUp: &rules.WarmUp{Period: 10 * time.Second}, Throttle: &rules.Throttle{}}
	for _, tt := range []struct {
		name     string
		change   func(r *rules.Flow)
		wantNext int64 // the next slot after the reload
	}{
		{"MaxQueueing", func(r *rules.Flow) { r.Throttle = &rules.Throttle{MaxQueueing: 100 * time.Millisecond} }, 300 * ms},
		{"ID", func(r *rules.Flow) { r.ID = "x" }, 300 * ms},
		{"Threshold", func(r *rules.Flow) { r.Threshold = 20 }, 300 * ms},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g, clk := newTestEngine(t, 0)
			mustLoadFlow(t, g, base)
			require.True(t, try(g, "r"))
			r := base
			tt.change(&r)
			mustLoadFlow(t, g, r)
			clk.Set(ms)
			be := refusal(t, g, "r")
			assert.Equal(t, time.Duration(tt.wantNext-ms)-r.Throttle.MaxQueueing, be.RetryAfter, "the slot of the request before the reload is taken")
			clk.Set(tt.wantNext)
			require.True(t, try(g, "r"))
		})
	}
}

// The first request on a cold warm-up resource takes its token: Guava's
// warm-up, 4/s with ColdFactor 3 and 10 warm-up permits (a warm-up period
// of 5 s), paces the first eleven requests 750 ms, 700 ms, ... 300 ms
// apart, so the eleventh passes at 5.25 s and every slot after is 250 ms.
func TestFlowWarmUpFirstRequestTakesItsToken(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 4, WarmUp: &rules.WarmUp{Period: 5 * time.Second}, Throttle: &rules.Throttle{}})
	at := offer(g, clk, ms, 6*int64(time.Second))
	want := []int64{0}
	for k := 0; k < 14; k++ {
		cost := 250 * ms
		if k < 10 {
			cost += int64(10-k) * 50 * ms
		}
		want = append(want, want[len(want)-1]+cost)
	}
	want = want[:len(at)]
	assert.Equal(t, want, at)
	assert.Equal(t, 5250*ms, at[10])
}
