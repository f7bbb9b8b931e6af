// Package fleet joins an engine to the fleet of its application: it
// follows the application's rules in a rule store (or a plain rule file)
// and publishes the engine's figures to a telemetry store, both under one
// identity, the application and the instance.
//
//	m, err := fleet.Join(eng, fleet.Config{App: "shop", Rules: store, Telemetry: tel})
//	if err != nil { ... }
//	defer m.Close() // before the engine's Close
//
// Everything runs on goroutines of the Member, which Close stops; the
// request path never waits for them. Joining uses the engine's public
// methods (LoadRules, InstanceID, Clock, SystemMetrics, ClusterStatus,
// CircuitBreakerStates) and, for what they do not give cheaply, two reads
// and one write the engine keeps unexported: its busiest resources of the
// last second and its shedding flag (for frames), and the rule version
// its heartbeats carry (cluster.Member.RuleVersion).
package fleet

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/fleetlink"
	"github.com/sluice-go/sluice/rules"
)

// Defaults of Config.
const (
	defaultCheckInterval = 5 * time.Second
	fileCheckInterval    = time.Second // a stat costs next to nothing
	defaultTimeout       = 2 * time.Second
	defaultKeep          = 300 // frames: five minutes
	defaultMaxResources  = 50
	publishTimeout       = 500 * time.Millisecond // less than the second between two frames
)

// Config says whom an engine joins as (App and Instance, once for all it
// does) and what it does there: follow Rules, publish to Telemetry, or
// both. App and one of Rules or Telemetry are required; the rest has
// defaults.
type Config struct {
	// App names the application: the rules followed are App's, and the
	// reports and frames are filed under App. Required.
	App string
	// Instance names the instance among the live ones of App in its rule
	// reports and frames. Empty means the engine's InstanceID
	// (sluice.ClusterConfig.InstanceID, else a name made of the host, the
	// process and a random suffix), which its heartbeats carry too.
	Instance string

	// Rules, when set, is the rule store whose version in force for App
	// the engine follows (see Join); RuleFile makes one of a rule file.
	Rules cluster.RuleStore
	// CheckInterval is the time, on the engine's clock, between two reads
	// of the version in force (which catch a notification the store lost)
	// and between two reports. Zero means 5 s, and 1 s for a RuleFile.
	CheckInterval time.Duration
	// Timeout bounds each call to a store, and Join's wait for the first
	// version; zero means 2 s. A Publish gets at most 500 ms, less than the
	// second between two frames.
	Timeout time.Duration
	// ReportTTL is how long the rule store keeps each report; zero means
	// three CheckIntervals (an instance that stops reporting drops out
	// then).
	ReportTTL time.Duration
	// Load, when set, puts each version's rules in force in place of the
	// engine's LoadRules: for a program that checks more than the engine
	// does, or keeps something built from the rules beside them (the
	// rate-limit service sluice-rls, which refuses rules its decisions
	// cannot enforce and indexes the resources). It must be all or
	// nothing, as LoadRules is; its error refuses the version (Status,
	// the reports).
	Load func(rules.Set) error

	// Telemetry, when set, receives a cluster.Frame once a second of the
	// engine's clock (see Join).
	Telemetry cluster.Telemetry
	// Keep is the number of frames (seconds) the telemetry store keeps of
	// the instance; zero means 300.
	Keep int
	// TTL is how long after the last frame the telemetry store forgets
	// the instance; zero means Keep seconds.
	TTL time.Duration
	// MaxResources is the most resources a frame holds, the busiest by
	// passed plus refused requests in the frame's second; zero means 50.
	MaxResources int

	// OnError, when set, is told of failed store calls (reads, watches,
	// reports, publishes), on a goroutine of the Member's; it must return
	// quickly. A failure like the one told last (same text) is counted in
	// Status but not told again. Versions the engine refuses are not
	// failures of the store: they are in Status.
	OnError func(error)
}

// Status is what a Member knows of its stores (Member.Status).
type Status struct {
	// App and Instance are the identity the Member joined with.
	App, Instance string
	// Version is the rule version in force, 0 before the first (and
	// without Rules). Refused is the last version refused, 0 when the
	// version in force is newer, and RefusedErr why it was refused (the
	// decoder's or LoadRules's error, naming the rule and field).
	Version, Refused int64
	RefusedErr       error
	// Checks counts the reads of the rule store, Failures its calls that
	// failed, and Err is the last failure (nil after a success).
	Checks, Failures int64
	Err              error
	// Published counts the frames the telemetry store accepted,
	// PublishFailures those it did not, and PublishErr is the last failure
	// (nil after a success).
	Published, PublishFailures int64
	PublishErr                 error
}

