package flow

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/conformance"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/ruledef"
	"github.com/sluice-go/sluice/internal/window"
	"github.com/sluice-go/sluice/rules"
)

// windowModel is the documented semantics of a QPS reject rule, written
// as plainly as possible (README "Flow rules", docs/design/architecture.md):
//
//   - bucketed (Exact false): admissions are counted in buckets of
//     StatInterval/10; a batch of n at t passes when the admissions of
//     t's bucket and the nine before it, plus n, stay within Threshold.
//     A refusal's RetryAfter is the time until the start of the first
//     bucket from which the batch would pass if nothing else were
//     admitted: when enough of the oldest buckets have slid out.
//   - exact: a batch of n at t passes when the admissions in
//     (t-StatInterval, t], plus n, stay within Threshold. A refusal's
//     RetryAfter is the time until enough of them are StatInterval old.
//
// Either way a batch larger than Threshold is refused with the reason
// "batch larger than threshold" and no RetryAfter, Observed is the
// admissions counted (or the batch, when too large), and an admission that
// a later check refuses is taken back. It keeps every admission, in a
// map and a slice, and recomputes every sum from scratch.
type windowModel struct {
	exact    bool
	interval int64 // ns
	width    int64 // ns per bucket
	limit    float64
	buckets  map[int64]int64 // bucket index -> admissions (bucketed)
	times    []int64         // admission instants, one per request (exact)
}

func newWindowModel(r rules.Flow) *windowModel {
	m := &windowModel{exact: r.Exact, limit: r.Threshold}
	m.reset(r)
	return m
}

// reset starts the model afresh with rule r's interval.
func (m *windowModel) reset(r rules.Flow) {
	m.interval = int64(cmp.Or(r.StatInterval, ruledef.StatInterval))
	m.width = m.interval / 10
	m.buckets = map[int64]int64{}
	m.times = nil
}

// windowDecision is what a check decided: passed, or refused with these
// figures.
type windowDecision struct {
	pass       bool
	observed   float64
	threshold  float64
	retryAfter time.Duration
	reason     string
}

func (d windowDecision) String() string {
	if d.pass {
		return "pass"
	}
	return fmt.Sprintf("refuse(observed %v, threshold %v, retry %v, %q)", d.observed, d.threshold, d.retryAfter, d.reason)
}

func decisionOf(be *core.BlockError) windowDecision {
	if be == nil {
		return windowDecision{pass: true}
	}
	return windowDecision{observed: be.Observed, threshold: be.Threshold, retryAfter: be.RetryAfter, reason: be.Reason}
}

// sumBuckets returns the admissions of buckets from..to, both included.
func (m *windowModel) sumBuckets(from, to int64) int64 {
	var s int64
	for b := from; b <= to; b++ {
		s += m.buckets[b]
	}
	return s
}

// inWindow returns the admissions in (now-interval, now], oldest first.
func (m *windowModel) inWindow(now int64) []int64 {
	var out []int64
	for _, t := range m.times {
		if t > now-m.interval {
			out = append(out, t)
		}
	}
	return out
}

func (m *windowModel) decide(now, n int64) windowDecision {
	if float64(n) > m.limit {
		return windowDecision{observed: float64(n), threshold: m.limit, reason: reasonTooLarge}
	}
	if m.exact {
		win := m.inWindow(now)
		if float64(len(win))+float64(n) > m.limit {
			// The batch passes once all but limit-n of the requests in
			// the window are StatInterval old.
			oldest := win[len(win)-(int(m.limit)-int(n)+1)]
			return windowDecision{observed: float64(len(win)), threshold: m.limit, retryAfter: time.Duration(oldest + m.interval - now)}
		}
		for i := int64(0); i < n; i++ {
			m.times = append(m.times, now)
		}
		return windowDecision{pass: true}
	}
	b := now / m.width
	total := m.sumBuckets(b-9, b)
	if float64(total+n) > m.limit {
		f := b + 1
		for float64(m.sumBuckets(f-9, b)+n) > m.limit {
			f++
		}
		// A reject rule's RetryAfter is whole milliseconds, rounded up.
		wait := f*m.width - now
		wait += (int64(time.Millisecond) - wait%int64(time.Millisecond)) % int64(time.Millisecond)
		return windowDecision{observed: float64(total), threshold: m.limit, retryAfter: time.Duration(wait)}
	}
	m.buckets[b] += n
	return windowDecision{pass: true}
}

