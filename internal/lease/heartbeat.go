package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/clock"
	"github.com/sluice-go/sluice/internal/core"
)

// DefaultBeatInterval is the time between two heartbeats.
const DefaultBeatInterval = time.Second

// HeartbeatConfig configures a Heartbeat. Store and Member (ID and App) are
// required.
type HeartbeatConfig struct {
	// Store records the heartbeats.
	Store cluster.Store
	// Clock times the beats and their deadlines; nil means
	// clock.System().
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
	// Expected is the fleet size this instance assumes for its local
	// shares until it has counted the fleet: before its first successful
	// beat and, if beats failed before it, for the hold after it (see
	// Share). Zero means DefaultExpected; 1 assumes the instance is alone.
	Expected int
	// OnLive, when set, is called after every beat with the live count the
	// Heartbeat keeps (see Live), in order, on the Heartbeat's goroutine
	// or the one of a BeatNow, outside its locks. Manager.SetLive fits.
	OnLive func(live int)
	// OnShare, when set, is called with OnLive with the count local
	// shares divide by (see Share) and where it comes from.
	// Manager.SetShare fits.
	OnShare func(n int, src Source)
}

// DefaultExpected is the fleet size an instance that has never counted
// its fleet assumes for its local shares. A limit protects a dependency,
// and an instance that starts while the store is down (a deploy, an
// autoscale during the incident) cannot count its peers: assuming it is
// alone lets each of N such instances admit the whole limit, N times the
// limit in total, exactly when the dependency needs it. Assuming ten
// instances keeps fleets of up to ten within the limit and costs a
// smaller fleet part of its limit, only while the store is down and only
// until the instance has counted the fleet once.
const DefaultExpected = 10

// Source is where a live count comes from.
type Source uint8

const (
	// SourceExpected: the fleet was never counted; the count is
	// HeartbeatConfig.Expected (or DefaultExpected).
	SourceExpected Source = iota
	// SourceCounted: the Store's count, the largest of the hold.
	SourceCounted
	// SourceHeld: the last known count, held while the Store fails and
	// for the hold after it answers again, larger than its count then.
	SourceHeld
)

// String returns "expected", "counted" or "held".
func (s Source) String() string {
	switch s {
	case SourceExpected:
		return "expected"
	case SourceCounted:
		return "counted"
	case SourceHeld:
		return "held"
	}
	return "unknown"
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
	onShare  func(int, Source)
	expected int
	hold     int64 // ns: how long a larger count is kept (holdTTLs × TTL)

	// mu guards the count's state: beats come from the goroutine and from
	// BeatNow.
	mu        sync.Mutex
	seen      []sample // successful beats of the last hold, oldest first
	counted   int64    // clock ns of the first successful beat
	hasCount  bool     // a beat succeeded
	coldStart bool     // a beat failed before the first success
	failing   bool     // the last beat failed
	epoch     string   // the live set's epoch at the last successful beat (Leaver)
	gen       int64    // counts the epochs seen; samples carry theirs

	live     atomic.Int64
	share    atomic.Int64
	source   atomic.Uint32
	failures atomic.Int64
	lastErr  atomic.Pointer[error]

	ctx    context.Context // ends at Close, cutting a beat under way short
	cancel context.CancelFunc
	exited chan struct{}
	once   sync.Once
}

// sample is one successful beat: the Store's count n at clock ns at,
// under the live set's epoch gen (see Heartbeat.gen).
type sample struct{ at, n, gen int64 }

// holdTTLs is the hold in TTLs: a count lower than one seen within the
// hold is not believed. After a restart of the Store, or an outage longer
// than a TTL, the Store counts only the members that have beaten since;
// every live member beats within one TTL of its Store answering again,
// and the second TTL covers a member whose client takes a while to dial
// again (go-redis redials a failing pool about once a second).
const holdTTLs = 2

// StartHeartbeat validates cfg and starts the heartbeat: the first beat at
// once, then one every Interval. Live is 1 until a beat succeeds.
func StartHeartbeat(cfg HeartbeatConfig) (*Heartbeat, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("sluice: heartbeat: nil Store")
	case cfg.Member.ID == "" || cfg.Member.App == "":
		return nil, errors.New("sluice: heartbeat: member needs an ID and an App")
	case cfg.Interval < 0 || cfg.TTL < 0 || cfg.Timeout < 0 || cfg.Expected < 0:
		return nil, errors.New("sluice: heartbeat: negative Interval, TTL, Timeout or Expected")
	}
	h := &Heartbeat{
		store:    cfg.Store,
		clock:    cfg.Clock,
		member:   cfg.Member,
		interval: cfg.Interval,
		ttl:      cfg.TTL,
		timeout:  cfg.Timeout,
		onLive:   cfg.OnLive,
		onShare:  cfg.OnShare,
		expected: cfg.Expected,
		exited:   make(chan struct{}),
	}
	if h.clock == nil {
		h.clock = clock.System()
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
	if h.expected == 0 {
		h.expected = DefaultExpected
	}
	h.hold = holdTTLs * int64(h.ttl)
	h.live.Store(1)
	h.share.Store(int64(h.expected))
	h.source.Store(uint32(SourceExpected))
	h.ctx, h.cancel = context.WithCancel(context.Background())
	go h.run()
	return h, nil
}

