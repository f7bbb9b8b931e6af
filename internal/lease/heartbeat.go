package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/core"
)

// DefaultBeatInterval is the time between two heartbeats.
const DefaultBeatInterval = time.Second

// HeartbeatConfig configures a Heartbeat. Store and Member (ID and App) are
// required.
type HeartbeatConfig struct {
	// Store records the heartbeats.
	Store cluster.Store
	// Clock times the beats and their deadlines; nil means
	// core.SystemClock().
	Clock core.Clock
	// Member is this instance.
	Member cluster.Member
	// Interval is the time between two beats; zero means
	// DefaultBeatInterval.
	Interval time.Duration
	// TTL is how long a beat keeps the member alive; zero means three
	// Intervals.
	TTL time.Duration
	// Timeout bounds each Beat call; zero means DefaultTimeout.
	Timeout time.Duration
	// OnLive, when set, is called after every beat with the live count the
	// Heartbeat keeps (the Store's answer, or the last known count while
	// the Store fails), in order, on the Heartbeat's goroutine, outside
	// its locks. Manager.SetLive fits.
	OnLive func(live int)
}

// Heartbeat records this instance as alive in the Store every Interval and
// keeps the count of live instances. Its goroutine runs from
// StartHeartbeat until Close. It is safe for concurrent use.
type Heartbeat struct {
	store    cluster.Store
	clock    core.Clock
	memberMu sync.Mutex // guards member: SetRuleVersion changes it
	member   cluster.Member
	interval time.Duration
	ttl      time.Duration
	timeout  time.Duration
	onLive   func(int)

	live     atomic.Int64
	failures atomic.Int64
	lastErr  atomic.Pointer[error]

	ctx    context.Context // ends at Close, cutting a beat under way short
	cancel context.CancelFunc
	exited chan struct{}
	once   sync.Once
}

// StartHeartbeat validates cfg and starts the heartbeat: the first beat at
// once, then one every Interval. Live is 1 until a beat succeeds.
func StartHeartbeat(cfg HeartbeatConfig) (*Heartbeat, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("sluice: heartbeat: nil Store")
	case cfg.Member.ID == "" || cfg.Member.App == "":
		return nil, errors.New("sluice: heartbeat: member needs an ID and an App")
	case cfg.Interval < 0 || cfg.TTL < 0 || cfg.Timeout < 0:
		return nil, errors.New("sluice: heartbeat: negative Interval, TTL or Timeout")
	}
	h := &Heartbeat{
		store:    cfg.Store,
		clock:    cfg.Clock,
		member:   cfg.Member,
		interval: cfg.Interval,
		ttl:      cfg.TTL,
		timeout:  cfg.Timeout,
		onLive:   cfg.OnLive,
		exited:   make(chan struct{}),
	}
	if h.clock == nil {
		h.clock = core.SystemClock()
	}
	if h.interval == 0 {
		h.interval = DefaultBeatInterval
	}
	if h.ttl == 0 {
		h.ttl = 3 * h.interval
	}
	if h.timeout == 0 {
		h.timeout = DefaultTimeout
	}
	h.live.Store(1)
	h.ctx, h.cancel = context.WithCancel(context.Background())
	go h.run()
	return h, nil
}

// Live returns the number of live instances of the member's App, this one
// included, as of the last successful beat; at least 1.
func (h *Heartbeat) Live() int { return int(h.live.Load()) }

// Failures returns the number of beats that failed.
func (h *Heartbeat) Failures() int64 { return h.failures.Load() }

// Err returns the error of the last beat, nil if it succeeded.
func (h *Heartbeat) Err() error {
	if p := h.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Close stops the heartbeat, cutting a beat under way short, and waits for
// its goroutine. The member's record expires after its TTL. Close is
// idempotent.
func (h *Heartbeat) Close() {
	h.once.Do(h.cancel)
	<-h.exited
}

func (h *Heartbeat) run() {
	defer close(h.exited)
	for {
		h.beat()
		t := h.clock.NewTimer(h.interval)
		select {
		case <-t.C():
		case <-h.ctx.Done():
			t.Stop()
			return
		}
	}
}

// SetRuleVersion sets the rule version the member reports from the next
// beat on (Member.RuleVersion).
func (h *Heartbeat) SetRuleVersion(v string) {
	h.memberMu.Lock()
	h.member.RuleVersion = v
	h.memberMu.Unlock()
}

// Member returns the member as the next beat records it.
func (h *Heartbeat) Member() cluster.Member {
	h.memberMu.Lock()
	defer h.memberMu.Unlock()
	return h.member
}

func (h *Heartbeat) beat() {
	ctx, cancel := callContext(h.ctx, h.clock, h.timeout)
	n, err := h.store.Beat(ctx, h.Member(), h.ttl)
	cancel()
	if h.ctx.Err() != nil {
		return
	}
	if err != nil {
		h.failures.Add(1)
		err = fmt.Errorf("sluice: heartbeat: %w", err)
		h.lastErr.Store(&err)
	} else {
		h.lastErr.Store(nil)
		h.live.Store(int64(max(n, 1)))
	}
	if h.onLive != nil {
		h.onLive(h.Live())
	}
}
