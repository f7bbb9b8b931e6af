package degrade

import (
	"cmp"
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/conformance"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/ruledef"
	"github.com/sluice-go/sluice/rules"
)

// breakerModel is the state machine of docs/design/circuit-breaker.md ("Semantics,
// exactly") written as plainly as possible: every exit kept in a map of
// buckets, every figure recomputed from scratch, one round number per
// half-open round instead of a probe word.
type breakerModel struct {
	rule rules.CircuitBreaker // in force

	state    State
	snapshot float64 // the value that last opened the breaker
	until    int64   // Open: when probing may start

	// Closed: which closed phase this is, and its calls and bad calls by
	// bucket of StatInterval/10.
	phase      int
	total, bad map[int64]int64

	// HalfOpen: the round, its start, its N, its probes admitted (and not
	// given back), succeeded, and the latest admission in whole
	// milliseconds after the start, rounded up.
	round                         int
	since                         int64
	n, admitted, succeeded, lastM int64

	transitions []Transition
}

func newBreakerModel(r rules.CircuitBreaker) *breakerModel {
	m := &breakerModel{rule: r}
	m.toClosed()
	m.transitions = nil
	return m
}

func (m *breakerModel) width() int64 {
	return int64(cmp.Or(m.rule.StatInterval, ruledef.StatInterval)) / 10
}

func (m *breakerModel) move(to State, snapshot float64, at int64) {
	m.transitions = append(m.transitions, Transition{Resource: m.rule.Resource, Rule: m.rule, From: m.state, To: to, Snapshot: snapshot, At: at})
	m.state = to
}

func (m *breakerModel) toClosed() {
	m.state = Closed
	m.phase++
	m.total, m.bad = map[int64]int64{}, map[int64]int64{}
}

func (m *breakerModel) open(at int64) {
	m.until = at + int64(m.rule.RetryTimeout)
	m.state = Open
	m.round++ // ends any half-open round
}

// modelTicket is what an admitted call holds: the round it is a probe of,
// or 0 for a call admitted while Closed, and then the closed phase it was
// admitted in: it counts in that phase's window only.
type modelTicket struct {
	round, phase int
}

// check decides a call at now: its ticket, or the refusal.
func (m *breakerModel) check(now int64) (*modelTicket, windowDecision) {
	switch m.state {
	case Closed:
		return &modelTicket{phase: m.phase}, windowDecision{pass: true}
	case Open:
		if now < m.until {
			return nil, windowDecision{observed: m.snapshot, threshold: m.rule.Threshold, retryAfter: entry.RetryMs(time.Duration(m.until - now)), reason: reasonOpen}
		}
		m.move(HalfOpen, 0, now)
		m.round++
		m.since, m.n, m.admitted, m.succeeded, m.lastM = now, int64(cmp.Or(m.rule.Probes, ruledef.Probes)), 1, 0, 0
		return &modelTicket{round: m.round}, windowDecision{pass: true}
	}
	// HalfOpen.
	if m.admitted < m.n {
		m.admitted++
		ms := (now - m.since + int64(time.Millisecond) - 1) / int64(time.Millisecond)
		m.lastM = max(m.lastM, ms)
		return &modelTicket{round: m.round}, windowDecision{pass: true}
	}
	if last := m.since + m.lastM*int64(time.Millisecond); now >= last+int64(cmp.Or(m.rule.StatInterval, ruledef.StatInterval)) {
		// Every slot taken, the latest probe out for a whole interval:
		// the round is given up, and the call meets an Open breaker.
		m.move(Open, float64(now-last)/1e6, now)
		m.open(now)
		return m.check(now)
	}
	return nil, windowDecision{observed: float64(m.admitted - m.succeeded), threshold: float64(m.n), reason: reasonHalfOpen}
}

// isBad reports whether a call of rt ending with failed counts against the
// threshold while Closed.
func (m *breakerModel) isBad(rt int64, failed bool) bool {
	if m.rule.Strategy == rules.SlowRequestRatio {
		return rt > int64(m.rule.MaxAllowedRT)
	}
	return failed
}

