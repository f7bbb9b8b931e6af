package sluice

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/internal/window"
	"github.com/sluice-go/sluice/stat"
)

// Defaults of TelemetryConfig.
const (
	// DefaultTelemetryKeep is the number of frames the store keeps per
	// instance when TelemetryConfig.Keep is zero: five minutes.
	DefaultTelemetryKeep = 300
	// DefaultFrameResources is the most resources a frame holds when
	// TelemetryConfig.MaxResources is zero.
	DefaultFrameResources = 50
)

// TelemetryConfig configures WithTelemetry.
type TelemetryConfig struct {
	// App names the application in the frames; empty means
	// RuleStoreConfig.App, then ClusterConfig.App.
	App string
	// Keep is the number of frames (seconds) the store keeps per instance;
	// zero means DefaultTelemetryKeep.
	Keep int
	// TTL is how long after the last frame the store forgets the
	// instance; zero means Keep seconds.
	TTL time.Duration
	// MaxResources is the most resources a frame holds, the busiest by
	// passed plus refused requests in the frame's second; zero means
	// DefaultFrameResources.
	MaxResources int
	// Timeout bounds each Publish; zero means 500 ms (less than the second
	// between two frames).
	Timeout time.Duration
}

// WithTelemetry makes the engine publish a cluster.Frame to t once a
// second (of the engine's clock), for dashboards: the figures of the last
// complete second of its busiest resources (Engine.History), the refusals
// by block type in that second, the circuit breakers' states,
// the host as system protection sees it, the cluster store's mode and the
// rule store's version. It runs on a goroutine of its own, which Close
// stops: Entry never waits for it, and a failed Publish is counted
// (TelemetryStatus) and forgotten. Frames name the instance by InstanceID
// and date their second on the wall clock. Engine.PublishTelemetry starts
// the same publishing on an engine already made.
func WithTelemetry(t cluster.Telemetry, cfg TelemetryConfig) Option {
	return func(cf *config) {
		cf.telemetry = t
		cf.teleCfg = cfg
	}
}

// TelemetryStatus counts an engine's frames (Engine.TelemetryStatus).
type TelemetryStatus struct {
	// Published counts the frames the store accepted, Failures those it
	// did not, and Err is the last failure (nil after a success).
	Published, Failures int64
	Err                 error
}

// TelemetryStatus returns the engine's telemetry counts, and false when it
// publishes none. It is safe for concurrent use, also after Close.
func (eng *Engine) TelemetryStatus() (TelemetryStatus, bool) {
	p := eng.tele.Load()
	if p == nil {
		return TelemetryStatus{}, false
	}
	st := TelemetryStatus{Published: p.published.Load(), Failures: p.failures.Load()}
	if e := p.lastErr.Load(); e != nil {
		st.Err = *e
	}
	return st, true
}

