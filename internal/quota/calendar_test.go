package quota

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/sluice-go/sluice/rules"
)

func at(t *testing.T, s string) int64 {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v.UnixNano()
}

// TestCalendarBoundaries checks the period of an instant at each boundary
// that breaks naive code: months of 28 to 31 days, 29 February, a year
// boundary, days of 23 and 25 hours at daylight-saving changes, a midnight
// that does not exist, a day a zone skipped, half-hour offsets and a
// half-hour daylight-saving change. Expected bounds are written as UTC
// instants worked out from the zones' rules, not from the code.
func TestCalendarBoundaries(t *testing.T) {
	cases := []struct {
		name       string
		q          rules.Quota
		t          string
		start, end string
		hours      float64 // the period's length, 0: not checked
	}{
		{"last second of January", rules.Quota{Period: "month"}, "2026-01-31T23:59:59Z", "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z", 31 * 24},
		{"first instant of February", rules.Quota{Period: "month"}, "2026-02-01T00:00:00Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z", 28 * 24},
		{"February of a leap year", rules.Quota{Period: "month"}, "2028-02-29T23:59:59.999999999Z", "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z", 29 * 24},
		{"29 February as a day", rules.Quota{Period: "day"}, "2028-02-29T12:00:00Z", "2028-02-29T00:00:00Z", "2028-03-01T00:00:00Z", 24},
		{"2100 is no leap year", rules.Quota{Period: "month"}, "2100-02-28T23:00:00Z", "2100-02-01T00:00:00Z", "2100-03-01T00:00:00Z", 28 * 24},
		{"a month of 30 days", rules.Quota{Period: "month"}, "2026-04-30T23:59:59Z", "2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z", 30 * 24},
		{"year boundary UTC", rules.Quota{Period: "year"}, "2026-12-31T23:59:59.999999999Z", "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z", 365 * 24},
		{"leap year", rules.Quota{Period: "year"}, "2028-07-01T00:00:00Z", "2028-01-01T00:00:00Z", "2029-01-01T00:00:00Z", 366 * 24},
		{"year boundary in Berlin", rules.Quota{Period: "year", Zone: "Europe/Berlin"}, "2026-12-31T22:59:59Z", "2025-12-31T23:00:00Z", "2026-12-31T23:00:00Z", 365 * 24},
		{"new year in Berlin, still 2026 in UTC", rules.Quota{Period: "year", Zone: "Europe/Berlin"}, "2026-12-31T23:00:00Z", "2026-12-31T23:00:00Z", "2027-12-31T23:00:00Z", 365 * 24},
		{"month in Tokyo", rules.Quota{Period: "month", Zone: "Asia/Tokyo"}, "2026-01-31T15:00:00Z", "2026-01-31T15:00:00Z", "2026-02-28T15:00:00Z", 28 * 24},
		{"23-hour day, Berlin spring", rules.Quota{Period: "day", Zone: "Europe/Berlin"}, "2026-03-29T12:00:00Z", "2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z", 23},
		{"25-hour day, Berlin autumn", rules.Quota{Period: "day", Zone: "Europe/Berlin"}, "2026-10-25T12:00:00Z", "2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z", 25},
		{"23-hour day, New York", rules.Quota{Period: "day", Zone: "America/New_York"}, "2026-03-08T06:59:59Z", "2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z", 23},
		{"25-hour day, New York", rules.Quota{Period: "day", Zone: "America/New_York"}, "2026-11-01T05:30:00Z", "2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z", 25},
		{"month holding the spring change", rules.Quota{Period: "month", Zone: "Europe/Berlin"}, "2026-03-31T21:59:59Z", "2026-02-28T23:00:00Z", "2026-03-31T22:00:00Z", 31*24 - 1},
		{"hour before the Berlin gap", rules.Quota{Period: "hour", Zone: "Europe/Berlin"}, "2026-03-29T00:59:59Z", "2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z", 1},
		{"hour after the Berlin gap", rules.Quota{Period: "hour", Zone: "Europe/Berlin"}, "2026-03-29T01:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z", 1},
		{"first 02:00 hour of the Berlin autumn", rules.Quota{Period: "hour", Zone: "Europe/Berlin"}, "2026-10-25T00:30:00Z", "2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z", 1},
		{"second 02:00 hour of the Berlin autumn", rules.Quota{Period: "hour", Zone: "Europe/Berlin"}, "2026-10-25T01:30:00Z", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z", 1},
		{"hour of a half-hour zone", rules.Quota{Period: "hour", Zone: "Asia/Kolkata"}, "2026-06-01T10:29:59Z", "2026-06-01T09:30:00Z", "2026-06-01T10:30:00Z", 1},
		{"hour of a quarter-hour zone", rules.Quota{Period: "hour", Zone: "Asia/Kathmandu"}, "2026-06-01T10:15:00Z", "2026-06-01T10:15:00Z", "2026-06-01T11:15:00Z", 1},
		// Lord Howe moves by half an hour: 2026-04-05 02:00 +11 becomes 01:30 +10:30
		// (15:00 UTC on the 4th). Its 01:00 hour at +10:30 would start at
		// 14:30 UTC, before the change: it starts there, half an hour long.
		{"half hour at Lord Howe's change", rules.Quota{Period: "hour", Zone: "Australia/Lord_Howe"}, "2026-04-04T15:10:00Z", "2026-04-04T15:00:00Z", "2026-04-04T15:30:00Z", 0.5},
		{"hour before Lord Howe's change", rules.Quota{Period: "hour", Zone: "Australia/Lord_Howe"}, "2026-04-04T14:59:59Z", "2026-04-04T14:00:00Z", "2026-04-04T15:00:00Z", 1},
		{"day of Lord Howe's change", rules.Quota{Period: "day", Zone: "Australia/Lord_Howe"}, "2026-04-04T15:10:00Z", "2026-04-04T13:00:00Z", "2026-04-05T13:30:00Z", 24.5},
		// Santiago springs forward at midnight: 2026-09-06 00:00 -04 is
		// 01:00 -03 (04:00 UTC). The 6th has no midnight; it starts at 01:00.
		{"day without a midnight", rules.Quota{Period: "day", Zone: "America/Santiago"}, "2026-09-06T12:00:00Z", "2026-09-06T04:00:00Z", "2026-09-07T03:00:00Z", 23},
		{"day before it", rules.Quota{Period: "day", Zone: "America/Santiago"}, "2026-09-06T03:59:59Z", "2026-09-05T04:00:00Z", "2026-09-06T04:00:00Z", 24},
		// Samoa crossed the date line: 2011-12-29 24:00 -10 was 2011-12-31
		// 00:00 +14 (10:00 UTC on the 30th); the 30th never happened.
		{"day before a skipped day", rules.Quota{Period: "day", Zone: "Pacific/Apia"}, "2011-12-30T09:59:59Z", "2011-12-29T10:00:00Z", "2011-12-30T10:00:00Z", 24},
		{"day after a skipped day", rules.Quota{Period: "day", Zone: "Pacific/Apia"}, "2011-12-30T10:00:00Z", "2011-12-30T10:00:00Z", "2011-12-31T10:00:00Z", 24},
		{"month with a skipped day", rules.Quota{Period: "month", Zone: "Pacific/Apia"}, "2011-12-15T00:00:00Z", "2011-12-01T10:00:00Z", "2011-12-31T10:00:00Z", 30 * 24},
		{"week from Monday", rules.Quota{Period: "week"}, "2026-01-04T12:00:00Z", "2025-12-29T00:00:00Z", "2026-01-05T00:00:00Z", 7 * 24},
		{"week from Sunday", rules.Quota{Period: "week", WeekStart: "sunday"}, "2026-01-04T12:00:00Z", "2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z", 7 * 24},
		{"week across the New York spring change", rules.Quota{Period: "week", Zone: "America/New_York", WeekStart: "sunday"}, "2026-03-10T00:00:00Z", "2026-03-08T05:00:00Z", "2026-03-15T04:00:00Z", 7*24 - 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cal, err := New(&c.q)
			if err != nil {
				t.Fatal(err)
			}
			s, e := cal.Bounds(at(t, c.t))
			got := fmt.Sprint(time.Unix(0, s).UTC().Format(time.RFC3339Nano), " ", time.Unix(0, e).UTC().Format(time.RFC3339Nano))
			if want := fmt.Sprint(c.start, " ", c.end); got != want {
				t.Fatalf("%s in %s: got [%s), want [%s)", c.t, cal.Spec(), got, want)
			}
			if c.hours != 0 && time.Duration(e-s) != time.Duration(c.hours*float64(time.Hour)) {
				t.Fatalf("length %v, want %vh", time.Duration(e-s), c.hours)
			}
			// Every instant of the period is in it: its first and last.
			if s2, e2 := cal.Bounds(s); s2 != s || e2 != e {
				t.Fatalf("the first instant's period is [%d, %d), not [%d, %d)", s2, e2, s, e)
			}
			if s2, e2 := cal.Bounds(e - 1); s2 != s || e2 != e {
				t.Fatalf("the last instant's period is [%d, %d), not [%d, %d)", s2, e2, s, e)
			}
			if s2, _ := cal.Bounds(e); s2 != e {
				t.Fatalf("the next period starts at %d, not at %d", s2, e)
			}
		})
	}
}

