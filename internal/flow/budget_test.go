package flow

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/rules"
)

// The remaining budget (core.Budget) of every rate strategy, checked
// against reference models on a manual clock (each entry's Start is its
// clock reading; pacing waits fire at once on a zeroClock), with batches,
// adversarial arrival times at and around window, bucket and slot
// boundaries, and a rule reload in the middle of each sequence.

// budgetCheck decides one entry of batch n at now asking for its budget.
func budgetCheck(c *Controller, now, n int64) (*core.BlockError, core.Budget) {
	ec := newEntry(now, n)
	ec.WantBudget = true
	be := c.Check(context.Background(), ec, &zeroClock{})
	return be, ec.Budget
}

// adversarialGap returns the time to the next arrival: none, a
// nanosecond, or landing on, just before or just after a boundary of
// width (a bucket, a slot, a token), or a long idle spell.
func adversarialGap(rng *rand.Rand, now, width int64) int64 {
	next := (now/width + 1) * width
	switch rng.Intn(9) {
	case 0:
		return 0
	case 1:
		return 1
	case 2:
		return next - now
	case 3:
		return next - now - 1
	case 4:
		return next - now + 1
	case 5:
		return 10*width + rng.Int63n(3)
	case 6:
		return next - now + width*rng.Int63n(3)
	default:
		return rng.Int63n(width)
	}
}

// budgetModel is a reference model of one rate strategy: it decides an
// entry and says the budget it leaves, from a state of its own.
type budgetModel interface {
	decide(now, n int64) (bool, core.Budget)
	reload(r rules.Flow) // the rule's new terms, its state carried over
}

// windowBudgetModel is a sliding window of ten buckets: a map of counts.
type windowBudgetModel struct {
	width  int64
	limit  float64
	counts map[int64]int64
}

func (m *windowBudgetModel) decide(now, n int64) (bool, core.Budget) {
	e := now / m.width
	var tot int64
	newest := int64(math.MinInt64)
	for k := e - 9; k <= e+1; k++ {
		tot += m.counts[k]
	}
	ok := float64(tot+n) <= m.limit
	if ok {
		m.counts[e] += n
		tot += n
	}
	for k := e - 9; k <= e+1; k++ {
		if m.counts[k] > 0 {
			newest = k
		}
	}
	b := core.Budget{Limit: m.limit, Remaining: int64(max(math.Floor(m.limit-float64(tot)), 0)), Window: time.Duration(10 * m.width)}
	if newest != math.MinInt64 {
		b.Reset = time.Duration((newest+10)*m.width - now)
	}
	return ok, b
}

func (m *windowBudgetModel) reload(r rules.Flow) { m.limit = r.Threshold }

// exactBudgetModel is the admission times of every request, newest last.
type exactBudgetModel struct {
	interval int64
	limit    int64
	times    []int64
}

func (m *exactBudgetModel) decide(now, n int64) (bool, core.Budget) {
	at := now
	if len(m.times) > 0 {
		at = max(at, m.times[len(m.times)-1])
	}
	count := func() int64 {
		var c int64
		for _, t := range m.times {
			if t > at-m.interval {
				c++
			}
		}
		return c
	}
	c := count()
	ok := c+n <= m.limit
	if ok {
		for i := int64(0); i < n; i++ {
			m.times = append(m.times, at)
		}
		c += n
	}
	b := core.Budget{Limit: float64(m.limit), Remaining: m.limit - c, Window: time.Duration(m.interval)}
	if c > 0 {
		b.Reset = time.Duration(m.times[len(m.times)-1] + m.interval - now)
	}
	return ok, b
}

func (m *exactBudgetModel) reload(r rules.Flow) { m.limit = int64(r.Threshold) }

// creditBudgetModel is a token bucket counted in nanoseconds of credit (a token
// is cost ns; whole-nanosecond costs keep it exact): credit refills one
// ns per ns up to burst×cost; a request of n takes n×cost, into debt by at
// most maxQueue (0 for a bucket that refuses at once).
type creditBudgetModel struct {
	cost, burst, maxQueue int64
	credit, at            int64
	started               bool
}

