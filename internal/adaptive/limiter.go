// Package adaptive holds the algorithm of adaptive concurrency rules: a
// limit on requests in flight that follows the resource's measured response
// time, so that it settles near throughput × no-load RT (Little's law), the
// most a resource can have in flight without queueing.
//
// The limiter measures in sample windows. At the end of each it compares the
// window's mean RT with the no-load RT (the baseline):
//
//   - above (1+Tolerance) × baseline, requests queue: the limit is cut in
//     proportion, toward the level that leaves Tolerance/2 of queueing, by at
//     most half per window;
//   - within (1+Tolerance/2) × baseline, the limit grows by the room left
//     (at most Tolerance/2 of itself, at least one), unless the resource is
//     application-limited (its peak in flight in the window below half the
//     limit) or the RT is rising (the window's mean more than 2% above the
//     mean of the window trendWindows before): a steady rise is never read
//     as room;
//   - in between, it holds.
//
// There is no queue allowance added on every window (Gradient2's, which
// makes the limit drift upward under moderate overload), and only samples of
// entries that started inside the window count, so a window measures the
// limit it ran under. Refused entries and cancelled ones give no sample.
//
// The baseline is measured, not remembered: a probe halves the limit for a
// window and takes that window's mean RT as the new baseline, and halves it
// again while halving still lowers the RT by more than Tolerance (the limit
// was far above the knee). A probe runs at the first window, after two
// windows in a row above tolerance (the dependency may have become slower
// for good, and its new RT must become the baseline instead of cutting the
// limit to the minimum), and at least every probe interval.
package adaptive

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Config is what a Limiter needs of its rule; the values are valid (the
// rule's validation checks them) and defaults are applied.
type Config struct {
	Min, Max, Initial int64
	// Window is the shortest sample window; a window also lasts at least
	// twice the baseline and until it holds minSamples samples.
	Window time.Duration
	// Tolerance is the RT increase over the baseline read as queueing.
	Tolerance float64
	// Probe is the longest time between two probes of the baseline.
	Probe time.Duration
}

const (
	// minSamples is the fewest samples a window decides on; a window with
	// fewer goes on.
	minSamples = 16
	// trendWindows is how many windows back the rising-RT guard looks.
	trendWindows = 10
	// trendSlack is the rise over trendWindows windows below which the RT
	// counts as steady (the noise of a window's mean).
	trendSlack = 0.02
	// highWindows is how many windows in a row above tolerance start a
	// probe.
	highWindows = 2
)

// Limiter is the state of one adaptive concurrency rule. Acquire and Release
// are safe for concurrent use and never block or allocate; the window's
// decision runs in the Release that ends it, under a lock that others skip.
type Limiter struct {
	limit    atomic.Int64 // the admission limit in force
	inflight atomic.Int64
	peak     atomic.Int64 // the most in flight since the window began
	start    atomic.Int64 // the window's start: only entries started at or after it give samples
	end      atomic.Int64 // the earliest end of the window
	sum      atomic.Int64 // RT of the window's samples, ns
	n        atomic.Int64 // the window's samples
	changes  atomic.Uint64
	hook     atomic.Pointer[hooks]

	mu  sync.Mutex // the window's decision
	cfg Config
	est float64 // the limit outside probes
	// base is the no-load RT in ns; 0 before the first probe.
	base     float64
	trend    [trendWindows]float64
	tn       int
	high     int
	probeAt  int64
	probing  bool
	probePre float64 // the mean RT of the window before the probe step
	probeL   float64
	// reported is the limit the last material change reported (Initial
	// before the first).
	reported int64
}

// Change is a window decision that moved the limit, at At, from From to
// To. Material says it moved the limit by at least a tenth (MaterialStep)
// of the limit the last material change reported, Reported, or onto Min or
// Max from elsewhere: the changes worth an event. Small steps add up: a
// limit that creeps by 1 per window reports each time the total since the
// last report reaches a tenth.
type Change struct {
	At, From, To int64
	Reported     int64
	Material     bool
}

// MaterialStep is the relative move since the last reported limit that
// makes a change material.
const MaterialStep = 0.1

// hooks are what SetHook set.
type hooks struct {
	changed func(Change)
	after   func()
}

// SetHook makes changed hear of every decision that moves the limit, on
// the goroutine of the Release that ends the window, under the window's
// lock, so in the order of the decisions (changed must be quick and must
// not call the limiter); after, when not nil, is called once the lock is
// let go (to deliver what changed queued outside it). A nil changed
// removes the hooks.
func (l *Limiter) SetHook(changed func(Change), after func()) {
	if changed == nil {
		l.hook.Store(nil)
		return
	}
	l.hook.Store(&hooks{changed: changed, after: after})
}

// material reports whether a move to v is material (see Change).
func (l *Limiter) material(v int64) bool {
	r := l.reported
	switch {
	case v == r:
		return false
	case v == l.cfg.Min || v == l.cfg.Max:
		return true
	}
	d := v - r
	if d < 0 {
		d = -d
	}
	return float64(d) >= MaterialStep*float64(r)
}

// New returns a limiter at cfg.Initial whose first window starts at now.
func New(cfg Config, now int64) *Limiter {
	l := &Limiter{cfg: cfg, est: float64(cfg.Initial), reported: cfg.Initial}
	l.limit.Store(cfg.Initial)
	l.start.Store(now)
	l.end.Store(now + int64(cfg.Window))
	l.probeAt = now + int64(cfg.Probe)
	return l
}

// Limit returns the admission limit in force.
func (l *Limiter) Limit() int64 { return l.limit.Load() }

// Inflight returns the requests in flight.
func (l *Limiter) Inflight() int64 { return l.inflight.Load() }

// Changes counts the windows that changed the limit.
func (l *Limiter) Changes() uint64 { return l.changes.Load() }

// Share is the part of the limit a priority may fill: Sheddable
// three-quarters of it, Default all of it, Critical a quarter more (at
// least one more), the headroom only critical work can take.
type Share uint8

// The shares, by priority.
const (
	Default Share = iota
	Sheddable
	Critical
)

// Cap returns the most in flight share may fill under limit lim.
func Cap(lim int64, s Share) int64 {
	switch s {
	case Sheddable:
		return lim - lim/4
	case Critical:
		return lim + max(1, (lim+3)/4)
	}
	return lim
}

// Acquire takes n in-flight slots if the requests in flight stay within
// share's part of the limit. It returns whether it took them, and what it
// saw in flight and the limit it compared with.
func (l *Limiter) Acquire(n int64, s Share) (ok bool, seen, capacity int64) {
	capacity = Cap(l.limit.Load(), s)
	for {
		cur := l.inflight.Load()
		if cur+n > capacity {
			return false, cur, capacity
		}
		if l.inflight.CompareAndSwap(cur, cur+n) {
			if cur+n > l.peak.Load() {
				l.peak.Store(cur + n)
			}
			return true, cur, capacity
		}
	}
}

// Release gives back n slots of an entry that started at start and ended at
// end; sample says whether its RT is a measurement (false for an entry a
// later check refused, or one its caller cancelled). It ends the window
// when end is past the window's end.
func (l *Limiter) Release(start, end, n int64, sample bool) {
	l.inflight.Add(-n)
	if sample && start >= l.start.Load() {
		l.sum.Add(end - start)
		l.n.Add(1)
	}
	if end >= l.end.Load() {
		l.update(end)
	}
}

// update ends the window at now if it is over and holds enough samples.
func (l *Limiter) update(now int64) {
	if !l.mu.TryLock() {
		return
	}
	h := l.decideWindow(now)
	l.mu.Unlock()
	if h != nil && h.after != nil {
		h.after()
	}
}

// decideWindow is update under the lock; it returns the hooks it called.
func (l *Limiter) decideWindow(now int64) *hooks {
	if now < l.end.Load() || l.n.Load() < minSamples {
		return nil
	}
	sum, n := l.sum.Swap(0), l.n.Swap(0)
	peak := l.peak.Swap(l.inflight.Load())
	l.start.Store(now)
	avg := float64(sum) / float64(max(n, 1))
	before := l.limit.Load()
	l.decide(avg, peak, now)
	l.end.Store(now + max(int64(l.cfg.Window), int64(2*l.base)))
	if after := l.limit.Load(); after != before {
		l.changes.Add(1)
		c := Change{At: now, From: before, To: after, Reported: l.reported}
		if c.Material = l.material(after); c.Material {
			l.reported = after
		}
		if h := l.hook.Load(); h != nil {
			h.changed(c)
			return h
		}
	}
	return nil
}

// decide moves the limit after a window of mean RT avg (ns) whose peak in
// flight was peak.
func (l *Limiter) decide(avg float64, peak, now int64) {
	tol := l.cfg.Tolerance
	lo := float64(l.cfg.Min)
	if l.probing {
		if avg*(1+tol) < l.probePre && l.probeL > lo {
			// Halving lowered the RT: the level before was queueing.
			l.probePre = avg
			l.probeL = max(lo, l.probeL/2)
			l.set(l.probeL)
			return
		}
		l.probing = false
		l.base = avg
		l.est = min(l.est, 2*l.probeL)
		l.tn, l.high = 0, 0
		l.probeAt = now + int64(l.cfg.Probe)
		l.set(l.est)
		return
	}
	if l.base == 0 {
		l.startProbe(avg)
		return
	}
	l.base = min(l.base, avg)
	ratio := avg / l.base
	rising := l.tn >= trendWindows && avg > l.trend[l.tn%trendWindows]*(1+trendSlack)
	l.trend[l.tn%trendWindows] = avg
	l.tn++
	switch {
	case ratio > 1+tol:
		l.est = max(lo, l.est*(1+tol/2)/ratio, l.est/2)
		if l.high++; l.high >= highWindows {
			l.startProbe(avg)
			return
		}
	case ratio <= 1+tol/2 && !rising && 2*float64(peak) >= l.est:
		l.est = min(float64(l.cfg.Max), l.est+max(1, l.est*(1+tol/2-ratio)))
		l.high = 0
	default:
		l.high = 0
	}
	if now >= l.probeAt {
		l.startProbe(avg)
		return
	}
	l.set(l.est)
}

func (l *Limiter) startProbe(pre float64) {
	l.probing = true
	l.probePre = pre
	l.probeL = max(float64(l.cfg.Min), l.est/2)
	l.set(l.probeL)
}

func (l *Limiter) set(v float64) {
	l.limit.Store(int64(max(float64(l.cfg.Min), math.Round(v))))
}
