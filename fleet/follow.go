package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/fleetlink"
	"github.com/sluice-go/sluice/rules"
)

// follower follows one application's rules in a rule store. Its two
// goroutines (watch and run) stop at close.
type follower struct {
	m        *Member
	store    cluster.RuleStore
	format   rules.Format // of the store's documents: YAML, or a rule file's
	path     string       // a rule file's, which its refusals name
	interval time.Duration
	timeout  time.Duration
	ttl      time.Duration
	loadFn   func(rules.Set) error // Config.Load, nil for the engine's LoadRules

	// syncMu serializes checks (Join's and run's).
	syncMu sync.Mutex
	mu     sync.Mutex // guards st
	st     followState

	wake   chan struct{} // a notification: read the store now
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// followState is the follower's part of Status, and the failure told last.
type followState struct {
	version, refused int64
	refusedErr       error
	checks, failures int64
	err              error
	told             string
}

func startFollower(m *Member, cfg Config) *follower {
	f := &follower{
		m: m, store: cfg.Rules, format: rules.YAML, interval: cfg.CheckInterval, timeout: cfg.Timeout,
		ttl: cfg.ReportTTL, loadFn: cfg.Load, wake: make(chan struct{}, 1),
	}
	if fr, ok := cfg.Rules.(*fileRules); ok {
		f.format, f.path = fr.format, fr.path
		if f.interval == 0 {
			f.interval = fileCheckInterval
		}
	}
	if f.interval == 0 {
		f.interval = defaultCheckInterval
	}
	if f.ttl == 0 {
		f.ttl = 3 * f.interval
	}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.check() // run reports it: Join waits for one store call at most
	f.wg.Add(2)
	go f.watch()
	go f.run()
	return f
}

// close stops the goroutines and waits for them.
func (f *follower) close() {
	f.cancel()
	f.wg.Wait()
}

func (f *follower) fail(err error) {
	f.mu.Lock()
	f.st.failures++
	f.st.err = err
	told := f.st.told
	f.mu.Unlock()
	told = f.m.tell(told, err)
	f.mu.Lock()
	f.st.told = told
	f.mu.Unlock()
}

// watch keeps a Watch of the store open, waking run at each notification,
// and once each Watch listens (its changed(0)): a version saved between
// the follower's read of the store and the Watch's start is loaded then,
// not at the next check an interval later. After a failure it tries again
// an interval later.
func (f *follower) watch() {
	defer f.wg.Done()
	for {
		err := f.store.Watch(f.ctx, f.m.app, func(int64) {
			select {
			case f.wake <- struct{}{}:
			default:
			}
		})
		if f.ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errWatchEnded
		}
		f.fail(fmt.Errorf("fleet: rule store %q: watch: %w", f.m.app, err))
		if !f.sleep() {
			return
		}
	}
}

// sleep waits one interval on the engine's clock; false when closed.
func (f *follower) sleep() bool {
	t := f.m.eng.Clock().NewTimer(f.interval)
	select {
	case <-t.C():
		return true
	case <-f.ctx.Done():
		t.Stop()
		return false
	}
}

// run reads the store at each notification and every interval, and
// reports every interval.
func (f *follower) run() {
	defer f.wg.Done()
	f.report()
	clk := f.m.eng.Clock()
	t := clk.NewTimer(f.interval)
	for {
		select {
		case <-f.wake:
			f.sync(false)
		case <-t.C():
			f.sync(true)
			t = clk.NewTimer(f.interval)
		case <-f.ctx.Done():
			t.Stop()
			return
		}
	}
}

// sync reads the version in force and loads it when it is new; it reports
// after a change, or always with report set.
func (f *follower) sync(report bool) {
	if f.check() || report {
		f.report()
	}
}

// check reads the version in force and loads it when it is new, and
// reports whether it loaded or refused a version.
func (f *follower) check() bool {
	f.syncMu.Lock()
	defer f.syncMu.Unlock()
	ctx, cancel := context.WithTimeout(f.ctx, f.timeout)
	v, err := f.store.Current(ctx, f.m.app)
	cancel()
	if f.ctx.Err() != nil {
		return false
	}
	f.mu.Lock()
	f.st.checks++
	known := v.Version == f.st.version || v.Version == f.st.refused
	f.mu.Unlock()
	if err != nil {
		f.fail(fmt.Errorf("fleet: rule store %q: %w", f.m.app, err))
		return false
	}
	f.mu.Lock()
	f.st.err, f.st.told = nil, ""
	f.mu.Unlock()
	if known || v.Version == 0 {
		return false
	}
	return f.load(v)
}

// load loads version v, or records why it was refused; false when the
// engine is closed.
func (f *follower) load(v cluster.RuleVersion) bool {
	set, err := rules.Decode(v.Doc, f.format)
	if err == nil && f.loadFn != nil {
		err = f.loadFn(set)
	} else if err == nil {
		err = f.m.eng.LoadRules(set)
	}
	if errors.Is(err, sluice.ErrClosed) {
		return false
	}
	if err != nil && f.path != "" {
		err = &rules.PathError{Path: f.path, Err: err}
	}
	f.mu.Lock()
	if err != nil {
		f.st.refused, f.st.refusedErr = v.Version, err
	} else {
		f.st.version, f.st.refused, f.st.refusedErr = v.Version, 0, nil
	}
	f.mu.Unlock()
	if err == nil {
		fleetlink.SetRuleVersion(f.m.eng, v.Version)
	}
	return true
}

// version returns the version in force.
func (f *follower) version() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.version
}

// report tells the store the versions run and refused.
func (f *follower) report() {
	f.mu.Lock()
	r := cluster.RuleReport{Instance: f.m.id, Version: f.st.version, Refused: f.st.refused, At: time.Now()}
	if f.st.refusedErr != nil {
		r.Err = f.st.refusedErr.Error()
	}
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(f.ctx, f.timeout)
	err := f.store.Report(ctx, f.m.app, r, f.ttl)
	cancel()
	if err != nil && f.ctx.Err() == nil {
		f.fail(fmt.Errorf("fleet: rule store %q: report: %w", f.m.app, err))
	}
}
