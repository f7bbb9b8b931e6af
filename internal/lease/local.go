package lease

import (
	"math"
	"sync"
	"time"

	"github.com/sluice-go/sluice/cluster"
)

// localSlots is the number of sub-windows a local sliding window sums: ten
// per Interval, plus the one the window's far edge cuts.
const localSlots = 11

// localLimiter is a budget's fallback in this process: its local share,
// with the budget's algorithm. It is safe for concurrent use.
//
//   - TokenBucket: share/Interval per ns, capacity LocalBurst or the
//     budget's Burst (Limit when zero) scaled by share/Limit, at least 1;
//     full at first use; AllowN of golang.org/x/time/rate.
//   - SlidingWindow: admits n if the permits admitted in the 11 sub-windows
//     of width ceil(Interval/10) ending with the current one, plus n, are
//     at most the share. Those sub-windows cover (now-Interval, now], so no
//     window of length Interval ever holds more than the share; the price
//     is refusing up to one sub-window early. A share below one permit
//     per Interval admits single permits Interval/share apart (see lone).
//   - Pacing: GCRA with ceil(Interval/share) between permits and the
//     budget's MaxQueue.
//
// The share is Spec.LocalLimit, or Limit divided by the live count, which
// is re-read on every decision.
type localLimiter struct {
	mu       sync.Mutex
	alg      cluster.Algorithm
	interval int64
	limit    float64 // the budget's Limit
	burst    float64 // the budget's Burst, or Limit
	ownLimit float64 // Spec.LocalLimit
	ownBurst float64 // Spec.LocalBurst
	maxQueue int64

	live     int     // the live count the shape below is for; 0 before the first
	share    float64 // permits per interval
	capacity float64 // TokenBucket
	perNS    float64 // TokenBucket: tokens per ns
	stepNS   int64   // Pacing

	tokens  float64 // TokenBucket
	last    int64   // TokenBucket: last refill; SlidingWindow below one: last admission
	started bool

	width int64 // SlidingWindow: sub-window, ns
	slots [localSlots]struct{ id, n int64 }

	tat int64 // Pacing: when the next permit is due

	adm  slotWin // the permits admitted here, for the payback on recovery
	late slotWin // those of them admitted for late calls (see allowLate)
}

func newLocalLimiter(s *Spec) *localLimiter {
	b := &s.Budget
	lc := &localLimiter{
		alg:      b.Algorithm,
		interval: int64(b.Interval),
		limit:    b.Limit,
		burst:    b.Burst,
		ownLimit: s.LocalLimit,
		ownBurst: s.LocalBurst,
		maxQueue: int64(b.MaxQueue),
		width:    max(ceilDiv(int64(b.Interval), localSlots-1), 1),
		tat:      math.MinInt64,
	}
	lc.adm.width, lc.late.width = lc.width, lc.width
	if lc.burst == 0 {
		lc.burst = lc.limit
	}
	return lc
}

// allow decides n permits at now with live instances.
func (lc *localLimiter) allow(now, n int64, live int) Result {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.allowLocked(now, n, live)
}

// lateShare is the part of the local share (1/lateShare, at least one
// permit per Interval) that late calls may admit while the Manager stays
// Remote: the other instances keep taking the whole budget from the
// Store meanwhile, so what late calls admit is on top of it, and the
// fleet's at most 1/lateShare of the budget.
const lateShare = 50

// allowLate decides n permits at now for a late call while the Manager is
// Remote: used permits granted by the Store lately count against the
// share, and late calls admit at most a fiftieth of it per Interval.
func (lc *localLimiter) allowLate(now, n, used int64, live int) Result {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if live != lc.live {
		lc.shape(live)
	}
	if float64(used+lc.adm.sum(now)+n) > lc.share || lc.late.sum(now)+n > max(toInt(lc.share/lateShare), 1) {
		return Result{}
	}
	r := lc.allowLocked(now, n, live)
	if r.Admitted {
		lc.late.add(now, n)
	}
	return r
}

func (lc *localLimiter) allowLocked(now, n int64, live int) Result {
	if live != lc.live {
		lc.shape(live)
	}
	var r Result
	switch lc.alg {
	case cluster.TokenBucket:
		r = lc.bucket(now, n)
	case cluster.SlidingWindow:
		r = lc.window(now, n)
	default:
		r = lc.pace(now, n)
	}
	if r.Admitted {
		lc.adm.add(now, n)
	}
	return r
}

func (lc *localLimiter) shape(live int) {
	lc.live = live
	lc.share = lc.ownLimit
	if lc.share == 0 {
		lc.share = lc.limit / float64(live)
	}
	lc.capacity = lc.ownBurst
	if lc.capacity == 0 {
		lc.capacity = lc.burst * lc.share / lc.limit
	}
	lc.capacity = max(lc.capacity, 1)
	lc.perNS = lc.share / float64(lc.interval)
	lc.tokens = min(lc.tokens, lc.capacity)
	lc.stepNS = max(toInt(math.Ceil(float64(lc.interval)/lc.share)), 1)
}

