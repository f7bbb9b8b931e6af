package flow

import (
	"context"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/conformance"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
)

// occupyModel is the reference of a QPS reject rule with PriorityWait: a
// count per bucket; an entry is admitted in its own bucket when the ten
// buckets up to it (and the next, which may hold borrowed counts) stay
// within the limit, and a critical one that is not may borrow the next
// bucket when that starts within the wait bound and the ten buckets up to it
// (and the one after) stay within the limit.
type occupyModel struct {
	counts map[int64]int64
	limit  int64
	width  int64
	wait   int64
}

func (m *occupyModel) sum(from, to int64) int64 {
	var s int64
	for e := from; e <= to; e++ {
		s += m.counts[e]
	}
	return s
}

// decide returns the bucket the entry is counted in, and -1 when it is
// refused.
func (m *occupyModel) decide(now, n int64, critical bool) int64 {
	e := now / m.width
	if m.sum(e-9, e+1)+n <= m.limit {
		m.counts[e] += n
		return e
	}
	if critical && (e+1)*m.width-now <= m.wait && m.sum(e-8, e+2)+n <= m.limit {
		m.counts[e+1] += n
		return e + 1
	}
	return -1
}

// TestConformanceOccupyFutureWindow: critical entries over a QPS rule with
// PriorityWait borrow the next bucket and wait at most the bound; every
// decision is the reference model's, and in every run of ten buckets (one
// interval, wherever it starts on a bucket boundary) the admitted count,
// borrowed ones included, is within the threshold, so over any ten
// intervals it is within ten times the threshold. Arrivals are adversarial:
// bursts at the last nanosecond of a bucket and at its first, a mix of
// critical and other entries, batches of one to three, seeded.
func TestConformanceOccupyFutureWindow(t *testing.T) {
	const limit = 10
	for _, wait := range []time.Duration{30 * time.Millisecond, 100 * time.Millisecond, time.Second} {
		for seed := uint64(1); seed <= 3; seed++ {
			r := rules.Flow{Resource: "r", Threshold: limit, PriorityWait: wait}
			c, err := NewController(r, nodes(nil))
			require.NoError(t, err)
			clk := sluicetest.NewManualClock(0)
			m := &occupyModel{counts: map[int64]int64{}, limit: limit, width: int64(100 * time.Millisecond), wait: int64(wait)}
			rng := rand.New(rand.NewPCG(seed, 7))
			now := int64(time.Hour) // a bucket boundary
			admitted := map[int64]int64{}
			borrows := 0
			steps := conformance.Steps(2000)
			for i := 0; i < steps; i++ {
				switch rng.IntN(4) {
				case 0: // the last nanosecond of the bucket
					now = (now/m.width+1)*m.width - 1
				case 1: // the first of the next
					now = (now/m.width + 1) * m.width
				case 2:
					now += rng.Int64N(m.width / 3)
				}
				clk.Set(max(now, clk.Nanotime()))
				now = clk.Nanotime()
				n := 1 + rng.Int64N(3)
				critical := rng.IntN(3) > 0
				want := m.decide(now, n, critical)
				ec := &entry.Context{Resource: "r", Batch: n, Start: now}
				if critical {
					ec.Priority = core.PriorityCritical
				}
				done := make(chan *core.BlockError, 1)
				before := clk.Waiters()
				go func() { done <- c.Check(context.Background(), ec, clk) }()
				be, waited := awaitCheck(done, clk, before)
				start := now
				if waited {
					// The wait is the time to the next bucket, within the bound.
					next := (now/m.width + 1) * m.width
					require.LessOrEqual(t, next-now, int64(wait))
					clk.Set(next)
					be = <-done
					now = next
				}
				if want < 0 {
					require.NotNil(t, be, "step %d: admitted, the model refuses", i)
					continue
				}
				require.Nil(t, be, "step %d: refused, the model admits in bucket %d", i, want)
				require.Equal(t, want != start/m.width, waited, "step %d: borrowed and waited disagree", i)
				admitted[want] += n
				if waited {
					borrows++
				}
				ec.DropUndo()
			}
			require.Positive(t, borrows, "no entry borrowed: the test exercises nothing")
			var lo, hi int64 = 1 << 62, 0
			for e := range admitted {
				lo, hi = min(lo, e), max(hi, e)
			}
			for e := lo; e <= hi; e++ {
				var s int64
				for k := e; k < e+10; k++ {
					s += admitted[k]
				}
				require.LessOrEqual(t, s, int64(limit), "buckets %d to %d", e, e+9)
			}
			for e := lo; e+100 <= hi; e++ {
				var s int64
				for k := e; k < e+100; k++ {
					s += admitted[k]
				}
				require.LessOrEqual(t, s, int64(10*limit), "ten intervals from bucket %d", e)
			}
		}
	}
}

// awaitCheck returns the outcome of a check running in another goroutine,
// or waited true once the check waits on clk (which held before timers).
func awaitCheck(done <-chan *core.BlockError, clk *sluicetest.ManualClock, before int) (*core.BlockError, bool) {
	deadline := time.Now().Add(failsafe)
	for time.Now().Before(deadline) {
		select {
		case be := <-done:
			return be, false
		default:
		}
		if clk.Waiters() > before {
			return nil, true
		}
		runtime.Gosched()
	}
	panic("a check neither returned nor waited")
}
