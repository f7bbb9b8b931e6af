package sluice

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	_ "time/tzdata" // the tests' zones, whatever the host has

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/rules"
)

func unixAt(t testing.TB, s string) int64 {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return v.UnixNano()
}

// enterQuota makes one entry of batch n at the clock's reading, exiting it
// at once; it returns the refusal, or nil.
func enterQuota(t testing.TB, g *Engine, res string, n int) *core.BlockError {
	t.Helper()
	p, err := g.Entry(res, WithBatch(n))
	if err == nil {
		p.Exit()
		return nil
	}
	var be *core.BlockError
	require.True(t, errors.As(err, &be), "%v", err)
	return be
}

// TestQuotaMonthBoundary is the plan's own example: 3 per month; at
// 2026-01-31 23:59:59 the 4th call is refused with RetryAfter 1 s; at
// 2026-02-01 00:00:00 a call passes.
func TestQuotaMonthBoundary(t *testing.T) {
	g, clk := newTestEngine(t, unixAt(t, "2026-01-15T10:00:00Z"))
	mustLoadFlow(t, g, rules.Flow{Resource: "api", Threshold: 3, Quota: &rules.Quota{Period: "month"}})
	for i := 0; i < 3; i++ {
		require.Nil(t, enterQuota(t, g, "api", 1), "call %d", i+1)
	}
	clk.Set(unixAt(t, "2026-01-31T23:59:59Z"))
	be := enterQuota(t, g, "api", 1)
	require.NotNil(t, be, "the 4th call of January")
	require.Equal(t, time.Second, be.RetryAfter)
	require.Equal(t, core.BlockFlow, be.Type)
	require.Equal(t, 3.0, be.Observed)
	require.Equal(t, 3.0, be.Threshold)
	require.Contains(t, be.Reason, "resets at 2026-02-01T00:00Z")
	clk.Set(unixAt(t, "2026-02-01T00:00:00Z"))
	require.Nil(t, enterQuota(t, g, "api", 1), "the first call of February")
}

// quotaBoundaryCases are the periods whose boundaries break naive code.
var quotaBoundaryCases = []struct {
	name  string
	q     rules.Quota
	start string // the period's first instant
	next  string // the next period's first instant
}{
	{"January, 31 days", rules.Quota{Period: "month"}, "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"},
	{"February, 28 days", rules.Quota{Period: "month"}, "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"},
	{"February of a leap year, 29 days", rules.Quota{Period: "month"}, "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z"},
	{"29 February", rules.Quota{Period: "day"}, "2028-02-29T00:00:00Z", "2028-03-01T00:00:00Z"},
	{"April, 30 days", rules.Quota{Period: "month"}, "2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z"},
	{"year boundary", rules.Quota{Period: "year"}, "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"},
	{"year boundary in Berlin", rules.Quota{Period: "year", Zone: "Europe/Berlin"}, "2025-12-31T23:00:00Z", "2026-12-31T23:00:00Z"},
	{"23-hour day in Berlin", rules.Quota{Period: "day", Zone: "Europe/Berlin"}, "2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"},
	{"25-hour day in Berlin", rules.Quota{Period: "day", Zone: "Europe/Berlin"}, "2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z"},
	{"25-hour day in New York", rules.Quota{Period: "day", Zone: "America/New_York"}, "2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z"},
	{"day without a midnight, Santiago", rules.Quota{Period: "day", Zone: "America/Santiago"}, "2026-09-06T04:00:00Z", "2026-09-07T03:00:00Z"},
	{"day before Samoa skipped a day", rules.Quota{Period: "day", Zone: "Pacific/Apia"}, "2011-12-29T10:00:00Z", "2011-12-30T10:00:00Z"},
	{"half hour at Lord Howe's change", rules.Quota{Period: "hour", Zone: "Australia/Lord_Howe"}, "2026-04-04T15:00:00Z", "2026-04-04T15:30:00Z"},
	{"week from Sunday", rules.Quota{Period: "week", WeekStart: "sunday"}, "2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"},
}

