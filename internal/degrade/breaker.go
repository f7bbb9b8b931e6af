package degrade

import (
	"cmp"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/ruledef"
	"github.com/sluice-go/sluice/internal/window"
	"github.com/sluice-go/sluice/rules"
)

// Breaker enforces one circuit-breaker rule. It is safe for concurrent use.
type Breaker struct {
	rule rules.CircuitBreaker
	cfg  *params
	st   *state
	// closedClock is what the calls admitted while Closed need of their
	// exit's clock: the RT for the slow-request-ratio strategy; for the
	// error strategies, the closed ticket decides (closedTicket.ExitNeedsClock).
	closedClock entry.ExitClock
	// refusals shares the breaker's equal refusals (see blocked).
	refusals *entry.Refusals
}

var (
	_ entry.ClockGate = (*closedTicket)(nil)
	_ entry.Ticket    = (*probeTicket)(nil)
)

// metric is what a breaker's window counts.
type metric uint8

const (
	mTotal metric = iota // calls that exited
	mBad                 // of which slow (slow-request-ratio) or failed
)

// windowBuckets is the number of buckets of a breaker's window.
const windowBuckets = 10

var windowKinds = []window.Kind{window.Sum, window.Sum}

// params are the numbers a breaker decides with, derived from its rule once.
type params struct {
	rule      rules.CircuitBreaker
	threshold float64
	minReq    uint64
	maxRT     int64 // ns; slow-request-ratio only
	retry     int64 // ns
	interval  int64 // ns
	probes    uint64
	isFailure func(error) bool
	slow      bool // the slow-request-ratio strategy
}

func newParams(r rules.CircuitBreaker, isFailure func(error) bool) *params {
	return &params{
		rule:      r,
		threshold: r.Threshold,
		minReq:    uint64(cmp.Or(r.MinRequestAmount, ruledef.MinRequestAmount)),
		maxRT:     int64(r.MaxAllowedRT),
		retry:     int64(r.RetryTimeout),
		interval:  int64(cmp.Or(r.StatInterval, ruledef.StatInterval)),
		probes:    uint64(cmp.Or(r.Probes, ruledef.Probes)),
		isFailure: isFailure,
		slow:      cmp.Or(r.Strategy, rules.SlowRequestRatio) == rules.SlowRequestRatio,
	}
}

// failed reports whether err counts as a failure.
func (c *params) failed(err error) bool {
	return err != nil && (c.isFailure == nil || c.isFailure(err))
}

// bad reports whether a closed-state call counts against the threshold.
func (c *params) bad(x *entry.ExitInfo) bool {
	if c.slow {
		return x.End-x.Start > c.maxRT
	}
	return c.failed(x.Err)
}

// probeFailed reports whether a probe failed: an error, a slow call for the
// slow-request-ratio strategy, or a call of StatInterval or longer.
func (c *params) probeFailed(x *entry.ExitInfo) bool {
	rt := x.End - x.Start
	return c.failed(x.Err) || rt >= c.interval ||
		(c.slow && rt > c.maxRT)
}

// trips returns the observed value of a window holding bad of total calls
// and whether it crosses the threshold. total is at least 1.
func (c *params) trips(bad, total uint64) (float64, bool) {
	if c.rule.Strategy == rules.ErrorCount {
		v := float64(bad)
		return v, v >= c.threshold
	}
	r := float64(bad) / float64(total)
	return r, r > c.threshold || (c.threshold == 1 && bad == total)
}

// state is the part of a breaker that survives an equivalent reload.
type state struct {
	hub *Hub
	cur atomic.Pointer[phase]
	cfg atomic.Pointer[params] // the rule in force (the newest breaker's)
	// moves counts transitions by the state they led to, written under
	// the hub's mutex at the transition (never on a decision that keeps
	// the state) and read without it.
	moves [States]atomic.Uint64
}

// States is the number of breaker states: Closed, Open and HalfOpen index
// arrays of this length.
const States = 3