// undo takes back the batch of n admitted at now.
func (m *windowModel) undo(now, n int64) {
	if m.exact {
		m.times = m.times[:len(m.times)-int(n)]
		return
	}
	m.buckets[now/m.width] -= n
}

// forget drops what can no longer matter at now, to keep the model small.
func (m *windowModel) forget(now int64) {
	if m.exact {
		m.times = m.inWindow(now)
		return
	}
	for b := range m.buckets {
		if b < now/m.width-10 {
			delete(m.buckets, b)
		}
	}
}

// checkWindowPromises checks the README's promises on the admissions of
// one stretch of a timeline under one rule (times sorted, one per request):
// bucketed, at most Threshold in any interval of 0.9·StatInterval and in
// any interval of StatInterval that starts on a bucket boundary; exact, at
// most Threshold in any interval of StatInterval.
func checkWindowPromises(t *testing.T, seed int64, adm []int64, m *windowModel) {
	t.Helper()
	limit := int(math.Floor(m.limit))
	// From every admission a: exact, the interval [a, a+StatInterval);
	// bucketed, the closed interval [a, a+0.9·StatInterval].
	last := m.interval - 1
	if !m.exact {
		last = m.interval * 9 / 10
	}
	j := 0
	for i, a := range adm {
		for j < len(adm) && adm[j] <= a+last {
			j++
		}
		if j-i > limit {
			t.Fatalf("seed %d: %d admissions in [%d, %d], threshold %v", seed, j-i, a, a+last, m.limit)
		}
	}
	if m.exact {
		return
	}
	counts := map[int64]int{} // by bucket
	for _, a := range adm {
		counts[a/m.width]++
	}
	for b := range counts {
		n := 0
		for k := b; k < b+10; k++ {
			n += counts[k]
		}
		if n > limit {
			t.Fatalf("seed %d: %d admissions in the aligned interval from bucket %d, threshold %v", seed, n, b, m.limit)
		}
	}
}

// windowRule returns a random QPS reject rule: bucketed (whole or
// fractional threshold) or exact (whole threshold).
func windowRule(rng *rand.Rand, exact bool, interval time.Duration) rules.Flow {
	r := rules.Flow{Resource: "r", StatInterval: interval, Exact: exact}
	if exact || rng.Intn(3) > 0 {
		r.Threshold = float64(1 + rng.Intn(12))
	} else {
		r.Threshold = 1 + math.Round(rng.Float64()*1100)/100 // 1.00 .. 12.00
	}
	return r
}

var windowIntervals = []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second, 1230 * time.Millisecond, time.Minute}

// windowGap returns an adversarial gap before the next arrival at now:
// none, onto a bucket boundary or one nanosecond either side of it, onto
// the instant the oldest admission of the exact log leaves the interval
// (or just before), a fraction of a bucket, a whole interval, or a long
// idle of up to a thousand intervals.
func windowGap(rng *rand.Rand, m *windowModel, now int64) int64 {
	next := (now/m.width + 1) * m.width
	switch k := rng.Intn(20); {
	case k < 6:
		return 0
	case k < 9:
		return next - now
	case k < 10:
		return next - now - 1 + int64(rng.Intn(3))
	case k < 12:
		if win := m.inWindow(now); len(win) > 0 {
			return win[rng.Intn(len(win))] + m.interval - now - int64(rng.Intn(2))
		}
		return next - now
	case k < 17:
		return rng.Int63n(m.width) + 1
	case k < 19:
		return m.interval - int64(rng.Intn(2))*m.width
	default:
		return rng.Int63n(1000*m.interval) + m.interval
	}
}