// TestCalendarCoversTime walks 2026 period by period in zones with every kind
// of transition: the periods tile the timeline (each starts where the
// previous ended), and every instant of a period is given that period.
func TestCalendarCoversTime(t *testing.T) {
	for _, zone := range []string{"UTC", "Europe/Berlin", "America/Santiago", "Australia/Lord_Howe", "Asia/Kathmandu", "Pacific/Apia"} {
		for _, p := range []string{"hour", "day", "week", "month"} {
			cal, err := New(&rules.Quota{Period: p, Zone: zone})
			if err != nil {
				t.Fatal(err)
			}
			s, e := cal.Bounds(at(t, "2026-01-01T00:00:00Z"))
			for s < at(t, "2027-01-01T00:00:00Z") {
				for _, u := range []int64{s, s + (e-s)/3, s + (e-s)/2, e - 1} {
					if s2, e2 := cal.Bounds(u); s2 != s || e2 != e {
						t.Fatalf("%s: %v is in [%v, %v), not in [%v, %v)", cal.Spec(), time.Unix(0, u).UTC(),
							time.Unix(0, s2).UTC(), time.Unix(0, e2).UTC(), time.Unix(0, s).UTC(), time.Unix(0, e).UTC())
					}
				}
				ns, ne := cal.Bounds(e)
				if ns != e || ne <= ns {
					t.Fatalf("%s: the period after [%v, %v) is [%v, %v)", cal.Spec(), time.Unix(0, s).UTC(), time.Unix(0, e).UTC(), time.Unix(0, ns).UTC(), time.Unix(0, ne).UTC())
				}
				s, e = ns, ne
			}
		}
	}
}

