package param

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/conformance"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/ruledef"
	"github.com/sluice-go/sluice/rules"
)

// paramModel is the documented semantics of a local param rule
// (docs/design/param.md), written with math/big so that no rounding can hide:
//
//   - QPS reject: each value owns a bucket of Threshold+Burst tokens, full
//     when first seen, earning exactly Threshold tokens per Duration
//     (credit kept in units of 1/Duration_ns of a token); a batch takes
//     its tokens or is refused, RetryAfter the exact time until the bucket
//     holds them (rounded up to the nanosecond), Observed the tokens used,
//     Threshold the bucket's size; tokens of an entry refused later come
//     back;
//   - QPS throttle: each value's schedule is the instant its last slot
//     ends, a rational number of nanoseconds; an idle schedule starts
//     afresh at the entry's start; a batch of n takes n slots of
//     Duration/Threshold and waits until its first, rounded up to the
//     nanosecond; a wait longer than MaxQueueing is refused; a cancelled
//     wait gives its slots back when nothing was scheduled behind it;
//   - concurrency: at most Threshold in flight per value;
//   - Exceptions replace Threshold (0 refuses every request), a batch
//     larger than the limit is refused and leaves nothing behind, and a
//     reload that keeps the counting keeps every value's state.
type paramModel struct {
	rule   rules.Param
	values map[string]*modelValue
}

type modelValue struct {
	credit   *big.Int // reject: tokens × Duration_ns
	last     int64    // reject: the last refill
	end      *big.Rat // throttle: when the last slot ends
	endT     int64    // throttle: the threshold end was scheduled with
	inflight int64
}

func (m *paramModel) threshold(v string) int64 {
	if t, ok := m.rule.Exceptions[v]; ok {
		return t
	}
	return m.rule.Threshold
}
func (m *paramModel) window() int64 { return int64(cmp.Or(m.rule.Duration, ruledef.ParamDuration)) }

// paramDecision is what a check decided, and the wait a throttle asked of
// the clock.
type paramDecision struct {
	pass       bool
	observed   float64
	threshold  float64
	retryAfter time.Duration
	reason     string
	wait       time.Duration
}

func (d paramDecision) String() string {
	if d.pass {
		return fmt.Sprintf("pass(wait %v)", d.wait)
	}
	return fmt.Sprintf("refuse(observed %v, threshold %v, retry %v, %q)", d.observed, d.threshold, d.retryAfter, d.reason)
}

func ceilRat(r *big.Rat) int64 {
	q, m := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// check decides a batch of n of value v at now; cancelled says the wait,
// if any, is cancelled.
func (m *paramModel) check(v string, now, n int64, cancelled bool) paramDecision {
	t := m.threshold(v)
	if t == 0 {
		return paramDecision{reason: "value refused by its exception"}
	}
	limit := t
	if m.rule.Metric == rules.QPS && behaviorOf(&m.rule) == behReject {
		limit += m.rule.Burst
	}
	if n > limit {
		return paramDecision{observed: float64(n), threshold: float64(limit), reason: "batch larger than threshold"}
	}
	st := m.values[v]
	W := big.NewInt(m.window())
	switch {
	case m.rule.Metric == rules.Concurrency:
		if st == nil {
			st = &modelValue{}
			m.values[v] = st
		}
		if st.inflight+n > t {
			return paramDecision{observed: float64(st.inflight), threshold: float64(t)}
		}
		st.inflight += n
		return paramDecision{pass: true}
	case behaviorOf(&m.rule) == behThrottle:
		if st == nil {
			st = &modelValue{end: new(big.Rat)}
			m.values[v] = st
		}
		end := m.carry(st, t) // kept only if the entry is scheduled
		begin := ceilRat(end)
		from := new(big.Rat).Set(end)
		if begin <= now {
			begin = now
			from.SetInt64(now)
		}
		wait := begin - now
		if mq := int64(maxQueueing(&m.rule)); wait > mq {
			return paramDecision{observed: float64(wait) / 1e6, threshold: float64(mq) / 1e6,
				retryAfter: time.Duration(wait - mq), reason: "wait exceeds max queueing"}
		}
		if cancelled && wait > 0 {
			// Nothing was scheduled behind it in this timeline: its slots
			// come back, and the schedule is as it was.
			return paramDecision{observed: float64(wait) / 1e6, threshold: float64(maxQueueing(&m.rule)) / 1e6,
				reason: "wait cancelled: " + context.Canceled.Error()}
		}
		st.end, st.endT = from.Add(from, new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(n), W), big.NewInt(t))), t
		return paramDecision{pass: true, wait: time.Duration(wait)}
	default:
		size := new(big.Int).Mul(big.NewInt(t+m.rule.Burst), W)
		if st == nil {
			st = &modelValue{credit: new(big.Int).Set(size), last: now}
			m.values[v] = st
		}
		if st.credit.Cmp(size) > 0 {
			st.credit.Set(size)
		}
		st.credit.Add(st.credit, new(big.Int).Mul(big.NewInt(now-st.last), big.NewInt(t)))
		if st.credit.Cmp(size) > 0 {
			st.credit.Set(size)
		}
		st.last = now
		need := new(big.Int).Mul(big.NewInt(n), W)
		if st.credit.Cmp(need) >= 0 {
			st.credit.Sub(st.credit, need)
			return paramDecision{pass: true}
		}
		have := new(big.Int).Quo(st.credit, W).Int64()
		short := new(big.Int).Sub(need, st.credit)
		retry := new(big.Int).Quo(short.Add(short, big.NewInt(t-1)), big.NewInt(t))
		if !retry.IsInt64() { // longer than a time.Duration: the longest one
			retry.SetInt64(math.MaxInt64)
		}
		return paramDecision{observed: float64(t + m.rule.Burst - have), threshold: float64(t + m.rule.Burst), retryAfter: entry.RetryMs(time.Duration(retry.Int64()))}
	}
}