func (lc *localLimiter) bucket(now, n int64) Result {
	if !lc.started {
		lc.started = true
		lc.tokens = lc.capacity
		lc.last = now
	}
	if now > lc.last {
		lc.tokens = min(lc.capacity, lc.tokens+float64(now-lc.last)*lc.perNS)
		lc.last = now
	}
	f := float64(n)
	if lc.tokens >= f {
		lc.tokens -= f
		return Result{Admitted: true}
	}
	if f > lc.capacity {
		return Result{}
	}
	return Result{RetryAfter: time.Duration(math.Ceil((f - lc.tokens) / lc.perNS))}
}

func (lc *localLimiter) window(now, n int64) Result {
	if lc.share < 1 {
		return lc.lone(now, n)
	}
	id := now / lc.width
	if now < 0 && now%lc.width != 0 {
		id--
	}
	var sum int64
	oldest := int64(math.MaxInt64)
	for i := range lc.slots {
		s := &lc.slots[i]
		if s.n > 0 && s.id > id-localSlots && s.id <= id {
			sum += s.n
			oldest = min(oldest, s.id)
		}
	}
	if float64(sum+n) <= lc.share {
		s := &lc.slots[((id%localSlots)+localSlots)%localSlots]
		if s.id != id {
			s.id, s.n = id, 0
		}
		s.n += n
		return Result{Admitted: true}
	}
	if oldest == math.MaxInt64 || float64(n) > lc.share {
		return Result{}
	}
	// The oldest counted sub-window stops counting once the window has
	// moved localSlots sub-windows past it.
	return Result{RetryAfter: time.Duration((oldest+localSlots)*lc.width - now)}
}

// lone decides for a sliding-window share below one permit per Interval
// (a small limit over many instances): no window of Interval can hold a
// whole permit of it, so it admits single permits stepNS = Interval/share
// apart, the share's average rate, instead of none ever. A batch larger
// than one is refused for good.
func (lc *localLimiter) lone(now, n int64) Result {
	if n > 1 {
		return Result{}
	}
	if lc.started && now-lc.last < lc.stepNS {
		return Result{RetryAfter: time.Duration(lc.last + lc.stepNS - now)}
	}
	lc.started, lc.last = true, now
	return Result{Admitted: true}
}

func (lc *localLimiter) pace(now, n int64) Result {
	tat := max(lc.tat, now)
	w := tat - now
	if w > lc.maxQueue {
		return Result{RetryAfter: time.Duration(w - lc.maxQueue)}
	}
	lc.tat = tat + n*lc.stepNS
	return Result{Admitted: true, Wait: time.Duration(w)}
}

// slotWin counts permits over the last Interval in localSlots sub-windows
// of width ceil(Interval/10): sum covers (now-Interval-width, now], a
// little more than an Interval, never less.
type slotWin struct {
	width int64
	slots [localSlots]struct{ id, n int64 }
}

func (w *slotWin) id(now int64) int64 {
	id := now / w.width
	if now < 0 && now%w.width != 0 {
		id--
	}
	return id
}

// add counts n permits at now.
func (w *slotWin) add(now, n int64) {
	id := w.id(now)
	s := &w.slots[((id%localSlots)+localSlots)%localSlots]
	if s.id != id {
		s.id, s.n = id, 0
	}
	s.n += n
}

// sum returns the permits counted in the sub-windows that cover the last
// Interval.
func (w *slotWin) sum(now int64) int64 {
	id := w.id(now)
	var sum int64
	for i := range w.slots {
		if s := &w.slots[i]; s.n > 0 && s.id > id-localSlots && s.id <= id {
			sum += s.n
		}
	}
	return sum
}

// charge counts n permits as admitted at now, as if this process had
// admitted them by its share: the permits its leases or strict requests
// used in the last Interval, when the Store stops answering, so the share
// is what is left of it. A token bucket loses n tokens (down to empty), a
// window counts n in the current sub-window; a schedule is left alone
// (the shared one was paced already).
func (lc *localLimiter) charge(now, n int64, live int) {
	if n <= 0 {
		return
	}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if live != lc.live {
		lc.shape(live)
	}
	switch lc.alg {
	case cluster.TokenBucket:
		lc.bucket(now, 0)
		lc.tokens = max(lc.tokens-float64(n), 0)
	case cluster.SlidingWindow:
		id := now / lc.width
		if now < 0 && now%lc.width != 0 {
			id--
		}
		s := &lc.slots[((id%localSlots)+localSlots)%localSlots]
		if s.id != id {
			s.id, s.n = id, 0
		}
		s.n += n
	}
}

// admittedRecently returns the permits admitted locally in the last Interval
// (about; see slotWin).
func (lc *localLimiter) admittedRecently(now int64) int64 {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.adm.sum(now)
}