// TestQuotaBoundaries runs a quota through the boundaries that break naive
// code, on a manual clock: at the period's last nanosecond the quota is
// used up and a refusal's RetryAfter is exactly the time to the reset; at
// the next period's first instant a full quota's worth passes.
func TestQuotaBoundaries(t *testing.T) {
	cases := quotaBoundaryCases
	const limit = 5
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start, next := unixAt(t, c.start), unixAt(t, c.next)
			g, clk := newTestEngine(t, start)
			q := c.q
			mustLoadFlow(t, g, rules.Flow{Resource: "api", Threshold: limit, Quota: &q})
			require.Nil(t, enterQuota(t, g, "api", 2), "the period's first instant")
			clk.Set(next - int64(time.Second))
			require.Nil(t, enterQuota(t, g, "api", 3), "a second before the reset")
			clk.Set(next - 1)
			be := enterQuota(t, g, "api", 1)
			require.NotNil(t, be, "the quota is used up")
			require.Equal(t, time.Duration(1), be.RetryAfter, "the reset is a nanosecond away")
			clk.Set(next)
			require.Nil(t, enterQuota(t, g, "api", limit), "a whole quota at the reset")
			be = enterQuota(t, g, "api", 1)
			require.NotNil(t, be)
			// The next period is at least an hour long in every case.
			require.GreaterOrEqual(t, be.RetryAfter, 30*time.Minute)
		})
	}
}

// TestQuotaBatch: an entry costs its batch in units, and a batch larger
// than the quota is refused without a RetryAfter.
func TestQuotaBatch(t *testing.T) {
	g, _ := newTestEngine(t, unixAt(t, "2026-06-10T08:00:00Z"))
	mustLoadFlow(t, g, rules.Flow{Resource: "api", Threshold: 10, Quota: &rules.Quota{Period: "day"}})
	require.Nil(t, enterQuota(t, g, "api", 7))
	be := enterQuota(t, g, "api", 4)
	require.NotNil(t, be)
	require.Equal(t, 7.0, be.Observed)
	require.Equal(t, 16*time.Hour, be.RetryAfter)
	require.Nil(t, enterQuota(t, g, "api", 3))
	be = enterQuota(t, g, "api", 11)
	require.NotNil(t, be)
	require.Zero(t, be.RetryAfter, "no reset admits 11 of 10")
}

// TestQuotaExactUnderConcurrency: goroutines hammer a quota across a day
// boundary; each day admits exactly its quota.
func TestQuotaExactUnderConcurrency(t *testing.T) {
	g, clk := newTestEngine(t, unixAt(t, "2026-03-28T23:59:59Z"))
	mustLoadFlow(t, g, rules.Flow{Resource: "api", Threshold: 700, Quota: &rules.Quota{Period: "day"}})
	for _, day := range []string{"2026-03-28T23:59:59Z", "2026-03-29T00:00:00Z"} {
		clk.Set(unixAt(t, day))
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 300; i++ {
					if p, err := g.Entry("api", WithBatch(1+i%3)); err == nil {
						admitted.Add(int64(1 + i%3))
						p.Exit()
					}
				}
			}()
		}
		wg.Wait()
		// Batches of 1 to 3 against 700: at least 698 fit (the last refusals
		// may be batches of 2 or 3 with 1 or 2 units left), never more.
		require.LessOrEqual(t, admitted.Load(), int64(700), day)
		require.GreaterOrEqual(t, admitted.Load(), int64(698), day)
		require.Equal(t, admitted.Load()+1 > 700, enterQuota(t, g, "api", 1) != nil)
	}
}

