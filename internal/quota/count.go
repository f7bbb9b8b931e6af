package quota

import (
	"strings"
	"sync"
	"time"

	"github.com/sluice-go/sluice/internal/clock"
	"github.com/sluice-go/sluice/internal/core"
)

// WallOffset is what turns a reading of clk into Unix ns: the system
// clock's origin on the wall clock (read once, when the process started,
// so a step of the host's wall clock afterwards moves no boundary), or 0
// for any other clock, whose readings a quota takes as Unix ns (a manual
// clock in tests is set to the instant under test).
func WallOffset(clk core.Clock) int64 { return clock.WallOffset(clk) }

// Count is the count of one quota in its current period. The zero value
// has no period yet. It is safe for concurrent use.
type Count struct {
	mu         sync.Mutex
	start, end int64 // the current period, Unix ns
	used       int64
}

// advance moves the count to the period of t if t is past the current
// one. An instant before the current period (an entry that read the clock
// before another moved the count on) counts in the current period. Must
// hold k.mu.
func (k *Count) advance(cal *Calendar, t int64) {
	if k.end == 0 || t >= k.end {
		k.start, k.end = cal.Bounds(t)
		k.used = 0
	}
}

// Take adds n units at instant t if the period's count stays within
// limit. It returns whether it did, the count it found, and the end of the
// period.
func (k *Count) Take(cal *Calendar, t, n, limit int64) (ok bool, used, end int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.advance(cal, t)
	used = k.used
	if used+n <= limit && n <= limit {
		k.used += n
		return true, used, k.end
	}
	return false, used, k.end
}

// Give takes back n units taken at instant t, if the count is still in
// t's period (an entry a later check refused).
func (k *Count) Give(t, n int64) {
	k.mu.Lock()
	if k.start <= t && t < k.end {
		k.used = max(k.used-n, 0)
	}
	k.mu.Unlock()
}

// Period returns the count's current period [start, end).
func (k *Count) Period() (start, end int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.start, k.end
}

// Used returns the count at instant t (0 when t is past the period).
func (k *Count) Used(t int64) int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	if t >= k.end || t < k.start {
		return 0
	}
	return k.used
}

// Table is the per-value count of a param quota in its current period: at
// most capacity values, a new value past them being refused. It is safe
// for concurrent use.
type Table struct {
	mu         sync.Mutex
	start, end int64
	used       map[string]*int64 // a pointer: updating a count stores no key
	capacity   int
}

// NewTable returns an empty table of at most capacity values a period.
func NewTable(capacity int) *Table { return &Table{capacity: capacity, used: map[string]*int64{}} }

// Outcome is a Table's decision.
type Outcome uint8

const (
	Taken Outcome = iota // counted
	Over                 // the value's count would pass its limit
	Full                 // a new value, and the table holds capacity values
)

// Take adds n units for value key at instant t if its count stays within
// limit. It returns the outcome, the count it found and the period's end.
// key is not kept: a new value's key is copied (the caller's may live in a
// buffer it reuses, and stays on its stack).
func (tb *Table) Take(cal *Calendar, key string, t, n, limit int64) (Outcome, int64, int64) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if tb.end == 0 || t >= tb.end {
		tb.start, tb.end = cal.Bounds(t)
		tb.used = map[string]*int64{} // the old map goes at once, not entry by entry
	}
	p := tb.used[key]
	var used int64
	if p != nil {
		used = *p
	}
	switch {
	case used+n > limit || n > limit:
		return Over, used, tb.end
	case p == nil && len(tb.used) >= tb.capacity:
		return Full, 0, tb.end
	case p == nil:
		p = new(int64)
		tb.used[strings.Clone(key)] = p
	}
	*p = used + n
	return Taken, used, tb.end
}

// Give takes back n units of value key taken at instant t, if the table
// is still in t's period.
func (tb *Table) Give(key string, t, n int64) {
	tb.mu.Lock()
	if tb.start <= t && t < tb.end {
		if p := tb.used[key]; p != nil {
			*p = max(*p-n, 0)
		}
	}
	tb.mu.Unlock()
}

// Used returns value key's count at instant t.
func (tb *Table) Used(key string, t int64) int64 {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if t >= tb.end || t < tb.start {
		return 0
	}
	if p := tb.used[key]; p != nil {
		return *p
	}
	return 0
}

// Period returns the table's current period [start, end).
func (tb *Table) Period() (start, end int64) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return tb.start, tb.end
}

// Length returns the length of the period that ends at end, as a Count or
// Table whose Period is (start, until) tells it: until-start when until is
// end, else (the count moved on meanwhile) as cal draws it.
func Length(cal *Calendar, start, until, end int64) time.Duration {
	if until != end {
		start, _ = cal.Bounds(end - 1)
	}
	return time.Duration(end - start)
}

// Len returns the number of values counted in the current period.
func (tb *Table) Len() int {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return len(tb.used)
}

// Retry is the time from t to end, at least 1ns.
func Retry(t, end int64) time.Duration { return time.Duration(max(end-t, 1)) }