func (m *creditBudgetModel) decide(now, n int64) (bool, core.Budget) {
	capacity := m.burst * m.cost
	if !m.started {
		m.credit, m.at, m.started = capacity, now, true
	}
	if now > m.at {
		m.credit = min(capacity, m.credit+now-m.at)
		m.at = now
	}
	ok := n*m.cost-m.credit <= m.maxQueue
	if ok {
		m.credit -= n * m.cost
	}
	limit := m.burst + m.maxQueue/m.cost
	rem := int64(0)
	if m.credit+m.maxQueue >= 0 {
		rem = min((m.credit+m.maxQueue)/m.cost, limit)
	}
	return ok, core.Budget{Limit: float64(limit), Remaining: rem, Reset: time.Duration(capacity - m.credit), Window: time.Duration(limit * m.cost)}
}

func (m *creditBudgetModel) reload(rules.Flow) {}

// paceBudgetModel is a pacing schedule: the instant its slots are used up.
type paceBudgetModel struct {
	cost, maxQueue int64
	free           int64
	set            bool
}

func (m *paceBudgetModel) decide(now, n int64) (bool, core.Budget) {
	if !m.set || m.free < now {
		m.free, m.set = now, true
	}
	wait := m.free - now
	ok := wait <= m.maxQueue
	if ok {
		m.free += n * m.cost
	}
	busy := m.free - now
	if !ok {
		busy = wait
	}
	limit := m.maxQueue/m.cost + 1
	b := core.Budget{Limit: float64(limit), Reset: time.Duration(busy), Window: time.Duration(limit * m.cost)}
	if busy <= m.maxQueue {
		b.Remaining = min((m.maxQueue-busy)/m.cost+1, limit)
	}
	return ok, b
}

func (m *paceBudgetModel) reload(r rules.Flow) { m.cost = int64(time.Second) / int64(r.Threshold) }

// TestBudgetAgreesWithModels runs random adversarial sequences through each
// rate strategy and its model: every decision agrees, and so does the
// budget it leaves (Limit, Remaining, Reset, Window), before and after a
// reload that changes the threshold in the middle of the sequence.
func TestBudgetAgreesWithModels(t *testing.T) {
	cases := []struct {
		name   string
		rule   rules.Flow
		reload float64 // the threshold after the reload; 0: no reload
		width  int64   // the boundary arrivals aim at
		model  func() budgetModel
	}{
		{"reject window", rules.Flow{Resource: "r", Threshold: 5}, 8, int64(100 * time.Millisecond),
			func() budgetModel {
				return &windowBudgetModel{width: int64(100 * time.Millisecond), limit: 5, counts: map[int64]int64{}}
			}},
		{"reject window of 2s, fractional", rules.Flow{Resource: "r", Threshold: 6.5, StatInterval: 2 * time.Second}, 3, int64(200 * time.Millisecond),
			func() budgetModel {
				return &windowBudgetModel{width: int64(200 * time.Millisecond), limit: 6.5, counts: map[int64]int64{}}
			}},
		{"exact window", rules.Flow{Resource: "r", Threshold: 5, Exact: true}, 7, int64(time.Second),
			func() budgetModel { return &exactBudgetModel{interval: int64(time.Second), limit: 5} }},
		{"token bucket", rules.Flow{Resource: "r", Threshold: 10, Bucket: &rules.Bucket{Burst: 4}}, 0, int64(100 * time.Millisecond),
			func() budgetModel { return &creditBudgetModel{cost: int64(100 * time.Millisecond), burst: 4} }},
		{"token bucket throttle", rules.Flow{Resource: "r", Threshold: 10, Bucket: &rules.Bucket{Burst: 3}, Throttle: &rules.Throttle{MaxQueueing: 250 * time.Millisecond}}, 0, int64(100 * time.Millisecond),
			func() budgetModel {
				return &creditBudgetModel{cost: int64(100 * time.Millisecond), burst: 3, maxQueue: int64(250 * time.Millisecond)}
			}},
		{"throttle", rules.Flow{Resource: "r", Threshold: 10, Throttle: &rules.Throttle{MaxQueueing: 350 * time.Millisecond}}, 4, int64(100 * time.Millisecond),
			func() budgetModel {
				return &paceBudgetModel{cost: int64(100 * time.Millisecond), maxQueue: int64(350 * time.Millisecond)}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for seed := int64(1); seed <= 20; seed++ {
				rng := rand.New(rand.NewSource(seed))
				cs, err := Build([]rules.Flow{tc.rule}, nil, nodes(nil), nil)
				require.NoError(t, err)
				c := cs["r"][0]
				m := tc.model()
				now := int64(1_000_000_007)
				for step := 0; step < 300; step++ {
					if step == 150 && tc.reload > 0 {
						r := tc.rule
						r.Threshold = tc.reload
						cs, err = Build([]rules.Flow{r}, cs, nodes(nil), nil)
						require.NoError(t, err)
						c = cs["r"][0]
						m.reload(r)
					}
					now += adversarialGap(rng, now, tc.width)
					n := 1 + rng.Int63n(3)
					be, got := budgetCheck(c, now, n)
					ok, want := m.decide(now, n)
					where := fmt.Sprintf("seed %d step %d at %d batch %d", seed, step, now, n)
					require.Equal(t, ok, be == nil, "%s: decision (%v)", where, be)
					got.Rule = core.RuleRef{}
					require.Equal(t, want, got, where)
				}
			}
		})
	}
}