// Member is an engine joined to its fleet. Its methods are safe for
// concurrent use.
type Member struct {
	eng      *sluice.Engine
	app, id  string
	onError  func(error)
	follower *follower  // nil without Config.Rules
	pub      *publisher // nil without Config.Telemetry

	closeOnce sync.Once
}

// Join joins eng to the fleet of cfg.App, as cfg.Instance.
//
// With cfg.Rules, the engine follows App's rules in the store: Join loads
// the version in force (waiting at most cfg.Timeout), then the Member
// loads every new version with eng.LoadRules, all or nothing, as soon as
// the store's Watch announces it and at the latest at the next read, every
// CheckInterval. A version the engine refuses (invalid for it: a cluster
// rule without WithCluster, say) leaves the rules in force as they were.
// After every change and every CheckInterval the Member reports to the
// store which version runs and which was refused and why
// (cluster.RuleReport), and with WithCluster the engine's heartbeats
// carry the version (cluster.Member.RuleVersion). A store that cannot be
// read, or a first version refused, is no error of Join: the engine keeps
// its rules (those loaded before, or none) and the Member keeps trying; a
// program that must not start without its rules checks Status().Version.
//
// With cfg.Telemetry, the Member publishes a cluster.Frame once a second
// of the engine's clock, just after the second ends: the figures of that
// second of the busiest resources (as Engine.History gives them), their
// refusals by block type, the circuit breakers' states, the host as system
// protection sees it, the cluster store's mode and the rule version in
// force. A failed Publish is counted (Status) and forgotten. Frames date
// their second on the wall clock.
//
// Join returns an error for an invalid cfg (naming the field), and
// sluice.ErrClosed for a closed engine. Close the Member before the
// engine: a Member of a closed engine loads and publishes nothing more.
//
// complexity: checks and defaults of every Config field before the member starts
func Join(eng *sluice.Engine, cfg Config) (*Member, error) {
	bad := func(format string, args ...any) (*Member, error) {
		return nil, fmt.Errorf("fleet: Join: "+format, args...)
	}
	switch {
	case eng == nil:
		return bad("no engine")
	case cfg.App == "":
		return bad("Config.App is required")
	case cfg.Rules == nil && cfg.Telemetry == nil:
		return bad("Config needs Rules or Telemetry (or both)")
	case cfg.CheckInterval < 0 || cfg.Timeout < 0 || cfg.ReportTTL < 0 || cfg.Keep < 0 || cfg.TTL < 0 || cfg.MaxResources < 0:
		return bad("Config has a negative CheckInterval, Timeout, ReportTTL, Keep, TTL or MaxResources")
	}
	if fr, ok := cfg.Rules.(*fileRules); ok && fr.formatErr != nil {
		return bad("Config.Rules: %w", fr.formatErr)
	}
	if fleetlink.Closed(eng) {
		return nil, sluice.ErrClosed
	}
	m := &Member{eng: eng, app: cfg.App, id: cfg.Instance, onError: cfg.OnError}
	if m.id == "" {
		m.id = eng.InstanceID()
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = defaultTimeout
	}
	if cfg.Rules != nil {
		m.follower = startFollower(m, cfg)
	}
	if cfg.Telemetry != nil {
		fleetlink.CountCallers(eng) // the frames' refused callers
		m.pub = startPublisher(m, cfg)
	}
	return m, nil
}

// Status returns what the Member knows of its stores. It is safe for
// concurrent use, also after Close.
func (m *Member) Status() Status {
	st := Status{App: m.app, Instance: m.id}
	if f := m.follower; f != nil {
		f.mu.Lock()
		st.Version, st.Refused, st.RefusedErr = f.st.version, f.st.refused, f.st.refusedErr
		st.Checks, st.Failures, st.Err = f.st.checks, f.st.failures, f.st.err
		f.mu.Unlock()
	}
	if p := m.pub; p != nil {
		st.Published, st.PublishFailures = p.published.Load(), p.failures.Load()
		if e := p.lastErr.Load(); e != nil {
			st.PublishErr = *e
		}
	}
	return st
}

// Close stops following and publishing and waits for the Member's
// goroutines to end. It is idempotent and returns nil.
func (m *Member) Close() error {
	m.closeOnce.Do(func() {
		if m.pub != nil {
			m.pub.close()
		}
		if m.follower != nil {
			m.follower.close()
		}
	})
	return nil
}

// tell tells OnError of err, unless told is the text of err (the same
// failure told last); it returns the text to remember.
func (m *Member) tell(told string, err error) string {
	if m.onError != nil && err.Error() != told {
		m.onError(err)
	}
	return err.Error()
}

var errWatchEnded = errors.New("watch ended")