// release ends an admitted batch of n of value v; blocked: a later check
// refused it.
func (m *paramModel) release(v string, n int64, blocked bool) {
	st := m.values[v]
	switch {
	case m.rule.Metric == rules.Concurrency:
		st.inflight -= n
	case behaviorOf(&m.rule) == behReject && blocked:
		st.credit.Add(st.credit, new(big.Int).Mul(big.NewInt(n), big.NewInt(m.window())))
	}
}

// reload puts rule r in force. With the same counting (resource,
// argument, metric, behavior, Duration, Capacity) every value keeps its
// state; other counting starts afresh.
func (m *paramModel) reload(r rules.Param) {
	old := m.rule
	m.rule = r
	if cmp.Or(old.Duration, ruledef.ParamDuration) != cmp.Or(r.Duration, ruledef.ParamDuration) || old.Metric != r.Metric || behaviorOf(&old) != behaviorOf(&r) {
		m.values = map[string]*modelValue{}
	}
}

// carry returns the end of st's schedule under threshold t when it was
// made under another threshold (a reload changed it): the end lies a
// fraction of a nanosecond past a whole one, a whole number of units of
// 1/endT ns. That many units of the new threshold, when fewer than t, are
// kept as the fraction; otherwise the end is rounded up to the next
// nanosecond. Either way it moves by less than a nanosecond (docs/design/param.md).
// The caller keeps the result only when it schedules an entry.
func (m *paramModel) carry(st *modelValue, t int64) *big.Rat {
	if st.endT == 0 || st.endT == t {
		return st.end
	}
	whole := new(big.Int).Quo(st.end.Num(), st.end.Denom())
	frac := new(big.Rat).Sub(st.end, new(big.Rat).SetInt(whole))
	units := new(big.Rat).Mul(frac, big.NewRat(st.endT, 1))
	if !units.IsInt() {
		panic("schedule fraction not in whole units")
	}
	switch u := units.Num().Int64(); {
	case u == 0:
		return st.end
	case u >= t:
		return new(big.Rat).SetInt(whole.Add(whole, big.NewInt(1)))
	default:
		return new(big.Rat).Add(new(big.Rat).SetInt(whole), big.NewRat(u, t))
	}
}

// instantClock is a clock whose timers fire at once and record the wait
// they were asked for; with never set, they never fire.
type instantClock struct {
	waits []time.Duration
	never bool
}

func (c *instantClock) Nanotime() int64 { return 0 }
func (c *instantClock) NewTimer(d time.Duration) core.Timer {
	c.waits = append(c.waits, d)
	if c.never {
		return firedTimer(nil)
	}
	ch := make(chan time.Time, 1)
	ch <- time.Time{}
	return firedTimer(ch)
}

var paramDurations = []time.Duration{time.Millisecond, 10 * time.Millisecond, time.Second, 7 * time.Second, time.Minute, time.Hour, 24 * time.Hour}

