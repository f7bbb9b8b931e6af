package flow

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/conformance"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/ruledef"
	"github.com/sluice-go/sluice/rules"
)

// The reference model of the documented warm-up and pacing semantics
// (README "Warm-up" and "Throttle"; docs/design/architecture.md "Warm-up consumes
// tokens at admission"), written for reading rather than speed: it keeps
// every admission in a list and derives its counts from it.
//
//   - Tokens: a cold resource stores maxToken = warningToken +
//     2·P·T/(1+cf), warningToken = P·T/(cf-1), P the warm-up period in
//     intervals. An admission of n takes n (not below 0). On the first
//     request of each interval after the first, the resource refills T per
//     elapsed interval up to maxToken when it was used below its cold rate
//     (fewer than floor(T/cf) admissions in the previous interval; or, when
//     T/cf < 1, none in the ceil(cf/T) intervals before), and otherwise up
//     to the warning level only.
//   - Allowance per interval: T at or below the warning level; above it
//     T/(1 + (cf-1)·f), f the fraction of the way from warningToken to
//     maxToken (Guava's linear slot length, from 1/T to cf/T).
//   - Reject: a batch of n above the allowance (a lone request when the
//     allowance is below one) passes when the window holds none and the
//     previous such admission, of m, is m·interval/allowance ago (its
//     allowance then). Otherwise the batch passes when the admissions in
//     the ten buckets up to now's, plus the batch, are within the
//     allowance.
//   - Throttle (GCRA): a batch of n, above the allowance or not, starts at
//     max(free, now), rounded to the nanosecond, passes when that is within
//     MaxQueueing, and moves free to its start plus n slots of
//     interval/allowance.
//   - A reload of the same curve keeps everything; of another curve, fresh
//     tokens (and lone pacing), the same window and the same queue.
//   - An admission given back (a later check refused it) no longer counts
//     anywhere; its tokens come back (at most maxToken), then its slots at
//     the allowance it finds.
type model struct {
	rule           rules.Flow
	iv, width      int64
	T, cf          float64
	warn, max      float64
	pacing, warm   bool
	stored         float64
	primed         bool
	lastFilled     int64
	adm            []admission // every admission, in order
	epoch          int         // adm[epoch:] were admitted under the current tokens
	free           float64
	next, prevNext float64
	nextAt         int64
	lastWasOne     bool
}

type admission struct{ at, n int64 }

func newModel(r rules.Flow) *model {
	m := &model{free: math.Inf(-1)}
	m.reload(r)
	return m
}

func (m *model) reload(r rules.Flow) {
	old := m.rule
	m.rule = r
	m.iv = int64(cmp.Or(r.StatInterval, ruledef.StatInterval))
	m.width = m.iv / 10
	m.pacing = r.Throttle != nil
	m.warm = r.WarmUp != nil
	if m.warm && old.Resource != "" && old.Threshold == r.Threshold && warmUpOf(&old) == warmUpOf(&r) &&
		cmp.Or(old.StatInterval, ruledef.StatInterval) == cmp.Or(r.StatInterval, ruledef.StatInterval) {
		return // the same curve: the tokens stay
	}
	m.T, m.cf = r.Threshold, warmUpOf(&r).ColdFactor
	p := float64(warmUpOf(&r).Period) / float64(m.iv)
	m.warn = p * m.T / (m.cf - 1)
	m.max = m.warn + 2*p*m.T/(1+m.cf)
	m.primed = false
	m.epoch = len(m.adm)
	m.next = math.Inf(-1)
}

// used returns the requests admitted under the current tokens in interval k.
func (m *model) used(k int64) float64 {
	var n int64
	for i := len(m.adm) - 1; i >= m.epoch && m.adm[i].at/m.iv >= k; i-- {
		if m.adm[i].at/m.iv == k {
			n += m.adm[i].n
		}
	}
	return float64(n)
}

func (m *model) light(k int64) bool {
	if cold := m.T / m.cf; cold >= 1 {
		return m.used(k-1) < math.Floor(cold)
	}
	span := int64(math.Min(math.Ceil(m.cf/m.T), 1<<40))
	for j := k - span; j < k; j++ {
		if m.used(j) > 0 {
			return false
		}
	}
	return true
}

