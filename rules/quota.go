package rules

import (
	"cmp"
	"math"
	"strings"

	"github.com/sluice-go/sluice/internal/ruledef"
)

// Quota makes a flow or param rule a calendar quota: at most Threshold
// units in each calendar period (an hour, a day, a week, a month or a
// year) of a time zone, the count going back to zero at the period's
// boundary ("10,000 calls per month, reset on the 1st at 00:00 UTC"). An
// entry costs its batch (sluice.WithBatch) in units; a refusal's
// RetryAfter is the time to the next boundary. A flow quota needs the qps
// metric, the direct strategy and the reject behavior, with no
// StatInterval; a param quota the qps metric and the reject behavior, with
// no Duration nor Burst. A cluster section keeps the count in the cluster
// store (one key per period, and per value for a param rule), where it
// survives restarts; a local quota's count is lost with its process.
type Quota struct {
	// Period is the calendar period the count runs over: "hour", "day"
	// (from midnight to midnight, 23 or 25 hours at a daylight-saving
	// change), "week" (from midnight of WeekStart), "month" (from midnight
	// of the 1st) or "year" (from midnight of 1 January). Required.
	Period string `json:"period,omitempty" yaml:"period,omitempty"`
	// Zone is the IANA time zone whose calendar draws the boundaries
	// ("Europe/Berlin"); "" means UTC. It must be known to the process
	// (the host's zone database, or a program that imports time/tzdata).
	Zone string `json:"zone,omitempty" yaml:"zone,omitempty"`
	// WeekStart is, for a weekly quota, the day the week begins: "monday"
	// (the default, ISO 8601) to "sunday". It must be empty otherwise.
	WeekStart string `json:"weekStart,omitempty" yaml:"weekStart,omitempty"`
}

// periods are the values of Quota.Period.
var periods = [...]string{"hour", "day", "week", "month", "year"}

// weekdays are the values of Quota.WeekStart, in time.Weekday order.
var weekdays = [...]string{"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"}

// validate checks the quota section of a rule whose threshold is t.
func (q *Quota) validate(c *check, t float64) {
	enum(c, "Quota.Period", q.Period, false, periods[:]...)
	c.fail(len(q.Zone) > 128, "Quota.Zone",
		"must be an IANA time zone name (such as Europe/Berlin), got %q", clip(q.Zone, 40))
	if c.err == nil && q.Zone != "" {
		_, err := ruledef.LoadZone(q.Zone)
		c.fail(err != nil, "Quota.Zone", "unknown time zone %q (want an IANA name such as Europe/Berlin, or empty "+
			"for UTC; a host without a zone database needs a program that imports time/tzdata)", q.Zone)
	}
	known := false
	for _, d := range weekdays {
		known = known || q.WeekStart == d
	}
	c.fail(q.WeekStart != "" && q.Period != "week", "Quota.WeekStart", "is only used with period week; leave it empty")
	c.fail(q.WeekStart != "" && !known, "Quota.WeekStart", "unknown day %q (want one of %s)",
		clip(q.WeekStart, 40), strings.Join(weekdays[:], ", "))
	c.fail(t != math.Trunc(t), "Threshold", "must be a whole number of units per %s for a quota, got %v", q.Period, t)
}

// validateQuota checks a flow rule's quota section, if it has one: the
// section itself and the other fields a quota leaves out.
func (r *Flow) validateQuota(c *check) {
	q := r.Quota
	if q == nil || c.err != nil {
		return
	}
	q.validate(c, r.Threshold)
	c.fail(cmp.Or(r.Metric, QPS) != QPS, "Quota",
		"needs the qps metric (a quota counts admissions, not requests in flight)")
	c.fail(r.WarmUp != nil || r.Bucket != nil, "Quota",
		"takes neither WarmUp nor Bucket (a quota counts units per calendar period)")
	c.fail(r.Throttle != nil, "Quota", "takes no Throttle (a request cannot wait for the next period)")
	c.fail(r.StatInterval != 0, "StatInterval",
		"has no meaning with a quota (Quota.Period is the interval); leave it zero")
	c.fail(r.Exact, "Exact", "has no meaning with a quota (a quota's count is exact); leave it false")
	c.fail(r.RefResource != "", "RefResource", "a quota counts the rule's own resource only")
	c.fail(len(r.Tiers) > 0, "Tiers", "have no meaning with a quota")
	c.fail(r.Adaptive != nil, "Adaptive", "has no meaning with a quota")
	c.fail(r.PriorityWait != 0, "PriorityWait", "has no meaning with a quota (the next bucket is the next period)")
	c.fail(r.Cluster != nil && r.Cluster.Mode == ClusterPerInstance, "Cluster.Mode",
		"must be total for a quota (the store keeps the fleet's count)")
	c.fail(r.Cluster != nil && r.Cluster.Leases, "Cluster.Leases",
		"has no meaning with a quota (every entry asks the store)")
}

// validateQuota checks a param rule's quota section, if it has one.
func (r *Param) validateQuota(c *check) {
	q := r.Quota
	if q == nil || c.err != nil {
		return
	}
	q.validate(c, float64(r.Threshold))
	c.fail(cmp.Or(r.Metric, QPS) != QPS, "Quota",
		"needs the qps metric (a quota counts admissions, not requests in flight)")
	c.fail(r.Throttle != nil, "Quota", "takes no Throttle (a request cannot wait for the next period)")
	c.fail(r.Duration != 0, "Duration", "has no meaning with a quota (Quota.Period is the interval); leave it zero")
	c.fail(r.Burst != 0, "Burst", "has no meaning with a quota (Threshold is the whole period's budget); leave it zero")
	c.fail(r.Cluster != nil && r.Cluster.Mode == ClusterPerInstance, "Cluster.Mode",
		"must be total for a quota (the store keeps the fleet's count)")
	c.fail(r.Cluster != nil && r.Cluster.Leases, "Cluster.Leases",
		"has no meaning with a quota (every entry asks the store)")
}

// quotaKey is what makes a quota distinct in Set.Validate's duplicate
// check: its section, defaults written out (the zero Quota for none).
func quotaKey(q *Quota) Quota {
	if q == nil {
		return Quota{}
	}
	k := *q
	if k.Period == "week" {
		k.WeekStart = cmp.Or(k.WeekStart, "monday")
	}
	return k
}
