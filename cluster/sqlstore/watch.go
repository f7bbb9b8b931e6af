package sqlstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// notifyChannel is the PostgreSQL channel the schema's trigger notifies,
// with the payload "<version> <app>", whenever an application's version in
// force changes (also by a statement made outside the store).
const notifyChannel = "sluice_rules"

// Watch calls changed, on the calling goroutine, with the version of app's
// rules each time a newer one is in force, until ctx ends; it returns ctx's
// error then, or the error of its first read of the version in force. It
// calls changed(0) after that first read: every version saved later is
// newer than the one it read, and is seen by a notification or a poll.
//
// On MySQL it reads the version in force every Config.PollInterval (200 ms
// by default). On PostgreSQL it listens on a connection of its own for the
// notifications of the schema's trigger, and reads the version in force
// every Config.PollInterval (2 s by default) and at once whenever the
// notification connection is back after a loss, so that a version saved
// while it was down is not missed. A lost connection is told to
// Config.OnWatchError and tried again (100 ms, doubling to 5 s); Watch
// goes on meanwhile.
func (s *Store) Watch(ctx context.Context, app string, changed func(version int64)) error {
	if err := checkName("app", app); err != nil {
		return err
	}
	last, err := s.currentVersion(ctx, app)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return wrap(ctx, "watch", app, err)
	}
	notes := make(chan int64, 16)
	var wg sync.WaitGroup
	lctx, stop := context.WithCancel(ctx)
	defer func() { stop(); wg.Wait() }()
	if s.d.pgConfig != nil {
		wg.Add(1)
		go func() { defer wg.Done(); s.listen(lctx, app, notes) }()
	}
	tick := time.NewTicker(s.poll)
	defer tick.Stop()
	changed(0) // listening: see cluster.RuleStore's Watch
	failing := false
	see := func(v int64) {
		if v > last {
			last = v
			changed(v)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-notes:
			// A notification (or the notification connection back) is a
			// hint: the version in force is read, so that a notification
			// of another schema's table of the same name, or one made by
			// hand, never passes for a version.
			tick.Reset(s.poll)
			if v, err := s.currentVersion(ctx, app); err == nil {
				see(v)
			}
		case <-tick.C:
			v, err := s.currentVersion(ctx, app)
			if err != nil {
				if ctx.Err() == nil && !failing {
					failing = true
					s.tellWatch(app, fmt.Errorf("sqlstore: watch %q: reading the version in force: %w", app, err))
				}
				continue
			}
			if failing {
				failing = false
				s.tellWatch(app, nil)
			}
			see(v)
		}
	}
}

func (s *Store) tellWatch(app string, err error) {
	if s.onWatch != nil {
		s.onWatch(app, err)
	}
}

// listen keeps a LISTEN connection open until ctx ends and sends the
// versions of app it is notified of on notes, and 0 each time it has
// (re)connected, so that Watch reads the version in force. Losses are told
// to OnWatchError; it dials again after a pause (100 ms, doubling to 5 s).
func (s *Store) listen(ctx context.Context, app string, notes chan<- int64) {
	pause := 100 * time.Millisecond
	for first := true; ctx.Err() == nil; first = false {
		err := s.listenOnce(ctx, app, notes, first)
		if ctx.Err() != nil {
			return
		}
		s.tellWatch(app, fmt.Errorf("sqlstore: watch %q: notification connection lost (catching up by polling): %w", app, err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, 5*time.Second)
	}
}

// listenOnce is one notification connection, from its dial to its loss.
func (s *Store) listenOnce(ctx context.Context, app string, notes chan<- int64, first bool) error {
	dctx, cancel := context.WithTimeout(ctx, s.timeout)
	conn, err := pgx.ConnectConfig(dctx, s.d.pgConfig.Copy())
	cancel()
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		return err
	}
	if !first {
		s.tellWatch(app, nil)
	}
	select { // catch up on what was saved before the LISTEN took effect
	case notes <- 0:
	case <-ctx.Done():
		return ctx.Err()
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		num, name, ok := strings.Cut(n.Payload, " ")
		v, perr := strconv.ParseInt(num, 10, 64)
		if !ok || perr != nil || name != app {
			continue
		}
		select {
		case notes <- v:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