func (m *model) sync(now int64) {
	k := now / m.iv
	if !m.primed {
		m.primed, m.stored, m.lastFilled = true, m.max, k
		return
	}
	if k <= m.lastFilled {
		return
	}
	refill := float64(k-m.lastFilled) * m.T
	switch {
	case m.light(k):
		m.stored = math.Min(m.stored+refill, m.max)
	case m.stored < m.warn:
		m.stored = math.Min(m.stored+refill, m.warn)
	}
	m.lastFilled = k
}

func (m *model) allowance() float64 {
	if !m.warm || m.stored <= m.warn {
		return m.T
	}
	f := math.Min((m.stored-m.warn)/(m.max-m.warn), 1)
	return m.T / (1 + (m.cf-1)*f)
}

func (m *model) inWindow(now int64) float64 {
	var n int64
	b := now / m.width
	for i := len(m.adm) - 1; i >= 0 && m.adm[i].at/m.width > b-10; i-- {
		n += m.adm[i].n
	}
	return float64(n)
}

// decide returns whether a batch of n at now passes and how long it waits.
func (m *model) decide(now, n int64) (bool, int64) {
	f := float64(n)
	if n > 1 && f > m.T {
		return false, 0
	}
	if m.warm {
		m.sync(now)
	}
	lim := m.allowance()
	if m.pacing {
		start := math.Max(m.free, float64(now))
		wait := math.Round(start) - float64(now)
		if wait > float64(maxQueueing(&m.rule)) {
			return false, 0
		}
		m.free = start + float64(m.iv)/lim*f
		m.take(now, n)
		return true, int64(wait)
	}
	m.lastWasOne = false
	if f > lim {
		if float64(now) < m.next || m.inWindow(now) > 0 {
			return false, 0
		}
		m.prevNext, m.nextAt, m.lastWasOne = m.next, now, true
		m.next = float64(now) + float64(m.iv)/lim*f
		m.take(now, n)
		return true, 0
	}
	if m.inWindow(now)+f > lim {
		return false, 0
	}
	m.take(now, n)
	return true, 0
}

func (m *model) take(now, n int64) {
	m.adm = append(m.adm, admission{now, n})
	m.stored = math.Max(m.stored-float64(n), 0)
}

// undo gives back the latest admission, of n at now.
func (m *model) undo(now, n int64) {
	m.adm = m.adm[:len(m.adm)-1]
	if m.epoch > len(m.adm) {
		m.epoch = len(m.adm)
	}
	if m.warm {
		m.stored = math.Min(m.stored+float64(n), m.max)
	}
	if m.pacing {
		m.free -= float64(m.iv) / m.allowance() * float64(n)
	}
	if m.lastWasOne && m.nextAt == now && m.next > float64(now) {
		m.next = m.prevNext
	}
}

// wuClock is a core.Clock for checks that wait: every timer has
// fired already, and the clock remembers the last wait asked for.
type wuClock struct{ waited atomic.Int64 }

type wuTimer struct{ c chan time.Time }

func (t wuTimer) C() <-chan time.Time { return t.c }
func (wuTimer) Stop() bool            { return false }

func (c *wuClock) Nanotime() int64 { return 0 }
func (c *wuClock) NewTimer(d time.Duration) core.Timer {
	c.waited.Store(int64(d))
	ch := make(chan time.Time, 1)
	ch <- time.Time{}
	return wuTimer{ch}
}