// phase is one stretch of a breaker's life in one state. Only word (and the
// window's counters) change after it is published.
type phase struct {
	state    State
	since    int64   // ns
	until    int64   // Open: when probing may start, ns
	snapshot float64 // Open, HalfOpen: the value that opened the breaker

	// Closed: the window, the newest bucket that counted a bad call, and
	// the ticket of the calls admitted in this phase.
	win     *window.LeapArray[metric]
	lastBad atomic.Int64
	closed  closedTicket

	// HalfOpen.
	n        uint64        // probes admitted at once
	interval int64         // ns a probe may take
	word     atomic.Uint64 // see the probe word layout
	probe    probeTicket
}

// Probe word layout: probes admitted (and not given back), probes that
// succeeded, the time of the last admission in whole milliseconds after the
// round began (rounded up), and a sealed bit set when the round ends, after
// which nothing changes.
const (
	fieldMask   = 1<<16 - 1
	succShift   = 16
	succOne     = 1 << succShift
	admitShift  = 32
	admitMask   = 1<<31 - 1
	sealed      = 1 << 63
	admitOffset = int64(time.Millisecond)
)

func admitted(w uint64) uint64  { return w & fieldMask }
func succeeded(w uint64) uint64 { return w >> succShift & fieldMask }
func lastAdmit(w uint64) int64  { return int64(w>>admitShift&admitMask) * admitOffset }

// closedTicket is held by the calls admitted in one closed phase: their
// outcomes count in that phase's window only, so a call admitted before an
// outage that exits after the breaker closed again counts nowhere (as
// gobreaker ignores results of an earlier generation).
type closedTicket struct {
	p  *phase
	st *state
}

// probeTicket is held by the probes of one half-open round.
type probeTicket struct {
	p  *phase
	st *state
}

func newWindow(interval int64) *window.LeapArray[metric] {
	return window.MustLeapArray[metric](time.Duration(interval), windowBuckets, windowKinds, nil)
}

func closedPhase(st *state, at int64, c *params) *phase {
	p := &phase{state: Closed, since: at, win: newWindow(c.interval)}
	p.lastBad.Store(math.MinInt64 / 2)
	p.closed = closedTicket{p: p, st: st}
	return p
}

func openPhase(at int64, c *params, snapshot float64) *phase {
	return &phase{state: Open, since: at, until: at + c.retry, snapshot: snapshot}
}

func halfOpenPhase(st *state, at int64, c *params) *phase {
	p := &phase{state: HalfOpen, since: at, n: c.probes, interval: c.interval}
	p.word.Store(1) // the caller that opened the round is its first probe
	p.probe = probeTicket{p: p, st: st}
	return p
}

// Rule returns the rule the breaker enforces.
func (b *Breaker) Rule() rules.CircuitBreaker { return b.rule }

// State returns the breaker's state as of its last transition. Moving from
// Open to HalfOpen, and giving up probes that never exited, happen at the
// next Check, so an Open breaker whose retry timeout has passed still reads
// Open until a call arrives.
func (b *Breaker) State() State { return b.st.cur.Load().state }

// Transitions returns how many times the breaker changed state since its
// state was made (an equivalent reload keeps it), by the state it changed
// to: Transitions()[Open] is how many times it opened.
func (b *Breaker) Transitions() [States]uint64 {
	var out [States]uint64
	for i := range out {
		out[i] = b.st.moves[i].Load()
	}
	return out
}

const (
	reasonOpen     = "circuit breaker open"
	reasonHalfOpen = "circuit breaker half-open, probes in flight"
)

// Check decides on one entry at ec.Start. When it passes, it records a
// ticket on ec whose Release feeds the outcome back to the breaker: the
// breaker's state while Closed, the round's probe ticket while HalfOpen.
// Refusals are *core.BlockError values of type core.BlockDegrade.
func (b *Breaker) Check(ec *entry.Context) *core.BlockError {
	st := b.st
	now := ec.Start
	for {
		p := st.cur.Load()
		switch p.state {
		case Closed:
			ec.AddTicketClock(&p.closed, b.closedClock)
			return nil
		case Open:
			if now < p.until {
				return b.blocked(ec, p.snapshot, b.cfg.threshold, p.until-now, reasonOpen)
			}
			if np := st.toHalfOpen(p, now); np != nil {
				ec.AddTicket(&np.probe)
				return nil
			}
		case HalfOpen:
			ok, out, again := st.admit(p, now)
			if ok {
				ec.AddTicket(&p.probe)
				return nil
			}
			if !again {
				return b.blocked(ec, float64(out), float64(p.n), 0, reasonHalfOpen)
			}
		}
		// The phase changed under us: decide again on the new one.
	}
}

