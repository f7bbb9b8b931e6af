package fleet

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/fleetlink"
)

// publisher publishes the engine's frames from its goroutine.
type publisher struct {
	m       *Member
	t       cluster.Telemetry
	keep    int
	ttl     time.Duration
	maxRes  int
	timeout time.Duration
	// wallOffset turns an engine clock reading into wall-clock ns.
	wallOffset int64

	published, failures atomic.Int64
	lastErr             atomic.Pointer[error]

	// Owned by the goroutine: the last second published, the failure
	// told last.
	last int64
	told string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// newPublisher returns a publisher with cfg's defaults set, not started.
func newPublisher(m *Member, cfg Config) *publisher {
	p := &publisher{
		m: m, t: cfg.Telemetry, keep: cfg.Keep, ttl: cfg.TTL, maxRes: cfg.MaxResources,
		timeout:    min(cfg.Timeout, publishTimeout),
		wallOffset: time.Now().UnixNano() - m.eng.Clock().Nanotime(), last: -1,
	}
	if p.keep == 0 {
		p.keep = defaultKeep
	}
	if p.ttl == 0 {
		p.ttl = time.Duration(p.keep) * time.Second
	}
	if p.maxRes == 0 {
		p.maxRes = defaultMaxResources
	}
	if p.timeout <= 0 {
		p.timeout = publishTimeout
	}
	return p
}

func startPublisher(m *Member, cfg Config) *publisher {
	p := newPublisher(m, cfg)
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.run()
	return p
}

func (p *publisher) close() {
	p.cancel()
	p.wg.Wait()
}

// run publishes a frame just after each second of the engine's clock ends.
func (p *publisher) run() {
	defer p.wg.Done()
	clk := p.m.eng.Clock()
	for {
		now := clk.Nanotime()
		next := (now/int64(time.Second) + 1) * int64(time.Second)
		t := clk.NewTimer(time.Duration(next - now))
		select {
		case <-t.C():
		case <-p.ctx.Done():
			t.Stop()
			return
		}
		p.publish(clk.Nanotime())
	}
}

// publish publishes the frame of the last second completed at now, once.
func (p *publisher) publish(now int64) {
	sec := now/int64(time.Second) - 1
	if sec < 0 || sec == p.last {
		return
	}
	p.last = sec
	f, ok := p.frame(now, sec)
	if !ok {
		return // the engine is closed
	}
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
	err := p.t.Publish(ctx, f, p.keep, p.ttl)
	cancel()
	if err != nil {
		if p.ctx.Err() != nil {
			return
		}
		p.failures.Add(1)
		err = fmt.Errorf("fleet: telemetry %q: %w", p.m.app, err)
		p.lastErr.Store(&err)
		p.told = p.m.tell(p.told, err)
		return
	}
	p.published.Add(1)
	p.lastErr.Store(nil)
	p.told = ""
}

// frame builds the frame of engine second sec, read at now; false when
// the engine is closed.
func (p *publisher) frame(now, sec int64) (cluster.Frame, bool) {
	eng := p.m.eng
	f := cluster.Frame{
		App: p.m.app, Instance: p.m.id,
		Second: (sec*int64(time.Second) + p.wallOffset) / int64(time.Second),
		System: eng.SystemMetrics(), // load1, CPU and memory; it makes no call count engine-wide
	}
	if fo := p.m.follower; fo != nil {
		f.RuleVersion = fo.version()
	}
	if st, ok := eng.ClusterStatus(); ok {
		f.ClusterMode = "remote"
		if st.Fallback {
			f.ClusterMode = "fallback"
		}
	}
	if !fleetlink.Resources(eng, &f, now, sec, p.maxRes) {
		return f, false
	}
	for _, b := range eng.CircuitBreakerStates() {
		f.Breakers = append(f.Breakers, cluster.BreakerFrame{Resource: b.Rule.Resource, State: b.State})
	}
	return f, true
}
