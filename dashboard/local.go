package dashboard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/rules"
)

// localStore is the rule store of the dashboard's own engine
// (Config.Engine): the versions of its application go into the engine as
// they are saved, all or nothing. Other applications of the store pass
// through.
type localStore struct {
	cluster.RuleStore
	eng *sluice.Engine
	app string

	save sync.Mutex // serializes the application's saves

	mu sync.Mutex // guards st
	st localState
}

// localState is what the engine runs of the store's versions.
type localState struct {
	// Version is the version the engine runs, 0 when it runs none (the
	// version in force at start was refused).
	Version int64
	// Refused is the version in force at start when the engine refused
	// it, and Err why; 0 once a version is saved.
	Refused int64
	Err     string
}

// storeTimeout bounds the store calls New makes, and those that repair
// the engine after a failed save whose request has ended.
const storeTimeout = 10 * time.Second

// start loads the version in force into the engine, or, when the
// application has none, seeds the store with the engine's rules as
// version 1. A version the engine refuses leaves the engine's rules as
// they were; the state says so (the application's page shows it) and the
// audit log records it.
func (l *localStore) start(ctx context.Context) error {
	cur, err := l.RuleStore.Current(ctx, l.app)
	if err != nil {
		return err
	}
	if cur.Version == 0 {
		doc, err := rules.Encode(l.eng.Rules(), rules.YAML)
		if err != nil {
			return err
		}
		v, err := l.RuleStore.Save(ctx, l.app, 0, cluster.RuleVersion{Doc: doc, Author: "engine", Comment: "rules in force at start"})
		if err != nil {
			return err
		}
		l.set(localState{Version: v.Version})
		return nil
	}
	set, err := rules.Decode(cur.Doc, rules.YAML)
	if err == nil {
		err = l.eng.LoadRules(set)
	}
	if err != nil {
		if errors.Is(err, sluice.ErrClosed) {
			return err
		}
		l.set(localState{Refused: cur.Version, Err: err.Error()})
		return l.RuleStore.Audit(ctx, cluster.AuditEntry{User: "engine", App: l.app, Action: "refused", Version: cur.Version,
			Detail: fmt.Sprintf("the engine refused version %d at start and kept the rules it was made with: %v", cur.Version, err)})
	}
	l.set(localState{Version: cur.Version})
	return nil
}

func (l *localStore) set(st localState) {
	l.mu.Lock()
	l.st = st
	l.mu.Unlock()
}

func (l *localStore) state() localState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st
}

// Save implements cluster.RuleStore. A version of the engine's
// application is loaded into the engine first: one the engine refuses is
// not written (the error wraps cluster.ErrInvalidRules and the engine's
// reason). Then it is written; when the store does not take it (a
// conflict, a failure), the engine goes back to the rules it ran before.
func (l *localStore) Save(ctx context.Context, app string, base int64, v cluster.RuleVersion) (cluster.RuleVersion, error) {
	if app != l.app {
		return l.RuleStore.Save(ctx, app, base, v)
	}
	set, err := rules.Decode(v.Doc, rules.YAML)
	if err != nil {
		return cluster.RuleVersion{}, fmt.Errorf("dashboard: save %s: %w: %w", app, cluster.ErrInvalidRules, err)
	}
	l.save.Lock()
	defer l.save.Unlock()
	cur, err := l.RuleStore.Current(ctx, app)
	if err != nil {
		return cluster.RuleVersion{}, err
	}
	if cur.Version != base {
		return cluster.RuleVersion{}, cluster.ErrConflict
	}
	prev := l.eng.Rules()
	if err := l.eng.LoadRules(set); err != nil {
		if errors.Is(err, sluice.ErrClosed) {
			return cluster.RuleVersion{}, err
		}
		return cluster.RuleVersion{}, fmt.Errorf("%w: the engine refused it: %w", cluster.ErrInvalidRules, err)
	}
	saved, err := l.RuleStore.Save(ctx, app, base, v)
	if err != nil {
		// A store that failed after its commit has the version in force:
		// then the engine keeps it.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
		now, cerr := l.RuleStore.Current(rctx, app)
		cancel()
		if cerr == nil && now.Version == base+1 && bytes.Equal(now.Doc, v.Doc) {
			l.set(localState{Version: now.Version})
			return now, nil
		}
		if rerr := l.eng.LoadRules(prev); rerr != nil && !errors.Is(rerr, sluice.ErrClosed) {
			err = errors.Join(err, fmt.Errorf("dashboard: the engine's previous rules: %w", rerr))
		}
		return cluster.RuleVersion{}, err
	}
	l.set(localState{Version: saved.Version})
	return saved, nil
}
