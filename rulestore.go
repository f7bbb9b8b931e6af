package sluice

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// Defaults of RuleStoreConfig.
const (
	// DefaultCheckInterval is the time between two reads of the version in
	// force when RuleStoreConfig.CheckInterval is zero.
	DefaultCheckInterval = 5 * time.Second
	// DefaultStoreTimeout bounds each call to a rule store or telemetry
	// when their configuration's Timeout is zero.
	DefaultStoreTimeout = 2 * time.Second
)

// RuleStoreConfig configures WithRuleStore.
type RuleStoreConfig struct {
	// App names the application whose rules the engine follows; empty
	// means ClusterConfig.App.
	App string
	// CheckInterval is the time, on the engine's clock, between two reads
	// of the version in force (which catch a notification the store lost)
	// and between two reports. Zero means DefaultCheckInterval.
	CheckInterval time.Duration
	// Timeout bounds each call to the store, and New's wait for the first
	// version. Zero means DefaultStoreTimeout.
	Timeout time.Duration
	// ReportTTL is how long the store keeps each report; zero means three
	// CheckIntervals (an instance that stops reporting drops out then).
	ReportTTL time.Duration
	// OnError, when set, is called with every failed store call (read,
	// watch or report), on a goroutine of the engine's; it must return
	// quickly. Refused versions are not errors of the store: they are in
	// RuleStoreStatus and the event stream.
	OnError func(error)
}

// WithRuleStore makes the engine follow the rules of one application in a
// rule store (see docs/rule-store.md): New loads the version in force
// (waiting for at most cfg.Timeout), then the engine loads every new
// version as LoadRules does, all or nothing, as soon as the store's
// Watch announces it and at the latest at the next read every
// CheckInterval. A version the engine refuses (invalid for it: a cluster
// rule without WithCluster, say) leaves the rules in force as they were.
//
// After every change and every CheckInterval the engine reports to the
// store which version it runs and which it refused and why
// (cluster.RuleReport, under InstanceID), and with WithCluster its
// heartbeats carry the version (cluster.Member.RuleVersion). Rule events
// carry the version (stat.Event.RuleVersion).
//
// When the store cannot be read at New, the engine starts with no rules
// and keeps trying; rules loaded meanwhile with LoadRules stay until a
// version arrives. Close stops following. An invalid cfg (no App) leaves
// the engine without a rule store: RuleStoreStatus says why.
func WithRuleStore(store cluster.RuleStore, cfg RuleStoreConfig) Option {
	return func(cf *config) {
		cf.ruleStore = store
		cf.ruleCfg = cfg
	}
}

// RuleStoreStatus is what an engine knows of its rule store
// (Engine.RuleStoreStatus).
type RuleStoreStatus struct {
	// App is the application followed.
	App string
	// Version is the version in force, 0 before the first.
	Version int64
	// Refused is the last version refused, 0 when the version in force is
	// newer, and RefusedErr why it was refused.
	Refused    int64
	RefusedErr error
	// Checks counts the reads of the store, Failures the store calls that
	// failed, and Err is the last failure (nil after a success).
	Checks, Failures int64
	Err              error
}

// RuleStoreStatus returns the state of the engine's rule store, and false
// when it has none. It is safe for concurrent use, also after Close.
func (eng *Engine) RuleStoreStatus() (RuleStoreStatus, bool) {
	f := eng.rules
	if f == nil {
		return RuleStoreStatus{}, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st, true
}

// WithInstanceID sets the instance's identity in its heartbeats, rule
// reports and telemetry (Engine.InstanceID); it must be unique among the
// live instances of the application. It takes precedence over
// ClusterConfig.InstanceID.
func WithInstanceID(id string) Option { return func(cf *config) { cf.instanceID = id } }

// InstanceID returns the instance's identity in its heartbeats, rule
// reports and telemetry: WithInstanceID's, else ClusterConfig.InstanceID,
// else the host name, the process ID and a random suffix.
func (eng *Engine) InstanceID() string { return eng.id }

// instanceID returns the instance's identity (id if set) and host name.
func instanceID(id string) (string, string) {
	host, _ := os.Hostname()
	if id == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		id = host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
	}
	return id, host
}

// startFleet starts following the rule store and publishing telemetry, as
// configured.
func (eng *Engine) startFleet(cf *config) {
	if cf.ruleStore != nil {
		eng.rules = startFollower(eng, cf.ruleStore, cf.ruleCfg, cf.cluster.App)
	}
	if cf.telemetry != nil {
		app := cf.teleCfg.App
		if app == "" {
			app = cf.ruleCfg.App
		}
		if app == "" {
			app = cf.cluster.App
		}
		eng.tele.Store(startPublisher(eng, cf.telemetry, cf.teleCfg, app))
	}
}

// stopFleet stops what startFleet started and waits for it.
func (eng *Engine) stopFleet() {
	if p := eng.tele.Load(); p != nil {
		p.close()
	}
	if eng.rules != nil {
		eng.rules.close()
	}
}

// ruleVersion returns the rule store's version in force, 0 without one.
func (eng *Engine) ruleVersion() int64 {
	if eng.rules == nil {
		return 0
	}
	eng.rules.mu.Lock()
	defer eng.rules.mu.Unlock()
	return eng.rules.st.Version
}