// TestConformanceWindowAgainstModel drives QPS reject rules, bucketed and
// exact, with seeded random timelines: bursts at bucket boundaries and at
// the instants an exact rule's oldest admission expires, zero gaps, long
// idles, batches up to Threshold+1, admissions taken back by a later
// check, and reloads (a new threshold keeps the window; a new interval
// starts afresh). Every decision, and every refusal's Observed,
// Threshold, RetryAfter and Reason, must equal windowModel's, and the
// admissions under each rule must keep the README's promises
// (checkWindowPromises).
func TestConformanceWindowAgainstModel(t *testing.T) {
	for _, exact := range []bool{false, true} {
		t.Run(fmt.Sprintf("exact=%v", exact), func(t *testing.T) {
			const sequences = 60
			steps := conformance.Steps(1000)
			total, refused := 0, 0
			for seq := 0; seq < sequences; seq++ {
				seed := int64(seq)*7919 + 1
				if exact {
					seed += 1_000_000
				}
				rng := rand.New(rand.NewSource(seed))
				interval := windowIntervals[rng.Intn(len(windowIntervals))]
				r := windowRule(rng, exact, interval)
				nf := nodes(nil)
				cs, err := Build([]rules.Flow{r}, nil, nf, nil)
				require.NoError(t, err)
				m := newWindowModel(r)
				var adm []int64 // admissions under the rule in force, one per request
				promises := func() {
					checkWindowPromises(t, seed, adm, m)
					adm = adm[:0]
				}
				now := int64(time.Hour) + rng.Int63n(int64(time.Hour))
				if seq%3 == 0 { // a process up for up to a year: bucket indexes past 2^27
					now = rng.Int63n(1 << 55)
				}
				for step := 0; step < steps; step++ {
					switch k := rng.Intn(100); {
					case k < 2: // reload with a new threshold: the window stays
						promises()
						r = windowRule(rng, exact, r.StatInterval)
						cs, err = Build([]rules.Flow{r}, cs, nf, nil)
						require.NoError(t, err)
						m.limit = r.Threshold
						continue
					case k < 3: // reload with a new interval: a fresh window
						promises()
						r = windowRule(rng, exact, windowIntervals[rng.Intn(len(windowIntervals))])
						if r.StatInterval == time.Duration(m.interval) {
							r.StatInterval += 10 * time.Millisecond
						}
						cs, err = Build([]rules.Flow{r}, cs, nf, nil)
						require.NoError(t, err)
						m.limit = r.Threshold
						m.reset(r)
						continue
					}
					now += windowGap(rng, m, now)
					n := int64(1)
					if rng.Intn(4) == 0 {
						n = 1 + rng.Int63n(int64(math.Ceil(r.Threshold))+1)
					}
					ec := &entry.Context{Resource: "r", Batch: n, Start: now}
					got := decisionOf(cs["r"][0].Check(context.Background(), ec, nil))
					want := m.decide(now, n)
					total++
					if !want.pass {
						refused++
					}
					if got != want {
						t.Fatalf("seed %d step %d: %+v, batch %d at %d ns (bucket %d): engine %v, model %v",
							seed, step, r, n, now, now/m.width, got, want)
					}
					if got.pass && rng.Intn(8) == 0 {
						// A later check refused the entry: it gives back what it took.
						ec.ReleaseTickets(entry.ExitInfo{Start: now, End: now, Batch: n, Blocked: true})
						m.undo(now, n)
					} else if got.pass {
						for i := int64(0); i < n; i++ {
							adm = append(adm, now)
						}
					}
					m.forget(now)
				}
				promises()
			}
			t.Logf("%d sequences, %d decisions (%d refusals), 0 mismatches", sequences, total, refused)
		})
	}
}