// TestQuotaReload: a reload with the same period and zone keeps the count
// (a new Threshold applies to it); another zone or period starts a new
// count, and so does a rule removed and put back.
func TestQuotaReload(t *testing.T) {
	g, _ := newTestEngine(t, unixAt(t, "2026-05-20T12:00:00Z"))
	r := rules.Flow{Resource: "api", Threshold: 5, Quota: &rules.Quota{Period: "month"}}
	mustLoadFlow(t, g, r)
	require.Nil(t, enterQuota(t, g, "api", 4))

	r.ID, r.Threshold = "renamed", 6 // same period: count kept, 4 of 6 used
	mustLoadFlow(t, g, r)
	require.Nil(t, enterQuota(t, g, "api", 2))
	require.NotNil(t, enterQuota(t, g, "api", 1))

	r.Quota = &rules.Quota{Period: "month", Zone: "Europe/Berlin"} // another zone: a new count
	mustLoadFlow(t, g, r)
	require.Nil(t, enterQuota(t, g, "api", 6))
	require.NotNil(t, enterQuota(t, g, "api", 1))

	mustLoadFlow(t, g) // removed ...
	mustLoadFlow(t, g, r)
	require.Nil(t, enterQuota(t, g, "api", 6), "... and put back: a new count")
}

// TestQuotaRefusedRules: absurd sections are refused naming the rule and
// field, and the rules in force stay.
func TestQuotaRefusedRules(t *testing.T) {
	g, _ := newTestEngine(t, unixAt(t, "2026-05-20T12:00:00Z"))
	good := rules.Flow{Resource: "api", Threshold: 2, Quota: &rules.Quota{Period: "day"}}
	mustLoadFlow(t, g, good)
	require.Nil(t, enterQuota(t, g, "api", 1))
	for _, c := range []struct {
		r     rules.Flow
		field string
		msg   string
	}{
		{rules.Flow{Resource: "api", Threshold: 2, Quota: &rules.Quota{Period: "fortnight"}}, "Quota.Period", `unknown value "fortnight"`},
		{rules.Flow{Resource: "api", Threshold: 2, Quota: &rules.Quota{}}, "Quota.Period", "must be set"},
		{rules.Flow{Resource: "api", Threshold: 2, Quota: &rules.Quota{Period: "day", Zone: "Mars/Olympus_Mons"}}, "Quota.Zone", `unknown time zone "Mars/Olympus_Mons"`},
		{rules.Flow{Resource: "api", Threshold: 2, Quota: &rules.Quota{Period: "day", WeekStart: "monday"}}, "Quota.WeekStart", "only used with period week"},
		{rules.Flow{Resource: "api", Threshold: 2, Quota: &rules.Quota{Period: "week", WeekStart: "funday"}}, "Quota.WeekStart", `unknown day "funday"`},
		{rules.Flow{Resource: "api", Threshold: 2.5, Quota: &rules.Quota{Period: "day"}}, "Threshold", "whole number"},
		{rules.Flow{Resource: "api", Threshold: 2, StatInterval: time.Hour, Quota: &rules.Quota{Period: "day"}}, "StatInterval", "no meaning with a quota"},
		{rules.Flow{Resource: "api", Threshold: 2, Metric: rules.Concurrency, Quota: &rules.Quota{Period: "day"}}, "Quota", "qps metric"},
		{rules.Flow{Resource: "api", Threshold: 2, Throttle: &rules.Throttle{}, Quota: &rules.Quota{Period: "day"}}, "Quota", "takes no Throttle"},
	} {
		err := g.UpdateRules(func(s *rules.Set) { s.Flow = []rules.Flow{good, c.r} })
		var re *rules.Error
		require.True(t, errors.As(err, &re), "%v", err)
		require.Equal(t, 1, re.Index)
		require.Equal(t, c.field, re.Field, "%v", err)
		require.Contains(t, re.Reason, c.msg)
	}
	require.Nil(t, enterQuota(t, g, "api", 1), "the rule in force stays, with its count")
	require.NotNil(t, enterQuota(t, g, "api", 1))
}