// TestBudgetIsOperational checks what a budget promises against the rule
// itself, with no model, for every rate strategy: after an entry that
// passed, Remaining more requests pass at the same instant and the next
// one does not (at least Remaining for warm-up, whose allowance rises as
// it warms); and at Reset after that refusal the budget is whole again (an
// entry passes and leaves Limit-1). Arrivals are adversarial, batches
// random, and the rule is reloaded half way with a new threshold.
func TestBudgetIsOperational(t *testing.T) {
	type kase struct {
		name   string
		rule   rules.Flow
		reload float64
		atLeat bool // Remaining is a lower bound (warm-up)
	}
	cases := []kase{
		{"reject", rules.Flow{Resource: "r", Threshold: 5}, 9, false},
		{"exact", rules.Flow{Resource: "r", Threshold: 4, Exact: true}, 6, false},
		{"token bucket", rules.Flow{Resource: "r", Threshold: 10, Bucket: &rules.Bucket{Burst: 4}}, 20, false},
		{"token bucket throttle", rules.Flow{Resource: "r", Threshold: 10, Bucket: &rules.Bucket{Burst: 2}, Throttle: &rules.Throttle{MaxQueueing: 300 * time.Millisecond}}, 5, false},
		{"throttle", rules.Flow{Resource: "r", Threshold: 10, Throttle: &rules.Throttle{MaxQueueing: 350 * time.Millisecond}}, 20, false},
		{"warm-up", rules.Flow{Resource: "r", Threshold: 40, WarmUp: &rules.WarmUp{Period: 2 * time.Second}}, 60, true},
		{"warm-up throttle", rules.Flow{Resource: "r", Threshold: 40, WarmUp: &rules.WarmUp{Period: 2 * time.Second}, Throttle: &rules.Throttle{MaxQueueing: 200 * time.Millisecond}}, 60, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for seed := int64(1); seed <= 10; seed++ {
				rng := rand.New(rand.NewSource(seed))
				cs, err := Build([]rules.Flow{tc.rule}, nil, nodes(nil), nil)
				require.NoError(t, err)
				c := cs["r"][0]
				now := int64(5_000_000_011)
				for step := 0; step < 60; step++ {
					if step == 30 {
						r := tc.rule
						r.Threshold = tc.reload
						cs, err = Build([]rules.Flow{r}, cs, nodes(nil), nil)
						require.NoError(t, err)
						c = cs["r"][0]
					}
					now += adversarialGap(rng, now, int64(100*time.Millisecond))
					be, b := budgetCheck(c, now, 1+rng.Int63n(2))
					if be != nil || rng.Intn(3) != 0 {
						continue
					}
					where := fmt.Sprintf("seed %d step %d at %d: %+v", seed, step, now, b)
					require.GreaterOrEqual(t, b.Limit, float64(b.Remaining), where)
					// Drain: Remaining single requests pass at now.
					for i := int64(0); i < b.Remaining; i++ {
						be, _ := budgetCheck(c, now, 1)
						require.Nil(t, be, "%s: request %d of %d remaining", where, i+1, b.Remaining)
					}
					var rb core.Budget
					for extra := 0; ; extra++ {
						be, rb = budgetCheck(c, now, 1)
						if be != nil {
							break
						}
						require.True(t, tc.atLeat, "%s: request %d beyond the remaining passed", where, extra+1)
						require.Less(t, extra, 1000, where)
					}
					require.Zero(t, rb.Remaining, "%s: refused with %+v", where, rb)
					require.Positive(t, rb.Reset, where)
					// At Reset the budget is whole.
					now += int64(rb.Reset)
					be, full := budgetCheck(c, now, 1)
					require.Nil(t, be, "%s: refused at reset %v", where, rb.Reset)
					require.Equal(t, int64(math.Floor(full.Limit))-1, full.Remaining, "%s: at reset %v: %+v", where, rb.Reset, full)
				}
			}
		})
	}
}