// TestPeersSentinelWindowCases replays sentinel-golang's sliding-window and
// reject-rule cases in sluice's terms: core/stat/base/leap_array_test.go
// and sliding_window_metric_test.go (on a window.LeapArray of 20 buckets of
// 500 ms, Sentinel's default shape there) and core/flow/slot_test.go (on a
// flow rule). Sentinel's cases that pin the index of a bucket's slot in its
// array have no counterpart: sluice's ring is a power of two (32 slots for
// 20 buckets), so only which bucket holds a time, and which buckets count,
// are compared.
func TestPeersSentinelWindowCases(t *testing.T) {
	const ms = int64(time.Millisecond)
	type metric uint8
	newArray := func() *window.LeapArray[metric] {
		return window.MustLeapArray[metric](10*time.Second, 20, []window.Kind{window.Sum}, nil)
	}
	t.Run("Test_calculateStartTime_normal", func(t *testing.T) {
		a := newArray()
		require.Equal(t, 1576296044500*ms, a.Epoch(1576296044907*ms)*a.BucketWidth())
	})
	t.Run("Test_leapArray_BucketStartCheck_normal", func(t *testing.T) {
		a := newArray()
		now := 1596199310000 * ms
		require.Equal(t, now+500*ms, a.Epoch(now+801*ms)*a.BucketWidth())
	})
	t.Run("Test_leapArray_isBucketDeprecated_normal", func(t *testing.T) {
		// A bucket that started 40 s before, in a 10 s window, counts
		// for nothing.
		a := newArray()
		a.Add(1576296004907*ms, 0, 7)
		require.Zero(t, a.Sum(1576296044907*ms, 0))
	})
	t.Run("TestSlidingWindowMetric_GetIntervalSumWithTime", func(t *testing.T) {
		// 2000 passes now and 500 spread over 1.0 to 1.5 s later: a
		// 2 s sub-window (4 buckets) read now sums the 2000 only.
		a := newArray()
		now := 1576296044000 * ms
		for i := int64(0); i < 500; i++ {
			a.Add(now+(1000+i)*ms, 0, 1)
		}
		a.Add(now, 0, 2000)
		require.Equal(t, uint64(2000), a.SumEpoch(a.Epoch(now), 0, 4))
	})
	t.Run("Test_FlowSlot_StandaloneStat", func(t *testing.T) {
		// 100 per 20 s: 50 entries pass and are counted; sluice goes on
		// to the limit.
		c, err := NewController(rules.Flow{Resource: "abc", Threshold: 100, StatInterval: 20 * time.Second}, nodes(nil))
		require.NoError(t, err)
		now := int64(time.Hour)
		for i := 0; i < 50; i++ {
			require.Nil(t, c.Check(context.Background(), newEntry(now, 1), nil))
		}
		require.Equal(t, uint64(50), c.c.(*reject).win.Sum(now/c.c.(*reject).width))
		for i := 0; i < 50; i++ {
			require.Nil(t, c.Check(context.Background(), newEntry(now, 1), nil))
		}
		be := c.Check(context.Background(), newEntry(now, 1), nil)
		require.NotNil(t, be)
		require.Equal(t, 100.0, be.Observed)
		require.Equal(t, 20*time.Second, be.RetryAfter, "all 100 sit in one bucket, which leaves the window 20 s later")
	})
}

