package param

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/rules"
)

// budgetCheck decides one entry of batch n for value key at now, asking
// for its budget (pacing waits fire at once).
func budgetCheck(c *Controller, key string, now, n int64) (*core.BlockError, core.Budget) {
	ec := &entry.Context{Resource: "r", Batch: n, Start: now, WantBudget: true}
	be := c.CheckKey(context.Background(), ec, key, &instantClock{})
	return be, ec.Budget
}

// budgetGap is the time to the next arrival: none, a nanosecond, on or
// beside the next whole multiple of width, or a long idle spell.
func budgetGap(rng *rand.Rand, now, width int64) int64 {
	next := (now/width + 1) * width
	switch rng.Intn(7) {
	case 0:
		return 0
	case 1:
		return 1
	case 2:
		return next - now
	case 3:
		return next - now - 1
	case 4:
		return 5 * width
	default:
		return rng.Int63n(width)
	}
}

// TestBudgetParamBucketAgreesWithModel: a QPS reject param rule's budget
// per value against a model of its bucket in exact integers (a token is
// Duration units of credit, t units refill per ns), with a threshold that
// does not divide the Duration, batches, two values, adversarial arrivals
// and a reload to another threshold half way.
func TestBudgetParamBucketAgreesWithModel(t *testing.T) {
	type model struct{ credit, last int64 }
	window := int64(time.Second)
	for seed := int64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewSource(seed))
		r := rules.Param{ID: "p", Resource: "r", Threshold: 3, Burst: 1}
		cs, err := Build([]rules.Param{r}, nil, nil)
		require.NoError(t, err)
		c := cs["r"][0]
		models := map[string]*model{}
		now := int64(3_000_000_001)
		for step := 0; step < 300; step++ {
			if step == 150 {
				r.Threshold = 5
				cs, err = Build([]rules.Param{r}, cs, nil)
				require.NoError(t, err)
				c = cs["r"][0]
			}
			t3, size := r.Threshold, r.Threshold+r.Burst
			capacity := size * window
			now += budgetGap(rng, now, window/t3)
			key := []string{"ann", "bob"}[rng.Intn(2)]
			n := 1 + rng.Int63n(2)
			m := models[key]
			if m == nil {
				m = &model{credit: capacity, last: now}
				models[key] = m
			}
			if step == 150 {
				// The reload keeps each value's whole tokens and carries the
				// fraction of the next in the new threshold's units: the model
				// starts again from what the rule holds (checked below).
				for _, mm := range models {
					mm.credit = min(mm.credit, capacity)
				}
			}
			if now > m.last {
				m.credit = min(capacity, m.credit+(now-m.last)*t3)
				m.last = now
			}
			ok := m.credit >= n*window
			if ok {
				m.credit -= n * window
			}
			want := core.Budget{Limit: float64(size), Remaining: m.credit / window,
				Window: time.Duration(float64(size) * float64(window) / float64(t3)), Rule: core.RuleRef{ID: "p", Metric: "qps"}}
			if m.credit < capacity {
				want.Reset = time.Duration((capacity - m.credit + t3 - 1) / t3)
			}
			be, got := budgetCheck(c, key, now, n)
			where := fmt.Sprintf("seed %d step %d at %d %s batch %d", seed, step, now, key, n)
			require.Equal(t, ok, be == nil, "%s: %v", where, be)
			if step >= 150 && step < 160 {
				// Right after the reload the fraction carried may differ by
				// less than one token; the whole tokens agree.
				require.Equal(t, want.Remaining, got.Remaining, where)
				m.credit = got.Remaining*window + (capacity - got.Remaining*window - int64(got.Reset)*t3)
				continue
			}
			require.Equal(t, want, got, where)
		}
	}
}

// TestBudgetParamIsOperational: for a param rule of each QPS behavior,
// Remaining more requests of the value pass at the same instant and the
// next does not, and at that refusal's Reset the value's budget is whole.
func TestBudgetParamIsOperational(t *testing.T) {
	for _, r := range []rules.Param{
		{Resource: "r", Threshold: 3, Burst: 2},
		{Resource: "r", Threshold: 7, Throttle: &rules.Throttle{MaxQueueing: 500 * time.Millisecond}},
	} {
		t.Run(map[bool]string{false: "reject", true: "throttle"}[r.Throttle != nil], func(t *testing.T) {
			for seed := int64(1); seed <= 10; seed++ {
				rng := rand.New(rand.NewSource(seed))
				c, err := NewController(r)
				require.NoError(t, err)
				now := int64(7_000_000_003)
				for step := 0; step < 60; step++ {
					now += budgetGap(rng, now, int64(time.Second)/r.Threshold)
					be, b := budgetCheck(c, "v", now, 1+rng.Int63n(2))
					if be != nil || rng.Intn(3) != 0 {
						continue
					}
					where := fmt.Sprintf("seed %d step %d at %d: %+v", seed, step, now, b)
					for i := int64(0); i < b.Remaining; i++ {
						be, _ := budgetCheck(c, "v", now, 1)
						require.Nil(t, be, "%s: request %d of %d", where, i+1, b.Remaining)
					}
					be, rb := budgetCheck(c, "v", now, 1)
					require.NotNil(t, be, "%s: one beyond the remaining passed", where)
					require.Zero(t, rb.Remaining, where)
					now += int64(rb.Reset)
					be, full := budgetCheck(c, "v", now, 1)
					require.Nil(t, be, "%s: refused at reset %v", where, rb.Reset)
					require.Equal(t, int64(math.Floor(full.Limit))-1, full.Remaining, "%s: at reset: %+v", where, full)
				}
			}
		})
	}
}