// exit ends a call of batch n admitted with tk that started at start, at
// end. A batch counts as n calls while Closed, as one probe while HalfOpen.
func (m *breakerModel) exit(tk *modelTicket, start, end, n int64, failed, blocked bool) {
	rt := end - start
	if tk.round != 0 {
		if tk.round != m.round || m.state != HalfOpen {
			return // a round that has ended
		}
		switch {
		case blocked:
			if m.admitted > 0 {
				m.admitted--
			}
		case failed || rt >= int64(cmp.Or(m.rule.StatInterval, ruledef.StatInterval)) || (m.rule.Strategy == rules.SlowRequestRatio && rt > int64(m.rule.MaxAllowedRT)):
			m.move(Open, float64(rt)/1e6, end)
			m.open(end)
		default:
			m.succeeded++
			if m.succeeded >= m.n {
				m.move(Closed, float64(m.succeeded), end)
				m.toClosed()
			}
		}
		return
	}
	if blocked || m.state != Closed || tk.phase != m.phase {
		return
	}
	b := end / m.width()
	m.total[b] += n
	if m.isBad(rt, failed) {
		m.bad[b] += n
	}
	var total, bad int64
	for k := b - 9; k <= b; k++ {
		total, bad = total+m.total[k], bad+m.bad[k]
	}
	if total < cmp.Or(m.rule.MinRequestAmount, ruledef.MinRequestAmount) {
		return
	}
	var v float64
	var trip bool
	if m.rule.Strategy == rules.ErrorCount {
		v = float64(bad)
		trip = v >= m.rule.Threshold
	} else {
		v = float64(bad) / float64(total)
		trip = v > m.rule.Threshold || (m.rule.Threshold == 1 && bad == total)
	}
	if trip {
		m.snapshot = v
		m.move(Open, v, end)
		m.open(end)
	}
}

// windowDecision is a check's outcome: passed, or refused with these
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

// randomBreakerRule returns a rule of strategy s with random numbers;
// keyed keeps the fields that identify its state (s, interval, max RT).
func randomBreakerRule(rng *rand.Rand, s rules.BreakerStrategy, interval, maxRT time.Duration) rules.CircuitBreaker {
	r := rules.CircuitBreaker{
		Resource:         "r",
		Strategy:         s,
		StatInterval:     interval,
		MinRequestAmount: 1 + rng.Int63n(6),
		RetryTimeout:     time.Duration(1+rng.Intn(30)) * interval / 10,
		Probes:           rng.Intn(4), // 0: one
		MaxAllowedRT:     maxRT,
	}
	switch s {
	case rules.ErrorCount:
		r.Threshold = float64(1 + rng.Intn(5))
	default:
		r.Threshold = []float64{0, 0.2, 0.5, 0.6, 1}[rng.Intn(5)]
	}
	return r
}

var breakerIntervals = []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second, 1370 * time.Millisecond}

// call is a call in flight in the conformance timeline.
type call struct {
	ec    *entry.Context
	tk    *modelTicket
	start int64
}