// TestConformanceAssociatedAgainstModel drives QPS rules on an associated
// resource (RefResource) with seeded random timelines of the other
// resource's passes: the rule refuses while the other resource's passes in
// its one-second window (ten buckets of 100 ms) exceed Threshold, with
// Observed that count and RetryAfter the time until enough of its oldest
// buckets have slid out for it to be within Threshold, if nothing else
// passed there (README "Flow rules", Associated). The rule's own entries
// count for nothing. Arrivals land on bucket boundaries and 1 ns either
// side, after zero gaps and long idles; reloads change the threshold.
func TestConformanceAssociatedAgainstModel(t *testing.T) {
	const sequences = 40
	const width = int64(100 * time.Millisecond)
	steps := conformance.Steps(1000)
	total, refused := 0, 0
	for seq := 0; seq < sequences; seq++ {
		seed := int64(seq)*3571 + 2
		rng := rand.New(rand.NewSource(seed))
		r := rules.Flow{Resource: "r", RefResource: "ref", Threshold: float64(1 + rng.Intn(20))}
		if rng.Intn(3) == 0 {
			r.Threshold += 0.5
		}
		nf := nodes(nil)
		cs, err := Build([]rules.Flow{r}, nil, nf, nil)
		require.NoError(t, err)
		ref := nf("ref")
		passes := map[int64]int64{} // ref's passes by 100 ms bucket
		sum := func(from, to int64) (s int64) {
			for b := from; b <= to; b++ {
				s += passes[b]
			}
			return s
		}
		now := int64(time.Hour) + rng.Int63n(int64(time.Hour))
		if seq%3 == 0 {
			now = rng.Int63n(1 << 55)
		}
		for step := 0; step < steps; step++ {
			next := (now/width + 1) * width
			switch g := rng.Intn(10); {
			case g < 3:
			case g < 5:
				now = next - 1 + int64(rng.Intn(3))
			case g < 9:
				now += rng.Int63n(width) + 1
			default:
				now += rng.Int63n(50 * width)
			}
			switch k := rng.Intn(100); {
			case k < 2:
				r.Threshold = float64(1 + rng.Intn(20))
				cs, err = Build([]rules.Flow{r}, cs, nf, nil)
				require.NoError(t, err)
			case k < 55: // the other resource passes
				n := 1 + rng.Int63n(4)
				ref.AddPass(now, n)
				passes[now/width] += n
			default:
				ec := &entry.Context{Resource: "r", Batch: 1 + rng.Int63n(3), Start: now}
				got := decisionOf(cs["r"][0].Check(context.Background(), ec, nil))
				b := now / width
				want := windowDecision{pass: true}
				if v := sum(b-9, b); float64(v) > r.Threshold {
					f := b + 1
					for float64(sum(f-9, b)) > r.Threshold {
						f++
					}
					want = windowDecision{observed: float64(v), threshold: r.Threshold, retryAfter: entry.RetryMs(time.Duration(f*width - now)),
						reason: "associated resource ref over threshold"}
					refused++
				}
				total++
				if got != want {
					t.Fatalf("seed %d step %d: threshold %v at %d (bucket %d): engine %v, model %v", seed, step, r.Threshold, now, b, got, want)
				}
			}
		}
	}
	t.Logf("%d sequences, %d decisions (%d refusals), 0 mismatches", sequences, total, refused)
}

// TestPeersSentinelReloadReusesWindows replays sentinel-golang's
// core/flow/rule_manager_test.go
// Test_buildResourceTrafficShapingController_reuse_stat: on a reload, a
// reject rule with the same resource and StatInterval as one in force
// keeps its counts whatever its new threshold (r12 after r1, r42 after
// r4), an identical rule keeps them (r32 after r3), and a rule whose
// interval no rule in force has starts empty (r22). Sentinel reuses the
// statistic; sluice hands the rule's window over (Build).
func TestPeersSentinelReloadReusesWindows(t *testing.T) {
	rule := func(threshold float64, interval time.Duration) rules.Flow {
		return rules.Flow{Resource: "abc1", Threshold: threshold, StatInterval: interval}
	}
	nf := nodes(nil)
	old, err := Build([]rules.Flow{rule(100, time.Second), rule(200, 2*time.Second), rule(300, 5*time.Second), rule(400, 50*time.Second)}, nil, nf, nil)
	require.NoError(t, err)
	now := int64(time.Hour)
	for i, c := range old["abc1"] {
		for k := 0; k <= i; k++ { // 1, 2, 3 and 4 admissions
			require.Nil(t, c.Check(context.Background(), newEntry(now, 1), nil))
		}
	}
	got, err := Build([]rules.Flow{rule(300, time.Second), rule(400, 10*time.Second), rule(300, 5*time.Second), rule(4000, 50*time.Second)}, old, nf, nil)
	require.NoError(t, err)
	for i, want := range []uint64{1, 0, 3, 4} {
		k := got["abc1"][i].c.(*reject)
		require.Equal(t, want, k.win.Sum(now/k.width), "rule %d", i)
	}
}