// publisher publishes the engine's frames from its goroutine.
type publisher struct {
	eng     *Engine
	t       cluster.Telemetry
	app     string
	keep    int
	ttl     time.Duration
	maxRes  int
	timeout time.Duration
	// wallOffset turns an engine clock reading into wall-clock ns.
	wallOffset int64

	published, failures atomic.Int64
	lastErr             atomic.Pointer[error]

	// Owned by the goroutine: the last second published.
	last int64

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startPublisher starts publishing for WithTelemetry; an invalid cfg
// leaves a publisher that publishes nothing, whose status says why.
func startPublisher(eng *Engine, t cluster.Telemetry, cfg TelemetryConfig, app string) *publisher {
	p, err := newPublisher(eng, t, cfg, app)
	if err != nil {
		err = fmt.Errorf("sluice.WithTelemetry: %w", err)
		p.lastErr.Store(&err)
		return p
	}
	p.start()
	return p
}

// newPublisher checks cfg and returns a publisher with its defaults set,
// not started.
func newPublisher(eng *Engine, t cluster.Telemetry, cfg TelemetryConfig, app string) (*publisher, error) {
	p := &publisher{
		eng: eng, t: t, app: app, keep: cfg.Keep, ttl: cfg.TTL, maxRes: cfg.MaxResources, timeout: cfg.Timeout,
		wallOffset: time.Now().UnixNano() - eng.clock.Nanotime(), last: -1,
	}
	switch {
	case t == nil:
		return p, errors.New("no cluster.Telemetry to publish to")
	case app == "":
		return p, errors.New("TelemetryConfig.App (or RuleStoreConfig.App, ClusterConfig.App) is required")
	case cfg.Keep < 0 || cfg.TTL < 0 || cfg.MaxResources < 0 || cfg.Timeout < 0:
		return p, errors.New("negative Keep, TTL, MaxResources or Timeout")
	}
	if p.keep == 0 {
		p.keep = DefaultTelemetryKeep
	}
	if p.ttl == 0 {
		p.ttl = time.Duration(p.keep) * time.Second
	}
	if p.maxRes == 0 {
		p.maxRes = DefaultFrameResources
	}
	if p.timeout == 0 {
		p.timeout = 500 * time.Millisecond
	}
	return p, nil
}

func (p *publisher) start() {
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.run()
}

// PublishTelemetry starts publishing the engine's frames to t, as
// WithTelemetry does, on an engine that is already running: an engine
// made by a library, or shown by a dashboard of its own process. cfg.App
// is required unless the engine follows a rule store (its application is
// then the default). An engine has one publisher at most: it returns an
// error when the engine publishes already (WithTelemetry, or an earlier
// PublishTelemetry not stopped), and ErrClosed after Close.
//
// stop stops the publishing and waits for its goroutine; it is idempotent,
// and Close stops the publishing too. After stop, TelemetryStatus reports
// no telemetry and PublishTelemetry may start another.
func (eng *Engine) PublishTelemetry(t cluster.Telemetry, cfg TelemetryConfig) (stop func(), err error) {
	app := cfg.App
	if app == "" && eng.rules != nil {
		app = eng.rules.app
	}
	p, err := newPublisher(eng, t, cfg, app)
	if err != nil {
		return nil, fmt.Errorf("sluice: PublishTelemetry: %w", err)
	}
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if eng.closed.Load() {
		return nil, ErrClosed
	}
	if eng.tele.Load() != nil {
		return nil, errors.New("sluice: PublishTelemetry: the engine publishes telemetry already (WithTelemetry or PublishTelemetry)")
	}
	p.start()
	eng.tele.Store(p)
	var once sync.Once
	return func() {
		once.Do(func() {
			p.close()
			eng.tele.CompareAndSwap(p, nil)
		})
	}, nil
}

func (p *publisher) close() {
	if p.cancel == nil {
		return
	}
	p.cancel()
	p.wg.Wait()
}

// run publishes a frame just after each second of the engine's clock ends.
func (p *publisher) run() {
	defer p.wg.Done()
	for {
		now := p.eng.clock.Nanotime()
		next := (now/int64(time.Second) + 1) * int64(time.Second)
		t := p.eng.clock.NewTimer(time.Duration(next - now))
		select {
		case <-t.C():
		case <-p.ctx.Done():
			t.Stop()
			return
		}
		p.publish(p.eng.clock.Nanotime())
	}
}

// publish publishes the frame of the last second completed at now, once.
func (p *publisher) publish(now int64) {
	sec := now/int64(time.Second) - 1
	if sec < 0 || sec == p.last {
		return
	}
	p.last = sec
	f := p.frame(now, sec)
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
	err := p.t.Publish(ctx, f, p.keep, p.ttl)
	cancel()
	if err != nil {
		if p.ctx.Err() != nil {
			return
		}
		p.failures.Add(1)
		err = fmt.Errorf("sluice: telemetry: %w", err)
		p.lastErr.Store(&err)
		return
	}
	p.published.Add(1)
	p.lastErr.Store(nil)
}

// frame builds the frame of engine second sec, read at now.
func (p *publisher) frame(now, sec int64) cluster.Frame {
	eng := p.eng
	f := cluster.Frame{
		App: p.app, Instance: eng.id,
		Second:      (sec*int64(time.Second) + p.wallOffset) / int64(time.Second),
		RuleVersion: eng.ruleVersion(),
		System:      eng.SystemMetrics(),
		Shedding:    eng.shed.on.Load(),
	}
	if st, ok := eng.ClusterStatus(); ok {
		f.ClusterMode = "remote"
		if st.Fallback {
			f.ClusterMode = "fallback"
		}
	}
	// Rank by cheap reads (two window sums and the refusal counters of
	// each resource: no Snapshot, which costs several µs a resource).
	type busy struct {
		r     *resource
		load  uint64
		block [len(stat.Snapshot{}.BlockedBy)]uint64
	}
	eng.reg.mu.Lock()
	all := make([]busy, 0, len(eng.reg.all))
	for _, r := range eng.reg.all {
		all = append(all, busy{r: r})
	}
	eng.reg.mu.Unlock()
	end := (sec+1)*int64(time.Second) - 1 // the second's last instant: Sum covers the second
	for i := range all {
		b := &all[i]
		n := &b.r.node
		b.load = n.Sum(end, window.Pass) + n.Sum(end, window.Block)
		// Refusals by type over the same second as the Block sum (the
		// counters since start, read now, would cover the time between
		// two frames instead, and not add up to the second's total).
		for t := range b.block {
			b.block[t] = n.BlockedInSecond(sec, core.BlockType(t))
		}
	}
	slices.SortFunc(all, func(a, b busy) int {
		if c := cmp.Compare(b.load, a.load); c != 0 {
			return c
		}
		return cmp.Compare(a.r.name, b.r.name)
	})
	all = all[:min(len(all), p.maxRes)]
	for _, b := range all {
		r := cluster.ResourceSecond{Resource: b.r.name, BlockedBy: b.block, Concurrency: b.r.node.Concurrency()}
		if h := b.r.node.History(now, time.Second); len(h) == 1 && h[0].Start == sec*int64(time.Second) {
			r.Second = h[0]
		} else {
			r.Start = sec * int64(time.Second)
		}
		f.Resources = append(f.Resources, r)
	}
	for _, b := range eng.CircuitBreakerStates() {
		f.Breakers = append(f.Breakers, cluster.BreakerFrame{Resource: b.Rule.Resource, State: b.State})
	}
	return f
}