// blocked is the breaker's refusal of ec. Refusals that agree on every
// field share one error (entry.Refusals): the open phase's snapshot and
// threshold are fixed, and the wait until the retry timeout ends is
// rounded up to the millisecond (entry.RetryMs), so that the refusals of
// one millisecond of an open phase allocate once. A client that waits it
// out finds the timeout over, as with the exact wait.
func (b *Breaker) blocked(ec *entry.Context, observed, threshold float64, retry int64, reason string) *core.BlockError {
	want := core.BlockError{
		Type:       core.BlockDegrade,
		Resource:   ec.Resource,
		Rule:       core.RuleRef{ID: b.rule.ID, Metric: string(cmp.Or(b.rule.Strategy, rules.SlowRequestRatio))},
		Observed:   observed,
		Threshold:  threshold,
		RetryAfter: entry.RetryMs(time.Duration(retry)),
		Reason:     reason,
		Shadow:     b.rule.Shadow,
	}
	return b.refusals.Share(&want)
}

// admit tries to take a probe slot of half-open phase p at now. It reports
// whether it did; when not, how many probes are out and whether p has ended
// (so the caller must look again).
func (st *state) admit(p *phase, now int64) (ok bool, out uint64, again bool) {
	for {
		w := p.word.Load()
		if w&sealed != 0 {
			return false, 0, true
		}
		if a := admitted(w); a >= p.n {
			if succeeded(w) < p.n && now >= p.since+lastAdmit(w)+p.interval {
				// Every slot is taken and the youngest probe has been out
				// for a whole interval: give the round up.
				age := now - p.since - lastAdmit(w)
				st.swap(p, func(c *params) *phase { return openPhase(now, c, 0) }, float64(age)/1e6, now)
				return false, 0, true
			}
			return false, a - succeeded(w), false
		}
		off := uint64(0)
		if d := now - p.since; d > 0 {
			off = uint64((d + admitOffset - 1) / admitOffset)
			if off > admitMask {
				off = admitMask
			}
		}
		nw := w + 1
		if off > w>>admitShift&admitMask {
			nw = nw&^(admitMask<<admitShift) | off<<admitShift
		}
		if p.word.CompareAndSwap(w, nw) {
			return true, 0, false
		}
	}
}

// toHalfOpen moves open phase p to a new half-open round whose first probe
// is the caller, and returns the round; nil when p had already ended.
func (st *state) toHalfOpen(p *phase, now int64) *phase {
	var np *phase
	st.swap(p, func(c *params) *phase { np = halfOpenPhase(st, now, c); return np }, 0, now)
	return np
}

// swap replaces phase from with the one next makes (under the hub's mutex,
// with the rule in force) and queues the transition for the listeners,
// whom it then serves. It does nothing when from is no longer current.
func (st *state) swap(from *phase, next func(*params) *phase, snapshot float64, at int64) {
	if st.cur.Load() != from {
		return
	}
	h := st.hub
	h.mu.Lock()
	if st.cur.Load() != from {
		h.mu.Unlock()
		return
	}
	if from.state == HalfOpen {
		for {
			w := from.word.Load()
			if from.word.CompareAndSwap(w, w|sealed) {
				break
			}
		}
	}
	c := st.cfg.Load()
	to := next(c)
	if from.state != Closed && to.state != Closed {
		// Half-open rounds and reopened breakers report the value that
		// first opened the breaker.
		to.snapshot = from.snapshot
	}
	st.cur.Store(to)
	st.moves[to.state].Add(1)
	h.events.Enqueue(Transition{
		Resource: c.rule.Resource,
		Rule:     c.rule,
		From:     from.state,
		To:       to.state,
		Snapshot: snapshot,
		At:       at,
	})
	h.mu.Unlock()
	h.drain()
}

