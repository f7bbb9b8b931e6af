// Package quota counts calendar quotas (rules.Quota): the calendar that
// draws a period's boundaries in a time zone, the count of a flow rule and
// the per-value counts of a param rule.
//
// Instants are Unix times in nanoseconds. The engine's clock is monotonic
// with an origin of its own; WallOffset turns its readings into Unix time.
package quota

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluice-go/sluice/internal/ruledef"
	"github.com/sluice-go/sluice/rules"
)

// Calendar draws the periods of one quota: [start, end) in Unix ns.
type Calendar struct {
	period string
	loc    *time.Location
	week   time.Weekday
	spec   string // "month@UTC", "week-sunday@America/New_York": part of store keys
}

var weekdays = [...]string{"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"}

// New returns the calendar of quota q, which rules validated.
func New(q *rules.Quota) (*Calendar, error) {
	loc, err := ruledef.LoadZone(q.Zone)
	if err != nil {
		return nil, err
	}
	c := &Calendar{period: q.Period, loc: loc, week: time.Monday}
	switch q.Period {
	case "hour", "day", "month", "year":
	case "week":
		if q.WeekStart != "" {
			c.week = -1
			for d, n := range weekdays {
				if n == q.WeekStart {
					c.week = time.Weekday(d)
				}
			}
			if c.week < 0 {
				return nil, fmt.Errorf("unknown week start %q", q.WeekStart)
			}
		}
	default:
		return nil, errors.New("unknown quota period " + strconv.Quote(q.Period))
	}
	zone := q.Zone
	if zone == "" {
		zone = "UTC"
	}
	c.spec = string(q.Period)
	if q.Period == "week" {
		c.spec += "-" + weekdays[c.week]
	}
	c.spec += "@" + zone
	return c, nil
}

// Spec names the calendar: period, week start and zone.
func (c *Calendar) Spec() string { return c.spec }

// Label names the period that starts at start: its first instant on the
// zone's clock, with the offset ("2026-02-01T00:00+01:00").
func (c *Calendar) Label(start int64) string {
	return time.Unix(0, start).In(c.loc).Format("2006-01-02T15:04Z07:00")
}

// wall returns the zone's clock reading at instant u, as Unix ns of the
// same reading in UTC.
func (c *Calendar) wall(u int64) int64 {
	_, off := time.Unix(0, u).In(c.loc).Zone()
	return u + int64(off)*int64(time.Second)
}

// slack bounds how far a zone's clock is from UTC (26 h: no zone ever
// passed ±16 h).
const slack = 26 * int64(time.Hour)

// cross returns the first instant in (lo, hi] whose zone clock reads at
// least w, given that lo's reads less and hi's at least w: by bisection,
// exact to the nanosecond wherever the zone's transitions fall (a gap at
// midnight, a skipped day, half-hour offsets).
func (c *Calendar) cross(lo, hi, w int64) int64 {
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if c.wall(mid) >= w {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// Bounds returns the period holding instant t: start <= t < end.
func (c *Calendar) Bounds(t int64) (start, end int64) {
	lt := time.Unix(0, t).In(c.loc)
	if c.period == "hour" {
		return c.hour(t, lt)
	}
	y, m, d := lt.Date()
	var s, e time.Time // the period's first and next day, as UTC midnights
	switch c.period {
	case "day":
		s, e = date(y, m, d), date(y, m, d+1)
	case "week":
		back := (int(lt.Weekday()) - int(c.week) + 7) % 7
		s, e = date(y, m, d-back), date(y, m, d-back+7)
	case "month":
		s, e = date(y, m, 1), date(y, m+1, 1)
	default:
		s, e = date(y, 1, 1), date(y+1, 1, 1)
	}
	ws, we := s.UnixNano(), e.UnixNano()
	// The zone's clock reads at least ws at t and less than we.
	return c.cross(ws-slack, t, ws), c.cross(t, we+slack, we)
}

func date(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }

// hour returns the hour of the zone's clock that holds t: a whole hour of
// the zone's current offset, cut where the offset changes (a zone moving by
// half an hour has a half hour there).
func (c *Calendar) hour(t int64, lt time.Time) (start, end int64) {
	const h = int64(time.Hour)
	_, off := lt.Zone()
	o := int64(off) * int64(time.Second)
	w := t + o
	hs := w - ((w%h)+h)%h - o
	he := hs + h
	zs, ze := lt.ZoneBounds()
	if !zs.IsZero() && zs.UnixNano() > hs && c.offset(zs.UnixNano()-1) != off {
		hs = zs.UnixNano()
	}
	if !ze.IsZero() && ze.UnixNano() < he && c.offset(ze.UnixNano()) != off {
		he = ze.UnixNano()
	}
	return hs, he
}

func (c *Calendar) offset(u int64) int {
	_, off := time.Unix(0, u).In(c.loc).Zone()
	return off
}
