package flow

import (
	"cmp"
	"context"
	"sort"
	"sync"
	"time"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/ruledef"
	"github.com/sluice-go/sluice/internal/window"
)

// exact enforces a QPS reject rule with Exact set: at most limit
// admissions in any interval of the rule's length, wherever it starts. The
// bucketed window bounds only intervals that start on a bucket boundary
// (an unaligned one can hold twice the limit); exact keeps the admission
// time of each of its last limit requests instead, in a log.
type exact struct {
	log      *admissionLog
	interval int64 // ns
	limit    int
	base
}

func newExact(b base) *exact {
	limit := int(b.rule.Threshold)
	return &exact{log: newAdmissionLog(limit), interval: int64(cmp.Or(b.rule.StatInterval, ruledef.StatInterval)), limit: limit, base: b}
}

func (c *exact) check(_ context.Context, ec *entry.Context, _ core.Clock) *core.BlockError {
	if be := c.tooLarge(ec, float64(c.limit)); be != nil {
		if ec.WantBudget {
			c.refusedBudget(ec, c.budget(ec))
		}
		return be
	}
	ok, seen, free := c.log.admit(ec.Start, int(ec.Batch), c.limit, c.interval)
	if ec.WantBudget {
		c.exactBudget(ec, ok)
	}
	if !ok {
		return c.refuse(ec, float64(seen), float64(c.limit), time.Duration(free-ec.Start), "")
	}
	ec.AddUndo(c)
	return nil
}

// Release takes back the batch of an entry a later check refused.
func (c *exact) Release(x entry.ExitInfo) {
	if x.Blocked {
		c.log.undo(x.Start, int(x.Batch), c.interval)
	}
}

// inherit shares old's log, which grows to the new limit if it is larger:
// the old and the new rule count the same admissions, whatever their
// thresholds.
func (c *exact) inherit(old checker) {
	c.log = old.(*exact).log
	c.log.reserve(c.limit)
}

// admissionLog is the admission times of the latest requests admitted by
// an exact rule (one entry per request of a batch), oldest first, in a
// ring. Times never decrease along the log: a request whose clock reading
// is older than the newest entry (a caller that read the clock before
// another but took the lock after it) is logged at the newest entry's time,
// which only makes later requests wait longer.
//
// A mutex guards it: a check costs a lock, a few loads and n stores.
type admissionLog struct {
	mu    sync.Mutex
	times []int64 // ring; len is the capacity, at least every limit it serves
	head  int     // the oldest entry
	count int     // entries in use
	last  int64   // the newest time logged (valid when a request was logged)

	// seed, until the first admission, is the window of the rule without
	// Exact that the log's rule replaced (buckets of seedWidth ns): its
	// admissions are logged first (see seedFrom).
	seed      *window.Snapshot
	seedWidth int64
}

func newAdmissionLog(capacity int) *admissionLog {
	return &admissionLog{times: make([]int64, capacity)}
}

// slot returns the ring index of the i-th oldest entry, for i < len(times).
// Must hold mu.
func (l *admissionLog) slot(i int) int {
	if j := l.head + i; j < len(l.times) {
		return j
	}
	return l.head + i - len(l.times)
}

// at returns the i-th oldest entry. Must hold mu.
func (l *admissionLog) at(i int) int64 { return l.times[l.slot(i)] }

// admit logs n requests at now if, with them, no interval of interval ns
// holds more than limit entries: that is, when the entry n-1 places after
// the limit-th newest (the one the batch would push out of the last limit)
// is at least interval old, or there is none. Otherwise it reports the
// number of entries in the last interval and the instant from which the
// batch would pass if nothing else were admitted. n must be at most limit.
func (l *admissionLog) admit(now int64, n, limit int, interval int64) (ok bool, seen int, free int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seed != nil {
		l.logSeed(now)
	}
	if l.count > 0 && now < l.last {
		now = l.last
	}
	// The batch fits unless its arrival would put more than limit entries
	// in (now-interval, now]: check the (limit-n+1)-th newest entry.
	if k := l.count - (limit - n) - 1; k >= 0 {
		if oldest := l.at(k); oldest > now-interval {
			return false, l.count - l.firstAfter(now-interval), oldest + interval
		}
	}
	for i := 0; i < n; i++ {
		l.push(now)
	}
	return true, 0, 0
}