func randomParamRule(rng *rand.Rand, metric rules.FlowMetric, behavior behavior, d time.Duration) rules.Param {
	r := rules.Param{Resource: "r", Metric: metric, Throttle: behavior.section(0), Threshold: 1 + rng.Int64N(7)}
	if metric == rules.QPS {
		r.Duration = d
	}
	if metric == rules.QPS && behavior == behReject {
		r.Burst = rng.Int64N(4)
	}
	if behavior == behThrottle {
		r.Throttle.MaxQueueing = min(time.Duration(rng.Int64N(4))*d/3, time.Hour)
		if rng.IntN(4) == 0 {
			r.Threshold = 1_000_000_007 // fractions of a nanosecond in every slot
		}
	}
	if rng.IntN(6) == 0 { // the largest numbers validation accepts
		r.Threshold = rules.MaxThreshold - rng.Int64N(3)
		if r.Burst > 0 {
			r.Burst = rules.MaxThreshold - rng.Int64N(3)
		}
		if metric == rules.QPS && rng.IntN(2) == 0 {
			r.Duration = ruledef.MaxParamDuration
		}
	}
	switch rng.IntN(3) {
	case 0:
		r.Exceptions = map[string]int64{"vip": min(r.Threshold+1+rng.Int64N(5), rules.MaxThreshold)}
	case 1:
		r.Exceptions = map[string]int64{"vip": 1 + rng.Int64N(3), "banned": 0}
	}
	return r
}

var paramValues = []string{"a", "b", "vip", "banned"}

// heldBatch is an admitted entry still in flight (concurrency).
type heldBatch struct {
	ec *entry.Context
	v  string
}

// TestConformanceParamAgainstModel drives param rules of the three kinds
// (QPS reject, QPS throttle, concurrency) over a few values with seeded
// random timelines: zero gaps, arrivals on the exact nanosecond a bucket
// earns the tokens a batch needs or a slot begins (and one before),
// fractions of a slot, long idles, batches up to the limit plus one,
// exceptions (one above, one below the threshold, one 0), cancelled waits,
// tokens given back by a later check, and reloads that keep the counting
// (new threshold, burst, exceptions, queueing) or change it. Every
// decision, every refusal's Observed, Threshold, RetryAfter and Reason,
// and every throttle wait must equal paramModel's.
func TestConformanceParamAgainstModel(t *testing.T) {
	kinds := []struct {
		name     string
		metric   rules.FlowMetric
		behavior behavior
	}{
		{"qps-reject", rules.QPS, behReject},
		{"qps-throttle", rules.QPS, behThrottle},
		{"concurrency", rules.Concurrency, behReject},
	}
	for ki, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			const sequences = 40
			steps := conformance.Steps(800)
			checks, refused := 0, 0
			for seq := 0; seq < sequences; seq++ {
				seed := uint64(seq*31 + ki*100_003 + 5)
				rng := rand.New(rand.NewPCG(seed, 17))
				r := randomParamRule(rng, kind.metric, kind.behavior, paramDurations[rng.IntN(len(paramDurations))])
				cs, err := Build([]rules.Param{r}, nil, nil)
				require.NoError(t, err)
				m := &paramModel{rule: r, values: map[string]*modelValue{}}
				now := int64(time.Hour) + rng.Int64N(int64(time.Hour))
				var held []heldBatch
				clk := &instantClock{}
				for step := 0; step < steps; step++ {
					w := m.window()
					if kind.metric == rules.Concurrency {
						w = int64(time.Second)
					}
					if now > 1<<61 {
						break // long slots and idles have used up the clock's range
					}
					k := rng.IntN(100)
					if len(held) > 64 {
						k = 10 // keep the entries in flight bounded: one exits
					}
					switch {
					case k < 3: // reload, same counting
						d := r.Duration
						r = randomParamRule(rng, kind.metric, kind.behavior, d)
						r.Duration = d
						cs, err = Build([]rules.Param{r}, cs, nil)
						require.NoError(t, err)
						m.reload(r)
						continue
					case k < 4 && kind.metric == rules.QPS: // reload, another Duration: afresh
						d := paramDurations[rng.IntN(len(paramDurations))]
						if d == cmp.Or(r.Duration, ruledef.ParamDuration) {
							d += time.Millisecond
						}
						r = randomParamRule(rng, kind.metric, kind.behavior, d)
						cs, err = Build([]rules.Param{r}, cs, nil)
						require.NoError(t, err)
						m.reload(r)
						continue
					case k < 25 && len(held) > 0: // a concurrency entry exits
						i := rng.IntN(len(held))
						h := held[i]
						held = append(held[:i], held[i+1:]...)
						h.ec.ReleaseTickets(entry.ExitInfo{Start: h.ec.Start, End: now, Batch: h.ec.Batch})
						m.release(h.v, h.ec.Batch, false)
						continue
					}
					v := paramValues[rng.IntN(len(paramValues))]
					// The gap: none, onto the instant the value's bucket
					// earns the batch or its schedule frees (or 1 ns
					// before), a fraction of a slot, or a long idle.
					st := m.values[v]
					switch g := rng.IntN(10); {
					case g < 3:
					case g < 6 && st != nil && st.end != nil:
						now = max(now, ceilRat(st.end)-int64(rng.IntN(2)))
					case g < 6 && st != nil && st.credit != nil:
						if t := m.threshold(v); t > 0 {
							short := new(big.Int).Sub(big.NewInt(w), st.credit)
							if short.Sign() > 0 {
								d := new(big.Int).Quo(short.Add(short, big.NewInt(t-1)), big.NewInt(t)).Int64()
								now = max(now, st.last+d-int64(rng.IntN(2)))
							}
						}
					case g < 9:
						now += rng.Int64N(w/max(m.rule.Threshold, 1)+1) + 1
					default:
						now += rng.Int64N(min(3*w, 1<<50))
					}
					n := int64(1)
					if rng.IntN(4) == 0 {
						n = 1 + rng.Int64N(m.rule.Threshold+m.rule.Burst+2)
					}
					cancel := kind.behavior == behThrottle && rng.IntN(6) == 0
					ctx := context.Background()
					clk.never = cancel
					if cancel {
						c, stop := context.WithCancel(ctx)
						stop()
						ctx = c
					}
					clk.waits = nil
					ec := &entry.Context{Resource: "r", Batch: n, Start: now}
					be := cs["r"][0].CheckKey(ctx, ec, v, clk)
					got := paramDecision{pass: be == nil}
					if be != nil {
						got = paramDecision{observed: be.Observed, threshold: be.Threshold, retryAfter: be.RetryAfter, reason: be.Reason}
					} else if len(clk.waits) > 0 {
						got.wait = clk.waits[0]
					}
					want := m.check(v, now, n, cancel)
					checks++
					if !want.pass {
						refused++
					}
					if got != want {
						t.Fatalf("seed %d step %d: rule %+v, value %q batch %d at %d: engine %v, model %v",
							seed, step, r, v, n, now, got, want)
					}
					if got.pass {
						switch {
						case kind.metric == rules.Concurrency:
							held = append(held, heldBatch{ec: ec, v: v})
						case rng.IntN(8) == 0: // a later check refuses it
							ec.ReleaseRefused()
							m.release(v, n, true)
						}
					}
				}
			}
			t.Logf("%d sequences, %d checks (%d refusals), 0 mismatches", sequences, checks, refused)
		})
	}
}

