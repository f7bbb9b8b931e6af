package system

import (
	"math"
	"time"

	"sync/atomic"

	"github.com/sluice-go/sluice/internal/clock"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/window"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// StaleIntervals is how many sample intervals a load1 or CPU value stays in
// use after it was read. When sampling keeps failing, the last good value is
// kept (with its age, see Slot.Metrics), but once it is older than this the
// rules on that metric stop refusing entries until a sample succeeds: a
// broken sampler must not block a service forever.
const StaleIntervals = 5

// Config is what the engine gives the slot.
type Config struct {
	// Clock is the engine's clock. The sampler ticks on it.
	Clock core.Clock
	// Inbound is the engine's global inbound node.
	Inbound *window.Node
	// Source provides load1 and CPU usage. Nil means a HostSource of
	// the real process (gopsutil, cgroup-aware), made when sampling starts.
	Source Source
	// Interval is the time between two samples. Zero or less means
	// DefaultSampleInterval (one second).
	Interval time.Duration
	// OnError receives the first error of each run of failed samples of a
	// metric. Nil means it is logged with slog.Warn.
	OnError func(error)
	// OnSample, if not nil, is called after each sample with its clock
	// reading, from the sampler's goroutine.
	OnSample func(now int64)
}

// Slot checks inbound entries against the system rules in force. It is safe
// for concurrent use.
type Slot struct {
	inbound *window.Node
	win     *window.WindowCache
	sampler *Sampler
	stale   int64 // nanoseconds after which a sampled value is ignored

	set atomic.Pointer[RuleSet] // nil when no rule is in force
}

// RuleSet is the immutable compiled form of a set of system rules (see
// Compile): for each metric and strategy, the rule with the lowest threshold
// (it is the first to fire, so the others never would).
type RuleSet struct {
	rules           []rules.System
	conc, qps, rt   *check
	load, cpu       *check // plain threshold
	loadBBR, cpuBBR *check
	window, sampled bool
	// readsRT: a rule reads the inbound node's response times (average
	// RT, BBR's minimum RT), so inbound exits must be timed.
	readsRT bool
	// shadow is the compiled form of the rules in shadow mode, checked
	// after these when these pass; nil when there are none.
	shadow *RuleSet
}

// check is one compiled rule.
type check struct {
	threshold float64
	// max is, for QPS and concurrency, the largest whole count the
	// threshold admits (floor(threshold)); for average RT, the threshold in
	// microseconds. Comparing whole numbers avoids unsigned-to-float
	// conversions on the request path.
	max    int64
	maxRT  float64
	rule   *rules.System
	reason string
	// refusals shares the rule's equal refusals (see block).
	refusals entry.Refusals
}

// block is the rule's refusal of ec, observing observed. The refusals that
// agree on every field share one error (entry.Refusals): a system refusal
// has no RetryAfter, and its Observed is a count or a sampled figure that
// holds for many refusals, so a flood of them allocates nothing.
func (c *check) block(ec *entry.Context, observed float64) *core.BlockError {
	return c.blockWhy(ec, observed, c.reason)
}

func (c *check) blockWhy(ec *entry.Context, observed float64, reason string) *core.BlockError {
	want := core.BlockError{
		Type:      core.BlockSystem,
		Resource:  ec.Resource,
		Rule:      core.RuleRef{ID: c.rule.ID, Metric: string(c.rule.Metric)},
		Observed:  observed,
		Threshold: c.threshold,
		Reason:    reason,
		Shadow:    c.rule.Shadow,
	}
	return c.refusals.Share(&want)
}

// blockCount is block for a rule on a count the entry's batch adds to
// (concurrency, QPS): a batch larger than the threshold, which no wait can
// let through, is reported as such, observing the batch.
func (c *check) blockCount(ec *entry.Context, observed float64) *core.BlockError {
	if ec.Batch > c.max {
		return c.blockWhy(ec, float64(ec.Batch), "batch larger than threshold")
	}
	return c.block(ec, observed)
}

// New returns a slot with no rules. It starts no goroutine.
func New(cfg Config) *Slot {
	if cfg.Clock == nil {
		cfg.Clock = clock.System()
	}
	if cfg.Inbound == nil {
		cfg.Inbound = window.NewNode()
	}
	s := &Slot{
		inbound: cfg.Inbound,
		win:     window.NewWindowCache(cfg.Inbound),
		sampler: NewSampler(SamplerConfig{
			Source:   cfg.Source,
			Clock:    cfg.Clock,
			Interval: cfg.Interval,
			OnError:  cfg.OnError,
			OnSample: cfg.OnSample,
		}),
	}
	s.stale = StaleIntervals * int64(s.sampler.Interval())
	return s
}

// Active reports whether any rule is in force; the engine skips Check when
// it is false. It is one atomic load.
func (s *Slot) Active() bool { return s.set.Load() != nil }

// ReadsRT reports whether a rule in force (shadow ones included) reads the
// response times of inbound entries: InboundAvgRT, and BBR (the minimum
// RT). Rules on InboundQPS, InboundConcurrency and plain Load1 or CPUUsage
// thresholds read counts only, which an exit whose RT was not measured
// keeps exact. It is one atomic load and a field read.
func (s *Slot) ReadsRT() bool {
	rs := s.set.Load()
	return rs != nil && rs.readsRT
}

// Check decides on one inbound entry (the engine never passes outbound ones)
// at the instant ec.Start. It returns a *core.BlockError of type
// core.BlockSystem naming the rule, the metric (in Reason), the threshold and
// the observed value, or nil. A batch larger than a concurrency or QPS
// threshold is refused with Reason "batch larger than threshold", observing
// the batch. It reads only cached values and never blocks
// or allocates when the entry passes.
//
// Rules are checked in the order concurrency, QPS, average RT, load1, CPU
// usage (plain threshold before BBR), and an entry is refused when:
//   - InboundConcurrency: in flight + batch > threshold;
//   - InboundQPS: passed in the last second + batch > threshold;
//   - InboundAvgRT: average RT of the last second (ms) > threshold;
//   - Load1, CPUUsage: the sampled value > threshold, and with BBR also
//     concurrency > 1 && concurrency > maxCompletedPerSecond × minRT(s)
//     (see Capacity: minRT is the shortest of the last ten seconds).
//
// The checks read the inbound node without reserving anything, so entries
// racing each other may together overshoot a QPS or concurrency threshold by
// the number racing; flow and isolation rules are exact where that matters.
//
// Rules in shadow mode are checked after the others, when those pass, and
// their refusal comes back marked Shadow (the engine lets the entry go on).
func (s *Slot) Check(ec *entry.Context) *core.BlockError {
	rs := s.set.Load()
	if rs == nil {
		return nil
	}
	if be := s.check(rs, ec); be != nil || rs.shadow == nil {
		return be
	}
	return s.check(rs.shadow, ec)
}

// check is Check against the rules of rs, not its shadow ones.
//
// complexity: one comparison per system metric a rule may name, in the rule's order; the entry path, kept in one frame
func (s *Slot) check(rs *RuleSet, ec *entry.Context) *core.BlockError {
	now := ec.Start
	if c := rs.conc; c != nil {
		if v := s.inbound.Concurrency(); v+ec.Batch > c.max {
			return c.blockCount(ec, float64(v))
		}
	}
	if rs.window {
		p, d, r := s.win.Sums(now)
		// Counts are far below 2^63: signed conversions are exact and cheap.
		pass, done, rt := int64(p), int64(d), int64(r)
		if c := rs.qps; c != nil && pass+ec.Batch > c.max {
			return c.blockCount(ec, float64(pass))
		}
		if c := rs.rt; c != nil && done > 0 && float64(rt) > c.maxRT*float64(done) {
			return c.block(ec, float64(rt)/float64(done)/1000)
		}
	}
	if !rs.sampled {
		return nil
	}
	// A NaN value (never sampled) fails every comparison and passes.
	if rs.load != nil || rs.loadBBR != nil {
		if v, at := s.sampler.Load1(); now-at <= s.stale {
			if c := rs.load; c != nil && v > c.threshold {
				return c.block(ec, v)
			}
			if c := rs.loadBBR; c != nil && v > c.threshold && s.overCapacity(now, ec.Priority) {
				return c.block(ec, v)
			}
		}
	}
	if rs.cpu != nil || rs.cpuBBR != nil {
		if v, at := s.sampler.CPUUsage(); now-at <= s.stale {
			if c := rs.cpu; c != nil && v > c.threshold {
				return c.block(ec, v)
			}
			if c := rs.cpuBBR; c != nil && v > c.threshold && s.overCapacity(now, ec.Priority) {
				return c.block(ec, v)
			}
		}
	}
	return nil
}

// overCapacity is the BBR condition on the global inbound node at now:
// concurrency > 1 && concurrency > maxCompletedPerSecond × minRT(s), with
// the figures of Capacity read through the window cache. In whole numbers
// (maxCompleted is per 100 ms bucket, minRT in µs): n·10^5 > done·minRT.
// The capacity is p's share of it: three quarters for sheddable entries,
// all of it for default ones, a quarter more for critical ones (the shares
// of adaptive concurrency rules; see docs/adaptive.md).
func (s *Slot) overCapacity(now int64, p core.Priority) bool {
	n := s.inbound.Concurrency()
	if n <= 1 {
		return false
	}
	done, rt, ok := s.win.Best(now)
	if !ok {
		return true // nothing completed: capacity 0
	}
	// done and rt are at most 2^30 each (window.MaxAdd); the product,
	// times 5, fits.
	lhs, rhs := uint64(n)*(1e6/window.SecondBuckets), done*rt
	switch p {
	case core.PrioritySheddable:
		return 4*lhs > 3*rhs
	case core.PriorityCritical:
		return 4*lhs > 5*rhs
	}
	return lhs > rhs
}

// Capacity returns the number of inbound requests the process can have in
// flight without queueing, by Little's law: the highest completion rate of
// the last second (per second, from its best 100 ms bucket) times the
// shortest response time (in seconds) of the last window.MinRTMemory (ten
// seconds). It is zero when nothing completed in the last second.
//
// The minimum RT has the longer memory because, under sustained overload,
// the shortest RT of the last second is itself inflated by queueing (every
// request shares the CPU with the others) and the product would settle at
// whatever concurrency the process already has; see
// docs/design/system-adaptive.md.
func Capacity(inbound *window.Node, now int64) float64 {
	minRT, ok := inbound.RecentMinRT(now)
	if !ok {
		return 0
	}
	return inbound.MaxCompletePerSecond(now) * float64(minRT) / 1e6
}

// Compile returns the compiled form of rs, which must be valid (the engine
// validates every rule first), or nil when rs is empty. It keeps its own
// copy of rs and changes nothing: Use puts the result in force.
func Compile(rs []rules.System) *RuleSet {
	if len(rs) == 0 {
		return nil
	}
	var enforced, shadow []rules.System
	for _, r := range rs {
		if r.Shadow {
			shadow = append(shadow, r)
		} else {
			enforced = append(enforced, r)
		}
	}
	set := compile(enforced)
	if len(shadow) > 0 {
		set.shadow = compile(shadow)
		set.sampled = set.sampled || set.shadow.sampled
		set.readsRT = set.readsRT || set.shadow.readsRT
	}
	return set
}

// compile is Compile for rules of one mode, enforced or shadow.
func compile(rs []rules.System) *RuleSet {
	set := &RuleSet{rules: rs}
	for i := range set.rules {
		r := &set.rules[i]
		c := &check{threshold: r.Threshold, rule: r, reason: string(r.Metric)}
		c.max = int64(math.Floor(r.Threshold)) // thresholds are at most rules.MaxThreshold
		c.maxRT = r.Threshold * 1000
		var slot **check
		switch r.Metric {
		case rules.InboundConcurrency:
			slot = &set.conc
		case rules.InboundQPS:
			slot, set.window = &set.qps, true
		case rules.InboundAvgRT:
			slot, set.window = &set.rt, true
		case rules.Load1:
			slot, set.sampled = &set.load, true
			if r.Strategy == rules.BBR {
				slot = &set.loadBBR
			}
		case rules.CPUUsage:
			slot, set.sampled = &set.cpu, true
			if r.Strategy == rules.BBR {
				slot = &set.cpuBBR
			}
		}
		if r.Strategy == rules.BBR {
			c.reason += " (bbr: concurrency over maxCompletedPerSecond × minRT)"
			set.readsRT = true
		}
		if r.Metric == rules.InboundAvgRT {
			set.readsRT = true
		}
		if *slot == nil || c.threshold < (*slot).threshold {
			*slot = c
		}
	}
	return set
}

// Use puts set (from Compile; nil for no rules) in force. A set with a rule
// on Load1 or CPUUsage starts the sampler if it is not running; it then runs
// until Close (after Close it starts nothing).
func (s *Slot) Use(set *RuleSet) {
	if set != nil && set.sampled {
		s.sampler.Start()
	}
	s.set.Store(set)
}

// Stale is the age in nanoseconds past which a sampled value is ignored.
func (s *Slot) Stale() int64 { return s.stale }

// Start starts the sampler now, so load1 and CPU usage are known before
// rules on them are loaded. It does nothing after Close.
func (s *Slot) Start() { s.sampler.Start() }

// Metrics returns the sampler's last good load1, CPU usage and memory
// readings with their ages.
func (s *Slot) Metrics() stat.System { return s.sampler.Snapshot() }

// Close stops the sampler and waits for its goroutine to return. Rules stay
// in force (the engine refuses new entries once closed). Close is
// idempotent.
func (s *Slot) Close() error { return s.sampler.Close() }
