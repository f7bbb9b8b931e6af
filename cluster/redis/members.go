package sluiceredis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice/cluster"
)

// Beat records m as alive for ttl (rounded up to the millisecond) and
// returns the number of live members of m.App, m included, in two round
// trips (the second records m.App in the index of applications, Apps, for
// ttl). The member's record (a hash) expires after ttl; the app's index (a
// sorted set of member IDs scored by their expiry on Redis's clock) drops
// expired IDs on every Beat and Members and itself expires with its
// longest-lived member, so a crashed instance leaves nothing behind.
//
// The count is the index's: a record deleted by hand counts until the next
// Members call notices it, or until its ttl would have ended.
func (s *Store) Beat(ctx context.Context, m cluster.Member, ttl time.Duration) (int, error) {
	switch {
	case m.App == "":
		return 0, errors.New("sluiceredis: beat: empty app")
	case m.ID == "":
		return 0, errors.New("sluiceredis: beat: empty member id")
	case ttl <= 0:
		return 0, fmt.Errorf("sluiceredis: beat: ttl %v not positive", ttl)
	}
	ms := (ttl + time.Millisecond - 1) / time.Millisecond
	started := ""
	if !m.Started.IsZero() {
		started = strconv.FormatInt(m.Started.UnixNano(), 10)
	}
	base := s.appBase(m.App)
	keys := []string{base + sufMembers, base + sufMember + m.ID}
	var n int
	err := s.bounded(ctx, "beat", func() error {
		var err error
		n, err = beatScript.Run(ctx, s.c, keys, m.ID, int64(ms), m.Host, started, m.RuleVersion).Int()
		if err != nil {
			return fmt.Errorf("sluiceredis: beat: %w", err)
		}
		if err := noteApp(ctx, s.c, s.appsKey(), m.App, ttl); err != nil {
			return fmt.Errorf("sluiceredis: beat: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Members returns the live members of app, ordered by ID, in one round
// trip. It drops from the index the members whose heartbeat expired or
// whose record is gone, so it never lists a dead instance.
func (s *Store) Members(ctx context.Context, app string) ([]cluster.Member, error) {
	if app == "" {
		return nil, errors.New("sluiceredis: members: empty app")
	}
	base := s.appBase(app)
	var vals []string
	err := s.bounded(ctx, "members", func() error {
		var err error
		vals, err = membersScript.Run(ctx, s.c, []string{base + sufMembers}, base+sufMember).StringSlice()
		if err != nil {
			return fmt.Errorf("sluiceredis: members: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(vals)%4 != 0 {
		return nil, fmt.Errorf("sluiceredis: members: malformed reply of %d fields", len(vals))
	}
	out := make([]cluster.Member, 0, len(vals)/4)
	for i := 0; i < len(vals); i += 4 {
		m := cluster.Member{ID: vals[i], App: app, Host: vals[i+1], RuleVersion: vals[i+3]}
		if vals[i+2] != "" {
			ns, err := strconv.ParseInt(vals[i+2], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("sluiceredis: members: member %q: bad start time %q", m.ID, vals[i+2])
			}
			m.Started = time.Unix(0, ns)
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b cluster.Member) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