// TestPeersHotspotCases replays sentinel-golang's hotspot cases
// (core/hotspot/traffic_shaping_test.go), which set their counters through
// mocks, by driving sluice's controllers to the same counters on the
// manual clock. One differs by design: Sentinel adds tokens only once a
// whole Duration has passed since the last fill; sluice earns them
// continuously (docs/design/param.md), so after 1 s of a 10 s Duration it has
// earned a tenth of Threshold where Sentinel has earned nothing.
func TestPeersHotspotCases(t *testing.T) {
	const sec = int64(time.Second)
	qps := func(threshold, burst int64, d time.Duration) *Controller {
		return newCtl(t, rules.Param{Threshold: threshold, Burst: burst, Duration: d})
	}
	run := func(c *Controller, now, n int64, v string) *core.BlockError {
		return c.CheckKey(context.Background(), &entry.Context{Resource: "res", Batch: n, Start: now}, v, nil)
	}
	tokens := func(c *Controller, v string, now int64) int64 {
		n, _ := c.Tokens(v, now)
		return n
	}

	t.Run("Test_defaultTrafficShapingController_performChecking_TimeCounter_Nil", func(t *testing.T) {
		c := qps(100, 10, time.Second)
		be := run(c, start, 130, "010110")
		require.NotNil(t, be, "130 is more than threshold + burst")
		require.Equal(t, "batch larger than threshold", be.Reason)
		require.Nil(t, run(c, start, 20, "010110"), "a new value's bucket is full")
	})
	t.Run("Test_defaultTrafficShapingController_performChecking_Sub_Token", func(t *testing.T) {
		c := qps(100, 10, 10*time.Second)
		require.Nil(t, run(c, start-sec, 60, "010110")) // 50 left, as the mock has it
		require.Nil(t, run(c, start, 20, "010110"))
		// Sentinel: 30 (no refill within the Duration); sluice: 50 + 10 earned in 1 s - 20.
		require.Equal(t, int64(40), tokens(c, "010110", start))
	})
	t.Run("Test_defaultTrafficShapingController_performChecking_First_Fill_Token", func(t *testing.T) {
		c := qps(100, 10, time.Second)
		require.Nil(t, run(c, start, 20, "010110"))
		require.Equal(t, int64(90), tokens(c, "010110", start))
	})
	t.Run("Test_defaultTrafficShapingController_performChecking_Refill_Token", func(t *testing.T) {
		c := qps(100, 10, time.Second)
		require.Nil(t, run(c, start-1001*int64(time.Millisecond), 60, "010110")) // 50 left
		require.Nil(t, run(c, start, 20, "010110"))
		require.Equal(t, int64(90), tokens(c, "010110", start), "refilled to the bucket's size, then 20 taken")
	})
	t.Run("Test_throttlingTrafficShapingController_performChecking", func(t *testing.T) {
		c := newCtl(t, rules.Param{Threshold: 100, Throttle: &rules.Throttle{MaxQueueing: 10 * time.Millisecond}})
		require.Nil(t, run(c, start-201*int64(time.Millisecond), 1, "010110"))
		clk := &instantClock{}
		require.Nil(t, c.CheckKey(context.Background(), &entry.Context{Resource: "res", Batch: 1, Start: start}, "010110", clk))
		require.Empty(t, clk.waits, "the last pass was 201 ms ago: no wait")
	})
	t.Run("Test_baseTrafficShapingController_performCheckingForConcurrencyMetric", func(t *testing.T) {
		c := newCtl(t, rules.Param{Metric: rules.Concurrency, Threshold: 100})
		for i := 0; i < 50; i++ {
			require.Nil(t, run(c, start, 1, "666688"))
		}
		require.Nil(t, run(c, start, 1, "666688"), "51 of 100 in flight")
		require.Nil(t, run(c, start, 49, "666688"))
		require.NotNil(t, run(c, start, 1, "666688"), "101 would be in flight")

		c = newCtl(t, rules.Param{Metric: rules.Concurrency, Threshold: 100, Exceptions: map[string]int64{"666688": 20}})
		require.Nil(t, run(c, start, 20, "666688"))
		require.NotNil(t, run(c, start, 1, "666688"), "the exception's 20 are in flight")
	})
}