// TestConformanceBreakerAgainstModel drives breakers of the three
// strategies with seeded random timelines on the manual clock: calls that
// overlap and exit in any order, with errors and response times on either
// side of MaxAllowedRT and StatInterval, arrivals at bucket boundaries, on
// the retry deadline and one nanosecond before it, on the instant an
// unanswered probe round expires, long idles, probes refused by a later
// check, and reloads (new numbers keep the state; a new interval starts
// afresh). Every decision (and a refusal's Observed, Threshold, RetryAfter
// and Reason), every transition (from, to, snapshot, instant) and the state
// after each step must equal breakerModel's.
func TestConformanceBreakerAgainstModel(t *testing.T) {
	for si, s := range []rules.BreakerStrategy{rules.SlowRequestRatio, rules.ErrorRatio, rules.ErrorCount} {
		t.Run(string(s), func(t *testing.T) {
			const sequences = 40
			steps := conformance.Steps(1500)
			checks, refused, transitions := 0, 0, 0
			for seq := 0; seq < sequences; seq++ {
				seed := int64(seq)*104729 + int64(si)*7 + 3
				rng := rand.New(rand.NewSource(seed))
				interval := breakerIntervals[rng.Intn(len(breakerIntervals))]
				var maxRT time.Duration
				if s == rules.SlowRequestRatio {
					maxRT = time.Duration(1+rng.Intn(9)) * interval / 20
				}
				r := randomBreakerRule(rng, s, interval, maxRT)
				hub := NewHub(nil)
				rec := &recorder{}
				hub.AddListener(rec.listen)
				bs := Build([]rules.CircuitBreaker{r}, nil, hub)
				Use(bs)
				m := newBreakerModel(r)
				now := int64(time.Hour) + rng.Int63n(int64(time.Hour))
				if seq%4 == 0 {
					now = rng.Int63n(1 << 55) // up to a year of uptime
				}
				var inflight []call
				compared := 0 // transitions already compared
				fail := func(format string, args ...any) {
					t.Helper()
					t.Fatalf("seed %d: %s\nrule %+v\nengine transitions %v\nmodel transitions  %v",
						seed, fmt.Sprintf(format, args...), r, rec.ts, m.transitions)
				}
				for step := 0; step < steps; step++ {
					width := int64(cmp.Or(r.StatInterval, ruledef.StatInterval)) / 10
					k := rng.Intn(100)
					if len(inflight) > 64 && k >= 30 {
						k = 99 // keep the calls in flight bounded: one exits
					}
					switch {
					case k < 2: // reload, same state key
						r = randomBreakerRule(rng, s, r.StatInterval, r.MaxAllowedRT)
						bs = Build([]rules.CircuitBreaker{r}, bs, hub)
						Use(bs)
						m.rule = r
					case k < 3: // reload, new interval: a fresh breaker
						iv := breakerIntervals[rng.Intn(len(breakerIntervals))]
						if iv == cmp.Or(r.StatInterval, ruledef.StatInterval) {
							iv += time.Millisecond
						}
						if s == rules.SlowRequestRatio {
							maxRT = time.Duration(1+rng.Intn(9)) * iv / 20
						}
						r = randomBreakerRule(rng, s, iv, maxRT)
						bs = Build([]rules.CircuitBreaker{r}, bs, hub)
						Use(bs)
						m = newBreakerModel(r)
						transitions += len(rec.ts) // both start a new list
						rec.ts, compared = nil, 0
						inflight = nil // their exits go to the old state
					case k < 30: // time passes
						switch g := rng.Intn(10); {
						case g < 3:
							now += (now/width+1)*width - now // next bucket boundary
						case g < 5 && m.state == Open:
							now = max(now, m.until-int64(rng.Intn(2)))
						case g < 6 && m.state == HalfOpen:
							now = max(now, m.since+m.lastM*int64(time.Millisecond)+int64(cmp.Or(r.StatInterval, ruledef.StatInterval))-int64(rng.Intn(2)))
						case g < 9:
							now += rng.Int63n(width) + 1
						default:
							now += rng.Int63n(100 * int64(cmp.Or(r.StatInterval, ruledef.StatInterval)))
						}
					case k < 65: // a call arrives
						n := int64(1)
						if rng.Intn(5) == 0 {
							n += rng.Int63n(3)
						}
						ec := &entry.Context{Resource: "r", Batch: n, Start: now}
						got := decisionOf(bs["r"][0].Check(ec))
						tk, want := m.check(now)
						checks++
						if !want.pass {
							refused++
						}
						if got != want {
							fail("step %d at %d: engine %v, model %v", step, now, got, want)
						}
						if got.pass {
							if rng.Intn(10) == 0 { // refused by a later check
								ec.ReleaseRefused()
								m.exit(tk, now, now, n, false, true)
							} else {
								inflight = append(inflight, call{ec: ec, tk: tk, start: now})
							}
						}
					default: // a call exits
						if len(inflight) == 0 {
							continue
						}
						i := rng.Intn(len(inflight))
						c := inflight[i]
						inflight = append(inflight[:i], inflight[i+1:]...)
						failed := rng.Intn(3) == 0
						var err error
						if failed {
							err = errBoom
						}
						c.ec.ReleaseTickets(entry.ExitInfo{Start: c.start, End: now, Batch: c.ec.Batch, Err: err})
						m.exit(c.tk, c.start, now, c.ec.Batch, failed, false)
					}
					if got := bs["r"][0].State(); got != m.state {
						fail("step %d at %d: engine state %v, model %v", step, now, got, m.state)
					}
					if len(rec.ts) != len(m.transitions) {
						fail("step %d at %d: %d transitions, model %d", step, now, len(rec.ts), len(m.transitions))
					}
					for i := compared; i < len(rec.ts); i++ {
						g, w := rec.ts[i], m.transitions[i]
						if g.From != w.From || g.To != w.To || g.At != w.At || math.Abs(g.Snapshot-w.Snapshot) > 1e-9 {
							fail("step %d: transition %d: engine %+v, model %+v", step, i, g, w)
						}
					}
					compared = len(rec.ts)
				}
				transitions += len(rec.ts)
			}
			t.Logf("%d sequences, %d checks (%d refusals), %d transitions, 0 mismatches", sequences, checks, refused, transitions)
		})
	}
}
