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
// Members call notices it, or until its ttl would have ended. A member
// that closes leaves the index at once (Leave).
func (s *Store) Beat(ctx context.Context, m cluster.Member, ttl time.Duration) (int, error) {
	n, _, err := s.BeatEpoch(ctx, m, ttl)
	return n, err
}

var _ cluster.Leaver = (*Store)(nil)

// BeatEpoch is Beat that also returns the epoch of m.App's live set (see
// cluster.Leaver): a string made from Redis's clock when the set's index
// is created, which lives as long as the index. It changes when Redis lost
// the index (a restart without its data, or every member expired), never
// when members leave or expire while others beat.
func (s *Store) BeatEpoch(ctx context.Context, m cluster.Member, ttl time.Duration) (int, string, error) {
	switch {
	case m.App == "":
		return 0, "", errors.New("sluiceredis: beat: empty app")
	case m.ID == "":
		return 0, "", errors.New("sluiceredis: beat: empty member id")
	case ttl <= 0:
		return 0, "", fmt.Errorf("sluiceredis: beat: ttl %v not positive", ttl)
	}
	ms := (ttl + time.Millisecond - 1) / time.Millisecond
	started := ""
	if !m.Started.IsZero() {
		started = strconv.FormatInt(m.Started.UnixNano(), 10)
	}
	base := s.appBase(m.App)
	keys := []string{base + sufMembers, base + sufMember + m.ID, base + sufEpoch}
	var n int
	var epoch string
	err := s.bounded(ctx, "beat", func() error {
		res, err := beatScript.Run(ctx, s.c, keys, m.ID, int64(ms), m.Host, started, m.RuleVersion).Slice()
		if err != nil {
			return fmt.Errorf("sluiceredis: beat: %w", err)
		}
		if len(res) != 2 {
			return fmt.Errorf("sluiceredis: beat: malformed reply %v", res)
		}
		c, ok1 := res[0].(int64)
		e, ok2 := res[1].(string)
		if !ok1 || !ok2 {
			return fmt.Errorf("sluiceredis: beat: malformed reply %v", res)
		}
		if err := noteApp(ctx, s.c, s.appsKey(), m.App, ttl); err != nil {
			return fmt.Errorf("sluiceredis: beat: %w", err)
		}
		n, epoch = int(c), e
		return nil
	})
	if err != nil {
		return 0, "", err
	}
	return n, epoch, nil
}

// Leave removes m from the live members of m.App at once, in one round
// trip: its record is deleted and its ID leaves the index, so every
// member's next Beat counts it out. The engine calls it when it closes.
func (s *Store) Leave(ctx context.Context, m cluster.Member) error {
	switch {
	case m.App == "":
		return errors.New("sluiceredis: leave: empty app")
	case m.ID == "":
		return errors.New("sluiceredis: leave: empty member id")
	}
	base := s.appBase(m.App)
	keys := []string{base + sufMembers, base + sufMember + m.ID}
	return s.bounded(ctx, "leave", func() error {
		if err := leaveScript.Run(ctx, s.c, keys, m.ID).Err(); err != nil {
			return fmt.Errorf("sluiceredis: leave: %w", err)
		}
		return nil
	})
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