// signalClock is a clock whose timers never fire; each NewTimer is told on
// asked, so a test knows a check has scheduled its wait.
type signalClock struct{ asked chan time.Duration }

func (c *signalClock) Nanotime() int64 { return 0 }
func (c *signalClock) NewTimer(d time.Duration) core.Timer {
	c.asked <- d
	return firedTimer(nil)
}

// TestThrottleCancelWithAWaiterBehindKeepsTheSchedule: a cancelled wait
// gives its slots back only when nothing was scheduled behind it
// (docs/design/param.md); with a waiter behind, the schedule stays, so no two
// entries ever share a slot (what x/time/rate's CancelAt also guarantees).
// A takes the slot at 100 ms and waits, B takes 200 ms, A is cancelled: C
// gets 300 ms, not A's 100 ms.
func TestThrottleCancelWithAWaiterBehindKeepsTheSchedule(t *testing.T) {
	c := newCtl(t, rules.Param{Threshold: 10, Throttle: &rules.Throttle{MaxQueueing: time.Second}})
	run := func(ctx context.Context, clk core.Clock) *core.BlockError {
		return c.CheckKey(ctx, &entry.Context{Resource: "res", Batch: 1, Start: start}, "u", clk)
	}
	require.Nil(t, run(context.Background(), &instantClock{}), "the first passes at once")

	ctx, cancel := context.WithCancel(context.Background())
	sig := &signalClock{asked: make(chan time.Duration, 1)}
	done := make(chan *core.BlockError)
	go func() { done <- run(ctx, sig) }()
	require.Equal(t, 100*time.Millisecond, <-sig.asked, "A waits for the second slot")

	b := &instantClock{}
	require.Nil(t, run(context.Background(), b))
	require.Equal(t, []time.Duration{200 * time.Millisecond}, b.waits, "B is scheduled behind A")

	cancel()
	be := <-done
	require.NotNil(t, be)
	require.Contains(t, be.Reason, "wait cancelled")

	cc := &instantClock{}
	require.Nil(t, run(context.Background(), cc))
	require.Equal(t, []time.Duration{300 * time.Millisecond}, cc.waits, "A's slot is not handed out again while B holds the next")
}