// Live returns the number of live instances of the member's App, this one
// included: the largest count the Store answered within the hold (two
// TTLs; across failed beats, the hold counts from the first beat that
// succeeds again); at least 1, and 1 before the first successful beat.
// A lower count is believed only once it has lasted the hold, so a Store
// that restarted empty, which counts only the members that have beaten
// since, never makes the fleet look smaller than it is.
func (h *Heartbeat) Live() int { return int(h.live.Load()) }

// Share returns the count local shares divide by, and its source: Live,
// except until the fleet has been counted, where it is at least
// Expected: before the first successful beat and, when beats failed before
// it (the Store was down at start, and the others may have started since,
// unseen), for the hold after it.
func (h *Heartbeat) Share() (int, Source) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return int(h.share.Load()), Source(h.source.Load())
}

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
// its goroutine. With a Store that is a cluster.Leaver the member then
// leaves the live set, in one call bounded by Timeout, so that the others
// count it out at their next beat; otherwise (or if that call fails) its
// record expires after its TTL. Close is idempotent.
func (h *Heartbeat) Close() {
	h.once.Do(func() {
		h.cancel()
		<-h.exited
		if lv, ok := h.store.(cluster.Leaver); ok {
			ctx, cancel := callContext(context.Background(), h.clock, h.timeout)
			_ = lv.Leave(ctx, h.Member())
			cancel()
		}
	})
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

// BeatNow beats at once, on the caller's goroutine, under ctx and the
// Timeout, and updates the count as a periodic beat does. The engine calls
// it when its store answers again, before its first remote decision, so
// that a Store that restarted empty counts this member at once.
func (h *Heartbeat) BeatNow(ctx context.Context) {
	select {
	case <-h.exited:
		return
	default:
	}
	h.beatCtx(ctx)
}

func (h *Heartbeat) beat() { h.beatCtx(h.ctx) }

func (h *Heartbeat) beatCtx(parent context.Context) {
	ctx, cancel := callContext(parent, h.clock, h.timeout)
	var n int
	var epoch string
	var err error
	lv, hasEpoch := h.store.(cluster.Leaver)
	if hasEpoch {
		n, epoch, err = lv.BeatEpoch(ctx, h.Member(), h.ttl)
	} else {
		n, err = h.store.Beat(ctx, h.Member(), h.ttl)
	}
	cancel()
	if h.ctx.Err() != nil || parent.Err() != nil {
		return
	}
	now := h.clock.Nanotime()
	h.mu.Lock()
	if err != nil {
		h.failures.Add(1)
		err = fmt.Errorf("sluice: heartbeat: %w", err)
		h.lastErr.Store(&err)
		h.failing = true
		if h.hasCount {
			h.source.Store(uint32(SourceHeld))
		}
	} else {
		h.lastErr.Store(nil)
		if hasEpoch {
			if !h.hasCount || epoch != h.epoch {
				h.gen++
				h.epoch = epoch
			} else {
				// The Store kept the live set since the last beat: a
				// lower count under this epoch is members that left or
				// expired, not a loss, and replaces the epoch's samples.
				// Samples of an earlier epoch (before the set was lost)
				// are held as before.
				keep := h.seen[:0]
				for _, s := range h.seen {
					if s.gen != h.gen {
						keep = append(keep, s)
					}
				}
				h.seen = keep
			}
		}
		h.counts(now, int64(max(n, 1)))
	}
	live, share, src := int(h.live.Load()), int(h.share.Load()), Source(h.source.Load())
	h.mu.Unlock()
	if h.onLive != nil {
		h.onLive(live)
	}
	if h.onShare != nil {
		h.onShare(share, src)
	}
}

// counts takes the Store's count n at now. h.mu must be held.
func (h *Heartbeat) counts(now, n int64) {
	if !h.hasCount {
		// A Store that answers the first beat has counted the members
		// that beat within its TTL; one that failed it may have been down
		// (and the others with it) and counts them only as they beat.
		h.hasCount, h.coldStart, h.counted = true, h.failing, now
	}
	if h.failing {
		// The Store answers again: what was seen before the failures is
		// kept for a whole hold from now.
		for i := range h.seen {
			h.seen[i].at = now
		}
		h.failing = false
	}
	keep := h.seen[:0]
	for _, s := range h.seen {
		if now-s.at < h.hold {
			keep = append(keep, s)
		}
	}
	h.seen = append(keep, sample{now, n, h.gen})
	live := int64(0)
	for _, s := range h.seen {
		live = max(live, s.n)
	}
	h.live.Store(live)
	share, src := live, SourceCounted
	if live > n {
		src = SourceHeld
	}
	if h.coldStart && now-h.counted < h.hold && int64(h.expected) > live {
		share, src = int64(h.expected), SourceExpected
	}
	h.share.Store(share)
	h.source.Store(uint32(src))
}