// seedFrom makes the log start with the admissions counted in win, the
// window (buckets of width ns) of the rule without Exact that the log's
// rule replaces on a reload, so that switching Exact on does not admit a
// fresh interval's worth. The window knows only the bucket of each
// admission, not its instant: the first admission logs each at the last
// nanosecond of its bucket (or at its own instant, if sooner), never
// earlier than it was, so the log may hold an inherited admission up to a
// bucket longer than its instant would, and never admits more than the
// limit in an interval.
func (l *admissionLog) seedFrom(win *window.Window, width int64) {
	s := win.Snapshot()
	l.mu.Lock()
	l.seed, l.seedWidth = &s, width
	l.mu.Unlock()
}

// logSeed logs the seed's admissions of the window that ends at now, and
// drops the seed. Must hold mu.
func (l *admissionLog) logSeed(now int64) {
	s, w := l.seed, l.seedWidth
	l.seed = nil
	e := now / w
	for ep := e - window.WindowBuckets + 1; ep <= e+1; ep++ {
		if ep < 0 {
			continue
		}
		at := min((ep+1)*w-1, now)
		if l.count > 0 && at < l.last {
			at = l.last
		}
		for k := s.Count(ep); k > 0; k-- {
			l.push(at)
		}
	}
}

// push logs one request at t, no earlier than the newest entry, dropping
// the oldest when the log is full. Must hold mu.
func (l *admissionLog) push(t int64) {
	if l.count < len(l.times) {
		l.times[l.slot(l.count)] = t
		l.count++
	} else {
		l.times[l.head] = t
		l.head = l.slot(1)
	}
	l.last = t
}

// recent returns the times logged in the interval of interval ns that ends
// with the newest entry, oldest first: what a rule without Exact that
// replaces the log's rule on a reload counts in its window (see
// Build).
func (l *admissionLog) recent(interval int64) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ts []int64
	for i := l.firstAfter(l.last - interval); i < l.count; i++ {
		ts = append(ts, l.at(i))
	}
	return ts
}

// firstAfter returns the index of the oldest entry later than t (count
// when there is none). Must hold mu.
func (l *admissionLog) firstAfter(t int64) int {
	return sort.Search(l.count, func(i int) bool { return l.at(i) > t })
}

// undo removes n requests logged at start or later by an entry that a later
// check refused. They are the oldest n entries from start on, or, when
// entries of other callers logged at start or later precede them, some of
// those instead: the log then keeps a time no earlier than the one it drops,
// which can only delay later requests. Once an interval has passed since
// start the entries no longer limit anything newer, and may have left the
// log: nothing is removed then.
func (l *admissionLog) undo(start int64, n int, interval int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.count == 0 || l.last >= start+interval {
		return
	}
	from := l.firstAfter(start - 1)
	if n > l.count-from {
		n = l.count - from
	}
	for i := from; i+n < l.count; i++ {
		l.times[l.slot(i)] = l.at(i + n)
	}
	l.count -= n
}

// reserve grows the log to hold at least capacity entries, keeping the
// ones it has.
func (l *admissionLog) reserve(capacity int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if capacity <= len(l.times) {
		return
	}
	times := make([]int64, capacity)
	for i := 0; i < l.count; i++ {
		times[i] = l.at(i)
	}
	l.times, l.head = times, 0
}

// budget is the rule's budget at ec.Start: Limit is its threshold per
// interval, Remaining the limit less the requests logged in the interval
// that ends now, and Reset the time until the newest of them is an
// interval old.
func (c *exact) budget(ec *entry.Context) core.Budget {
	n, last := c.log.inInterval(ec.Start, c.interval)
	bg := core.Budget{Limit: float64(c.limit), Remaining: int64(max(c.limit-n, 0)), Window: time.Duration(c.interval)}
	if n > 0 {
		bg.Reset = time.Duration(max(last+c.interval-ec.Start, 0))
	}
	return bg
}

// exactBudget notes (ok: the entry passed) or records the rule's budget.
func (c *exact) exactBudget(ec *entry.Context, ok bool) {
	if ok {
		c.noteBudget(ec, c.budget(ec))
	} else {
		c.refusedBudget(ec, c.budget(ec))
	}
}

// inInterval returns the number of requests logged in the interval of
// interval ns that ends at now (or at the newest entry, when a later
// caller logged it), and the newest entry's time.
func (l *admissionLog) inInterval(now, interval int64) (int, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.count == 0 {
		return 0, 0
	}
	now = max(now, l.last)
	return l.count - l.firstAfter(now-interval), l.last
}