// TestBudgetWarmUpAgreesWithModel: a warm-up rule's budget, refusing at
// once and pacing, against the warm-up reference model
// (warmup_model_test.go) at adversarial instants with batches, across a
// reload to another curve: Limit is
// the model's allowance at the decision (for pacing, the requests its
// queue holds at that allowance), Remaining and Reset follow from the
// model's window or schedule as core.Budget defines them.
func TestBudgetWarmUpAgreesWithModel(t *testing.T) {
	for _, r := range []rules.Flow{
		{Resource: "r", Threshold: 40, WarmUp: &rules.WarmUp{Period: 2 * time.Second}},
		{Resource: "r", Threshold: 40, WarmUp: &rules.WarmUp{Period: 2 * time.Second}, Throttle: &rules.Throttle{MaxQueueing: 200 * time.Millisecond}},
	} {
		t.Run(string(behaviorOf(&r)), func(t *testing.T) {
			for seed := int64(1); seed <= 10; seed++ {
				rng := rand.New(rand.NewSource(seed))
				cs, err := Build([]rules.Flow{r}, nil, nodes(nil), nil)
				require.NoError(t, err)
				c := cs["r"][0]
				m := newModel(r)
				now := int64(9_000_000_013)
				rule := r
				for step := 0; step < 300; step++ {
					if step == 150 { // another curve: fresh tokens, the same window and queue
						rule.Threshold = 60
						cs, err = Build([]rules.Flow{rule}, cs, nodes(nil), nil)
						require.NoError(t, err)
						c = cs["r"][0]
						m.reload(rule)
					}
					now += adversarialGap(rng, now, int64(25*time.Millisecond))
					n := 1 + rng.Int63n(2)
					m.sync(now)
					lim := m.allowance()
					// A refused entry's wait: the schedule's start, as decide finds it.
					wait := int64(math.Round(math.Max(m.free, float64(now))) - float64(now))
					ok, _ := m.decide(now, n)
					be, got := budgetCheck(c, now, n)
					where := fmt.Sprintf("seed %d step %d at %d batch %d allowance %g", seed, step, now, n, lim)
					require.Equal(t, ok, be == nil, "%s: %v", where, be)
					got.Rule = core.RuleRef{}
					require.Equal(t, warmUpBudget(m, rule, now, lim, ok, wait), got, where)
				}
			}
		})
	}
}

// warmUpBudget is the budget core.Budget defines for warm-up model m after
// its decision at now (ok: admitted) at allowance lim; wait is the wait a
// pacing rule's entry had, or would have had when refused.
func warmUpBudget(m *model, r rules.Flow, now int64, lim float64, ok bool, wait int64) core.Budget {
	if r.Throttle != nil {
		cost := float64(m.iv) / lim
		busy := float64(wait)
		if ok {
			busy = math.Round(m.free) - float64(now)
		}
		limit := math.Floor(float64(r.Throttle.MaxQueueing)/cost) + 1
		b := core.Budget{Limit: limit, Reset: time.Duration(math.Ceil(math.Max(busy, 0))), Window: time.Duration(limit * cost)}
		for j := 0.0; j < limit && math.Max(busy, 0)+j*cost <= float64(r.Throttle.MaxQueueing); j++ {
			b.Remaining++
		}
		return b
	}
	b := core.Budget{Limit: lim, Remaining: int64(math.Max(math.Floor(lim-m.inWindow(now)), 0)), Window: time.Duration(m.iv)}
	e := now / m.width
	for i := len(m.adm) - 1; i >= 0; i-- {
		if k := m.adm[i].at / m.width; k > e-10 {
			b.Reset = time.Duration((k+10)*m.width - now)
			break
		}
	}
	return b
}