// follower follows one application's rules in a rule store. Its two
// goroutines (watch and run) stop at close.
type follower struct {
	eng      *Engine
	store    cluster.RuleStore
	app      string
	interval time.Duration
	timeout  time.Duration
	ttl      time.Duration
	onError  func(error)

	// syncMu serializes syncs (New's and run's).
	syncMu sync.Mutex
	mu     sync.Mutex // guards st
	st     RuleStoreStatus

	wake   chan struct{} // a notification: read the store now
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startFollower(eng *Engine, store cluster.RuleStore, cfg RuleStoreConfig, clusterApp string) *follower {
	f := &follower{
		eng: eng, store: store, app: cfg.App, interval: cfg.CheckInterval, timeout: cfg.Timeout,
		ttl: cfg.ReportTTL, onError: cfg.OnError, wake: make(chan struct{}, 1),
	}
	if f.app == "" {
		f.app = clusterApp
	}
	f.st.App = f.app
	switch {
	case f.app == "":
		f.st.Err = errors.New("sluice.WithRuleStore: RuleStoreConfig.App (or ClusterConfig.App) is required")
		return f
	case cfg.CheckInterval < 0 || cfg.Timeout < 0 || cfg.ReportTTL < 0:
		f.st.Err = errors.New("sluice.WithRuleStore: negative CheckInterval, Timeout or ReportTTL")
		return f
	}
	if f.interval == 0 {
		f.interval = DefaultCheckInterval
	}
	if f.timeout == 0 {
		f.timeout = DefaultStoreTimeout
	}
	if f.ttl == 0 {
		f.ttl = 3 * f.interval
	}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.check() // run reports it: New waits for one store call at most
	f.wg.Add(2)
	go f.watch()
	go f.run()
	return f
}

// close stops the goroutines and waits for them.
func (f *follower) close() {
	if f.cancel == nil {
		return // never started
	}
	f.cancel()
	f.wg.Wait()
}

func (f *follower) fail(err error) {
	f.mu.Lock()
	f.st.Failures++
	f.st.Err = err
	f.mu.Unlock()
	if f.onError != nil {
		f.onError(err)
	}
}

// watch keeps a Watch of the store open, waking run at each notification;
// after a failure it tries again an interval later.
func (f *follower) watch() {
	defer f.wg.Done()
	for {
		err := f.store.Watch(f.ctx, f.app, func(int64) {
			select {
			case f.wake <- struct{}{}:
			default:
			}
		})
		if f.ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("watch ended")
		}
		f.fail(fmt.Errorf("sluice: rule store %q: watch: %w", f.app, err))
		if !f.sleep() {
			return
		}
	}
}

// sleep waits one interval on the engine's clock; false when closed.
func (f *follower) sleep() bool {
	t := f.eng.clock.NewTimer(f.interval)
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
	t := f.eng.clock.NewTimer(f.interval)
	for {
		select {
		case <-f.wake:
			f.sync(false)
		case <-t.C():
			f.sync(true)
			t = f.eng.clock.NewTimer(f.interval)
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
	v, err := f.store.Current(ctx, f.app)
	cancel()
	if f.ctx.Err() != nil {
		return false
	}
	f.mu.Lock()
	f.st.Checks++
	known := v.Version == f.st.Version || v.Version == f.st.Refused
	f.mu.Unlock()
	if err != nil {
		f.fail(fmt.Errorf("sluice: rule store %q: %w", f.app, err))
		return false
	}
	f.mu.Lock()
	f.st.Err = nil
	f.mu.Unlock()
	if known || v.Version == 0 {
		return false
	}
	f.load(v)
	return true
}

// load loads version v, or records why it was refused.
func (f *follower) load(v cluster.RuleVersion) {
	set, err := rules.Decode(v.Doc, rules.YAML)
	if err == nil {
		err = f.eng.loadRuleSet(set, v.Version)
	} else {
		// Decode refused it before the engine saw it: tell the stream.
		f.eng.refusedVersion(err, v.Version)
	}
	if errors.Is(err, ErrClosed) {
		return
	}
	f.mu.Lock()
	if err != nil {
		f.st.Refused, f.st.RefusedErr = v.Version, err
	} else {
		f.st.Version, f.st.Refused, f.st.RefusedErr = v.Version, 0, nil
	}
	f.mu.Unlock()
	if err == nil && f.eng.cluster.hb != nil {
		f.eng.cluster.hb.SetRuleVersion(strconv.FormatInt(v.Version, 10))
	}
}

// report tells the store the versions run and refused.
func (f *follower) report() {
	f.mu.Lock()
	r := cluster.RuleReport{Instance: f.eng.id, Version: f.st.Version, Refused: f.st.Refused, At: time.Now()}
	if f.st.RefusedErr != nil {
		r.Err = f.st.RefusedErr.Error()
	}
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(f.ctx, f.timeout)
	err := f.store.Report(ctx, f.app, r, f.ttl)
	cancel()
	if err != nil && f.ctx.Err() == nil {
		f.fail(fmt.Errorf("sluice: rule store %q: report: %w", f.app, err))
	}
}

// refusedVersion reports on the event stream a version of a rule store
// that could not be decoded.
func (eng *Engine) refusedVersion(err error, version int64) {
	eng.events.Publish(stat.Event{Kind: stat.EventRulesRefused, At: eng.clock.Nanotime(), RuleKind: "set", Err: err, RuleVersion: version})
}