// TestConformanceWarmUpAndPacingAgainstTheModel drives warm-up and pacing
// rules and the model with the same seeded random timelines (zero gaps,
// fractions of a slot, interval boundaries ±1 ns, idles of several warm-up
// periods, batches, admissions a later check gives back, reloads of
// MaxQueueing and of the threshold) and compares every decision and every
// wait.
func TestConformanceWarmUpAndPacingAgainstTheModel(t *testing.T) {
	s := time.Second
	configs := []rules.Flow{
		{Threshold: 20, WarmUp: &rules.WarmUp{Period: 4 * s}},
		{Threshold: 300, WarmUp: &rules.WarmUp{Period: 10 * s}},
		{Threshold: 2, WarmUp: &rules.WarmUp{Period: 4 * s}},
		{Threshold: 0.5, WarmUp: &rules.WarmUp{Period: 8 * s}},
		{Threshold: 4, WarmUp: &rules.WarmUp{Period: 5 * s, ColdFactor: 10}},
		{Threshold: 7, WarmUp: &rules.WarmUp{Period: 300 * time.Millisecond, ColdFactor: 1.5}, StatInterval: 100 * time.Millisecond},
		{Threshold: 20, WarmUp: &rules.WarmUp{Period: 4 * s}, Throttle: &rules.Throttle{}},
		{Threshold: 2, WarmUp: &rules.WarmUp{Period: 4 * s}, Throttle: &rules.Throttle{MaxQueueing: 2 * s}},
		{Threshold: 0.5, WarmUp: &rules.WarmUp{Period: 8 * s}, Throttle: &rules.Throttle{}},
		{Threshold: 30, WarmUp: &rules.WarmUp{Period: 2 * s, ColdFactor: 4}, Throttle: &rules.Throttle{MaxQueueing: 300 * time.Millisecond}, StatInterval: 2 * s},
		{Threshold: 10, Throttle: &rules.Throttle{}},
		{Threshold: 1500, Throttle: &rules.Throttle{MaxQueueing: 10 * time.Millisecond}},
		{Threshold: 0.3, Throttle: &rules.Throttle{MaxQueueing: 5 * s}, StatInterval: 100 * time.Millisecond},
	}
	steps := conformance.Steps(3000)
	for ci, base := range configs {
		base.Resource = "r"
		t.Run(fmt.Sprintf("%v/%v/%v-per-%v/cf%v", strategyOf(&base), behaviorOf(&base), base.Threshold, cmp.Or(base.StatInterval, ruledef.StatInterval), warmUpOf(&base).ColdFactor), func(t *testing.T) {
			rng := rand.New(rand.NewSource(int64(ci) + 1))
			nf := nodes(nil)
			rule := base
			built, err := Build([]rules.Flow{rule}, nil, nf, nil)
			if err != nil {
				t.Fatal(err)
			}
			c := built["r"][0]
			m := newModel(rule)
			iv := int64(cmp.Or(rule.StatInterval, ruledef.StatInterval))
			slot := float64(iv) / rule.Threshold
			period := int64(warmUpOf(&rule).Period)
			if period == 0 {
				period = iv
			}
			clk := &wuClock{}
			now := int64(rng.Intn(int(iv)))
			admitted := 0
			for i := 0; i < steps; i++ {
				switch r := rng.Float64(); {
				case r < 0.4: // at once
				case r < 0.75:
					now += int64(rng.Float64() * slot * 1.5)
				case r < 0.85:
					now += int64(slot)
				case r < 0.86: // to an interval boundary, ±1 ns
					now += iv - now%iv + int64(rng.Intn(3)) - 1
				case r < 0.88: // to a bucket boundary, ±1 ns
					now += iv/10 - now%(iv/10) + int64(rng.Intn(3)) - 1
				case r < 0.885:
					now += int64(1+rng.Intn(3)) * period
				default:
					now += int64(rng.Intn(1000)) * int64(time.Microsecond)
				}
				if rng.Float64() < 0.01 { // reload
					rule = base
					switch rng.Intn(3) {
					case 0:
						rule.ID = "reloaded"
					case 1:
						if rule.Throttle != nil {
							rule.Throttle = &rules.Throttle{MaxQueueing: time.Duration(rng.Intn(int(2 * s)))}
						}
					case 2:
						rule.Threshold = base.Threshold * (1 + float64(rng.Intn(2)))
					}
					if built, err = Build([]rules.Flow{rule}, built, nf, nil); err != nil {
						t.Fatal(err)
					}
					c = built["r"][0]
					m.reload(rule)
				}
				n := int64(1)
				if rng.Float64() < 0.15 {
					n = int64(2 + rng.Intn(3))
				}
				clk.waited.Store(0)
				ec := &entry.Context{Resource: "r", Batch: n, Start: now}
				be := c.Check(context.Background(), ec, clk)
				want, wantWait := m.decide(now, n)
				if (be == nil) != want || (be == nil && clk.waited.Load() != wantWait) {
					t.Fatalf("step %d at %v, batch %d (rule %+v): engine admitted=%v waited %v (%v), model admitted=%v waits %v",
						i, time.Duration(now), n, rule, be == nil, time.Duration(clk.waited.Load()), be, want, time.Duration(wantWait))
				}
				if be == nil {
					admitted++
					if rng.Float64() < 0.05 { // a later check refuses it
						ec.ReleaseTickets(entry.ExitInfo{Start: now, End: now, Batch: n, Blocked: true})
						m.undo(now, n)
					}
				}
			}
			t.Logf("%d steps over %v, %d admitted", steps, time.Duration(now), admitted)
		})
	}
}
