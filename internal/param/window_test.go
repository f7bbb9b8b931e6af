package param

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/rules"
)

// windowModel is Sentinel's origin node for one caller, kept naively: the
// requests admitted in each bucket of half the window (by its start), the
// window at now being the bucket of now and the one before.
type windowModel struct {
	half   int64
	counts map[int64]int64
	newest int64 // the bucket of the latest check
}

func (m *windowModel) bucket(now int64) int64 { return now - ((now%m.half)+m.half)%m.half }

// decide returns whether n more pass at now under threshold t, the
// window's count before them, the refusal's wait and the budget after.
func (m *windowModel) decide(now, n, t int64) (ok bool, count, retry int64, bg core.Budget) {
	b := m.bucket(now)
	m.newest = max(m.newest, b)
	prev, cur := m.counts[b-m.half], m.counts[b]
	count = prev + cur
	ok = count+n <= t
	if ok {
		m.counts[b] += n
		cur += n
	} else if cur+n <= t {
		retry = b + m.half - now
	} else {
		retry = b + 2*m.half - now
	}
	bg = core.Budget{Limit: float64(t), Remaining: max(t-prev-cur, 0), Window: time.Duration(2 * m.half)}
	switch {
	case cur > 0:
		bg.Reset = time.Duration(b + 2*m.half - now)
	case prev > 0:
		bg.Reset = time.Duration(b + m.half - now)
	}
	return ok, count, retry, bg
}

// undo gives back n admitted at start, as a later check's refusal does:
// only while their bucket is the newest checked.
func (m *windowModel) undo(start, n int64) {
	if b := m.bucket(start); b == m.newest {
		m.counts[b] -= n
	}
}

// maxWindow returns the most any two consecutive buckets hold.
func (m *windowModel) maxWindow() int64 {
	most := int64(0)
	for b, k := range m.counts {
		most = max(most, k+m.counts[b+m.half])
	}
	return most
}

func buildCallers(t *testing.T, r rules.Param, old map[string][]*Controller) (*Controller, map[string][]*Controller) {
	t.Helper()
	out, err := BuildCallers([]rules.Param{r}, old, nil)
	require.NoError(t, err)
	return out[r.Resource][0], out
}

// windowGap is the time to the next arrival: none, a nanosecond, on or
// a nanosecond either side of the next bucket's or window's edge, a random
// part of a bucket, or a gap of a window or more.
func windowGap(rng *rand.Rand, now, half int64) int64 {
	edge := (now/half + 1) * half
	switch rng.Intn(9) {
	case 0, 1:
		return 0
	case 2:
		return 1
	case 3:
		return edge - now - 1
	case 4:
		return edge - now
	case 5:
		return edge - now + 1
	case 6:
		return edge + half - now - 1 // just before the next window's edge
	case 7:
		return 2*half + rng.Int63n(2*half)
	default:
		return rng.Int63n(half)
	}
}

// TestCallerWindowAgreesWithModel: a per-caller QPS rule's decisions,
// refusals and budgets against Sentinel's origin node kept naively, on a
// manual clock, for three callers with bursts just before, on and after
// the edges of buckets and windows, batches, random gaps, refusals by a
// later check (the count given back) and a reload to another threshold
// mid-run that keeps each caller's window; and in every two consecutive
// buckets at most the threshold.
func TestCallerWindowAgreesWithModel(t *testing.T) {
	decisions, refusals := 0, 0
	for seed := int64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewSource(seed))
		r := rules.Param{Resource: "api\x00other", Threshold: 1 + rng.Int63n(6), Duration: time.Duration(10+rng.Intn(3)*990) * time.Millisecond}
		c, old := buildCallers(t, r, nil)
		half := int64(r.Duration) / 2
		callers := []string{"a", "b", "c"}
		models := map[string]*windowModel{}
		for _, v := range callers {
			models[v] = &windowModel{half: half, counts: map[int64]int64{}, newest: -1 << 62}
		}
		top := r.Threshold
		now := int64(7) * int64(time.Hour) // not a multiple of anything but the hour
		for step := range 2000 {
			if step == 1000 {
				r.Threshold = 1 + rng.Int63n(6)
				top = max(top, r.Threshold)
				c, old = buildCallers(t, r, old)
				require.Same(t, old[r.Resource][0].cache, c.cache)
			}
			now += windowGap(rng, now, half)
			v := callers[rng.Intn(len(callers))]
			n := 1 + rng.Int63n(min(r.Threshold, 3))
			ec := &entry.Context{Resource: "api", Batch: n, Start: now, WantBudget: true}
			be := c.CheckKey(context.Background(), ec, v, nil)
			ok, count, retry, bg := models[v].decide(now, n, r.Threshold)
			what := fmt.Sprintf("seed %d step %d: %d of %s at %d (threshold %d, window %v)", seed, step, n, v, now, r.Threshold, r.Duration)
			require.Equal(t, ok, be == nil, what)
			decisions++
			bg.Rule = core.RuleRef{Metric: "qps"}
			require.Equal(t, bg, ec.Budget, what)
			if be != nil {
				refusals++
				require.Equal(t, float64(count), be.Observed, what)
				require.Equal(t, float64(r.Threshold), be.Threshold, what)
				require.Equal(t, entry.RetryMs(time.Duration(retry)), be.RetryAfter, what)
				continue
			}
			if rng.Intn(10) == 0 { // a later check refuses the entry
				ec.ReleaseTickets(entry.ExitInfo{Start: now, End: now, Batch: n, Blocked: true})
				models[v].undo(now, n)
			}
		}
		for _, v := range callers {
			require.LessOrEqual(t, models[v].maxWindow(), top, "seed %d: caller %s", seed, v)
		}
	}
	t.Logf("%d decisions (%d refusals), 0 mismatches", decisions, refusals)
}

// TestCallerWindowEdges: a threshold of 100 per second, where a token
// bucket passed 100 at 0 and 99 more at 999ms: the window passes none until
// the bucket of [0, 0.5s) leaves it at 1s, and a refusal waits until the
// bucket that frees enough has left.
func TestCallerWindowEdges(t *testing.T) {
	c, _ := buildCallers(t, rules.Param{Resource: "api\x00other", Threshold: 100}, nil)
	const ms = int64(time.Millisecond)
	enter := func(now, n int64) *core.BlockError {
		return c.CheckKey(context.Background(), &entry.Context{Resource: "api", Batch: n, Start: now}, "a", nil)
	}
	require.Nil(t, enter(0, 60))
	require.Nil(t, enter(499*ms, 40))
	be := enter(999*ms, 1)
	require.NotNil(t, be)
	require.Equal(t, 100.0, be.Observed)
	require.Equal(t, time.Millisecond, be.RetryAfter, "until [0, 0.5s) leaves the window at 1s")
	require.Nil(t, enter(1000*ms, 100))
	be = enter(1499*ms, 1)
	require.NotNil(t, be)
	require.Equal(t, 501*time.Millisecond, be.RetryAfter, "[1s, 1.5s) holds 100 until it leaves at 2s")
	be = enter(1500*ms, 1)
	require.NotNil(t, be)
	require.Equal(t, 500*time.Millisecond, be.RetryAfter)
	require.Nil(t, enter(2000*ms, 100))
}