// TestCountExactUnderConcurrency: goroutines take from one count across a
// boundary; each period admits exactly its limit.
func TestCountExactUnderConcurrency(t *testing.T) {
	cal, _ := New(&rules.Quota{Period: "month"})
	var k Count
	jan, feb := at(t, "2026-01-31T23:59:59Z"), at(t, "2026-02-01T00:00:00Z")
	for _, instant := range []int64{jan, feb} {
		var wg sync.WaitGroup
		var mu sync.Mutex
		admitted := 0
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 500; i++ {
					if ok, _, _ := k.Take(cal, instant, 3, 1000); ok {
						mu.Lock()
						admitted += 3
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		if admitted != 999 {
			t.Fatalf("at %v: admitted %d units, want 999 (333 batches of 3 within 1000)", time.Unix(0, instant).UTC(), admitted)
		}
	}
}

// TestTableBounded: a table past its capacity refuses new values, and a
// new period empties it.
func TestTableBounded(t *testing.T) {
	cal, _ := New(&rules.Quota{Period: "day"})
	tb := NewTable(3)
	now := at(t, "2026-01-01T12:00:00Z")
	for _, v := range []string{"a", "b", "c"} {
		if o, _, _ := tb.Take(cal, v, now, 1, 2); o != Taken {
			t.Fatalf("%s: %v", v, o)
		}
	}
	if o, _, _ := tb.Take(cal, "d", now, 1, 2); o != Full {
		t.Fatalf("a fourth value: %v, want Full", o)
	}
	if o, _, _ := tb.Take(cal, "a", now, 1, 2); o != Taken {
		t.Fatalf("a known value: %v", o)
	}
	if o, used, _ := tb.Take(cal, "a", now, 1, 2); o != Over || used != 2 {
		t.Fatalf("a value at its limit: %v %d", o, used)
	}
	if o, _, _ := tb.Take(cal, "d", at(t, "2026-01-02T00:00:00Z"), 1, 2); o != Taken || tb.Len() != 1 {
		t.Fatalf("next day: %v, %d values", o, tb.Len())
	}
}

// TestTableMemoryPerValue measures what a local per-value quota holds per
// value counted in a period (go test -v -run TestTableMemoryPerValue
// ./internal/quota/ logs it): the figure docs/rules.md states for sizing
// Capacity.
func TestTableMemoryPerValue(t *testing.T) {
	cal, _ := New(&rules.Quota{Period: "month"})
	const n = 200000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tb := NewTable(n)
	now := at(t, "2026-07-01T00:00:00Z")
	buf := []byte("user-0000000") // 12 bytes, reused as the engine's key buffer is
	for i := 0; i < n; i++ {
		copy(buf[5:], fmt.Sprintf("%07d", i))
		tb.Take(cal, string(buf), now, 1, 10)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := int64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%d bytes a value counted (map entry, count and a copy of the value's 12-byte string)", per)
	if per > 200 {
		t.Errorf("%d bytes a value, more than the 200 docs/rules.md states", per)
	}
	runtime.KeepAlive(tb)
}

// TestTableCopiesKey: the table keeps its own copy of a new value's key,
// whose bytes the caller may reuse (the engine's key buffer).
func TestTableCopiesKey(t *testing.T) {
	cal, _ := New(&rules.Quota{Period: "day"})
	tb := NewTable(10)
	now := at(t, "2026-07-01T00:00:00Z")
	buf := []byte("ann")
	key := unsafe.String(&buf[0], len(buf))
	tb.Take(cal, key, now, 2, 2)
	copy(buf, "bob")
	if o, _, _ := tb.Take(cal, "ann", now, 1, 2); o != Over {
		t.Fatalf("ann after the caller's buffer changed: %v, want Over (2 of 2 used)", o)
	}
	if o, _, _ := tb.Take(cal, "bob", now, 1, 2); o != Taken {
		t.Fatalf("bob: %v, want Taken", o)
	}
}