// ExitNeedsClock tells the engine whether the release of a call of an
// error strategy (ErrorRatio, ErrorCount) needs the exact instant of its
// exit; est is the estimate it gets otherwise, no later than the exit. It
// does for a call that ended with an error: the error counts in its own
// bucket, and may open the breaker, at the instant the open phase is timed
// from. It does for a success while the window holds a bad call in reach
// of est (a success may then open the breaker, by bringing the window to
// the minimum request amount). Otherwise a success only counts in the
// bucket of est, which is at most the exit's own (one bucket earlier when
// the two straddle a boundary), and no decision waits on it. The release
// of a call whose phase has ended counts nothing and needs nothing.
func (t *closedTicket) ExitNeedsClock(failed bool, est int64) bool {
	p := t.p
	if t.st.cur.Load() != p {
		return false
	}
	w := p.win.BucketWidth()
	return failed || est/w-p.lastBad.Load() < windowBuckets || est%w >= w-w/estimateSlack
}

// estimateSlack: an error breaker's success whose estimated exit falls in
// the last 1/estimateSlack of a bucket is timed, lest the exit itself fall
// in the next bucket.
const estimateSlack = 10

// Release feeds the outcome of a call admitted in closed phase t.p into its
// window and opens the breaker when, with at least the minimum request
// amount, the window crosses the threshold. A call refused later in the
// chain never ran and is not counted; a call that exits once its phase has
// ended is not counted either (probes decide while HalfOpen, and closing
// starts a fresh window that only the calls it admits count in).
func (t *closedTicket) Release(x entry.ExitInfo) {
	if x.Blocked {
		return
	}
	p, st := t.p, t.st
	if st.cur.Load() != p {
		return
	}
	c := st.cfg.Load()
	w := p.win
	ep := x.End / w.BucketWidth()
	n := uint64(x.Batch)
	w.AddEpoch(ep, mTotal, n)
	if c.bad(&x) {
		w.AddEpoch(ep, mBad, n)
		for {
			last := p.lastBad.Load()
			if last >= ep || p.lastBad.CompareAndSwap(last, ep) {
				break
			}
		}
	} else if ep-p.lastBad.Load() >= windowBuckets {
		// No bad call in the window: no strategy can trip (a count of 0
		// is below every count threshold, a ratio of 0 above none), so
		// the healthy path skips reading the window.
		return
	}
	total := w.SumEpoch(ep, mTotal, windowBuckets)
	if total < c.minReq {
		return
	}
	v, trip := c.trips(w.SumEpoch(ep, mBad, windowBuckets), total)
	if trip {
		st.swap(p, func(c *params) *phase { return openPhase(x.End, c, v) }, v, x.End)
	}
}

// Release ends one probe: a probe refused later in the chain gives its slot
// back; a failed probe reopens the breaker; the last of N successful probes
// closes it. Probes of a round that has ended change nothing.
func (t *probeTicket) Release(x entry.ExitInfo) {
	p, st := t.p, t.st
	if x.Blocked {
		for {
			w := p.word.Load()
			if w&sealed != 0 || admitted(w) == 0 {
				return
			}
			if p.word.CompareAndSwap(w, w-1) {
				return
			}
		}
	}
	c := st.cfg.Load()
	if c.probeFailed(&x) {
		if p.word.Load()&sealed == 0 {
			st.swap(p, func(c *params) *phase { return openPhase(x.End, c, 0) }, float64(x.End-x.Start)/1e6, x.End)
		}
		return
	}
	for {
		w := p.word.Load()
		if w&sealed != 0 {
			return
		}
		nw := w + succOne
		if p.word.CompareAndSwap(w, nw) {
			if s := succeeded(nw); s >= p.n {
				st.swap(p, func(c *params) *phase { return closedPhase(st, x.End, c) }, float64(s), x.End)
			}
			return
		}
	}
}

// String describes the breaker for logs: resource, strategy and state.
func (b *Breaker) String() string {
	return fmt.Sprintf("degrade.Breaker{%q %s %s}", b.rule.Resource, b.rule.Strategy, b.State())
}
