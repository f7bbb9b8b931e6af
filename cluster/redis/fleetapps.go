package sluiceredis

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxFleetApps bounds the index of the applications whose instances
// publish frames or heartbeats (Telemetry.Apps, Store.Apps): beyond it the
// names soonest to expire are dropped, so that no number of names sent
// grows the index, or a reader's memory, past it.
const maxFleetApps = 1000

// noteApp records app in the index at key for ttl, in one round trip.
func noteApp(ctx context.Context, c redis.UniversalClient, key, app string, ttl time.Duration) error {
	ms := (ttl + time.Millisecond - 1) / time.Millisecond
	return fleetNoteScript.Run(ctx, c, []string{key}, app, int64(ms), maxFleetApps).Err()
}

// fleetApps returns the unexpired names of the index at key, sorted.
func fleetApps(ctx context.Context, c redis.UniversalClient, key string) ([]string, error) {
	apps, err := fleetAppsScript.Run(ctx, c, []string{key}, maxFleetApps).StringSlice()
	if err != nil {
		return nil, err
	}
	slices.Sort(apps)
	return apps, nil
}

func (t *Telemetry) appsKey() string { return t.prefix + ":tm:apps" }

// Apps returns the applications whose instances published a frame that is
// still kept (within the ttl of their last Publish), sorted, at most 1,000
// (the index drops the names soonest to expire beyond that).
func (t *Telemetry) Apps(ctx context.Context) ([]string, error) {
	apps, err := fleetApps(ctx, t.c, t.appsKey())
	if err != nil {
		return nil, fmt.Errorf("sluiceredis: telemetry apps: %w", err)
	}
	return apps, nil
}

func (s *Store) appsKey() string { return s.prefix + appInfix + "apps" }

// Apps returns the applications with a live heartbeat (Beat), sorted, at
// most 1,000 (the index drops the names soonest to expire beyond that).
func (s *Store) Apps(ctx context.Context) ([]string, error) {
	var apps []string
	err := s.bounded(ctx, "apps", func() error {
		var err error
		apps, err = fleetApps(ctx, s.c, s.appsKey())
		if err != nil {
			return fmt.Errorf("sluiceredis: apps: %w", err)
		}
		return nil
	})
	return apps, err
}

// Retire deletes app's rules: the version in force, the history, the
// versions it holds and the instances' reports, and takes app off Apps.
// The application's audit entries move to the list of entries of no
// application, as far as that list has room (they never push its own
// entries out), and an entry of action "retire" by user, naming the
// version that was in force and holding its rules, goes to its head.
// Engines that follow app keep the rules they run. A save racing a
// retirement may leave its version in the store but off Apps until the
// next save.
func (s *RuleStore) Retire(ctx context.Context, app, user string) error {
	if err := checkName("app", app); err != nil {
		return err
	}
	if err := checkName("user", user); err != nil {
		return err
	}
	cur, err := s.Current(ctx, app)
	if err != nil {
		return err
	}
	k := s.keys(app)
	kept, err := s.c.LRange(ctx, k.audit, 0, int64(s.auditLen)-1).Result()
	if err != nil {
		return fmt.Errorf("sluiceredis: retire %q: %w", app, err)
	}
	if len(kept) > 0 {
		room, err := s.c.LLen(ctx, s.auditKey()).Result()
		if err != nil {
			return fmt.Errorf("sluiceredis: retire %q: %w", app, err)
		}
		if n := int64(s.auditLen) - room; n > 0 {
			kept = kept[:min(int64(len(kept)), n)]
			args := make([]any, len(kept))
			for i, v := range kept {
				args[i] = v
			}
			if err := s.c.RPush(ctx, s.auditKey(), args...).Err(); err != nil {
				return fmt.Errorf("sluiceredis: retire %q: %w", app, err)
			}
		}
	}
	if err := retireScript.Run(ctx, s.c, []string{k.cur, k.hist, k.rep, k.repd, k.audit}, k.vstem).Err(); err != nil {
		return fmt.Errorf("sluiceredis: retire %q: %w", app, err)
	}
	if err := s.c.SRem(ctx, s.appsKey(), app).Err(); err != nil {
		return fmt.Errorf("sluiceredis: retire %q: %w", app, err)
	}
	b, err := json.Marshal(auditJSON{User: user, App: app, Action: "retire", Detail: cut(retireDetail(cur.Version, cur.Doc), maxText)})
	if err != nil {
		return err
	}
	if err := auditScript.Run(ctx, s.c, []string{s.auditKey()}, cur.Version, b, s.auditLen).Err(); err != nil {
		return fmt.Errorf("sluiceredis: retire %q: audit: %w", app, err)
	}
	return nil
}

// retireDetail is the detail of a retirement's audit entry.
func retireDetail(version int64, doc []byte) string {
	if version == 0 {
		return "retired; it had no version in force"
	}
	return "retired; version " + strconv.FormatInt(version, 10) + " was in force:\n" + string(doc)
}
