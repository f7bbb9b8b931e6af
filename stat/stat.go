// Package stat holds the read-only views of what an engine measures and
// decides: a resource's figures (Snapshot) and per-second history (Second),
// the host metrics behind system rules (System), circuit-breaker states
// (BreakerState) and the events of the engine's stream (Event). The counting machinery itself is internal; these
// are copies taken at one instant, safe to keep and compare.
package stat

import (
	"fmt"
	"strconv"
	"time"

	"github.com/sluice-go/sluice/internal/core"
)

// blockTypes is the length of Snapshot.BlockedBy: one count per built-in
// sluice.BlockType (BlockFlow to BlockAuthority), and index 0 for any other
// value a custom slot may have used.
const blockTypes = int(core.BlockAuthority) + 1

// Snapshot is a read-only copy of a node's figures at one instant.
type Snapshot struct {
	// PassQPS, BlockQPS, CompleteQPS and ErrorQPS are per-second counts over
	// the last second.
	PassQPS, BlockQPS, CompleteQPS, ErrorQPS float64
	// AvgRT and MinRT are over the last second; zero when nothing completed.
	// They cover the exits whose RT was measured. A rule that uses RT has
	// every exit timed; once the resource is read (and for no rule), the
	// exits are timed in a sample: the first 16 requests of each 100 ms,
	// then one in 16, which stands for 16 in the RT sum. AvgRT is then an
	// unbiased estimate (its error falls with the square root of the
	// sample), MinRT the smallest of the sample (see "The clock" in
	// docs/design/architecture.md).
	AvgRT, MinRT time.Duration
	// Concurrency is the number of requests in flight.
	Concurrency int64
	// AdaptiveLimit is the limit in force of the resource's adaptive
	// concurrency rule (rules.Adaptive): the most requests it admits in
	// flight now; zero when it has none.
	AdaptiveLimit int64
	// MinutePass, MinuteBlock, MinuteComplete and MinuteError are counts over
	// the last minute.
	MinutePass, MinuteBlock, MinuteComplete, MinuteError uint64
	// TotalPass, TotalBlock, TotalComplete and TotalError are counts since
	// the node was made.
	TotalPass, TotalBlock, TotalComplete, TotalError uint64
	// TotalRT is the sum of the response times of the requests counted in
	// TotalComplete (weighted by batch), to the microsecond: exact for the
	// exits a rule times, an estimate from the sample of AvgRT otherwise
	// (untimed exits, before the resource was first read, add nothing). One entry
	// adds at most about 17.9 minutes, and one second's sum at most about
	// 17.9 minutes per 100 ms of the second-level window.
	TotalRT time.Duration
	// BlockedBy counts the refused requests since the node was made (by
	// batch, like TotalBlock) by the type of the rule that refused them:
	// BlockedBy[sluice.BlockFlow] is what flow rules refused, and so on;
	// index 0 counts block types beyond the built-in ones. Its elements
	// add up to TotalBlock when no entry races the snapshot.
	BlockedBy [blockTypes]uint64
	// ShadowBlockedBy counts, by block type like BlockedBy, the requests
	// that rules in shadow mode would have refused since the node was made
	// (they were let through): what those rules would do if enforced. An
	// entry that two shadow rules of one type would refuse counts twice.
	ShadowBlockedBy [blockTypes]uint64
	// Tier is the step a tiered flow rule of the resource is on
	// (rules.Flow.Tiers): 0 for the rule's own Threshold, i for Tiers[i-1];
	// 0 without such a rule.
	Tier int
}

// System is a copy of the last good readings of the host metrics that
// system rules use, and their ages.
type System struct {
	// Load1 is the host's one-minute load average; NaN before the first
	// good reading.
	Load1 float64
	// CPUUsage is the process's CPU usage, a ratio in [0, 1] of what it may
	// use; NaN before the first good reading.
	CPUUsage float64
	// Memory is the process's resident set size in bytes; zero before the
	// first good reading.
	Memory uint64
	// Load1Age, CPUUsageAge and MemoryAge are how long ago (on the
	// engine's clock) each value was read; -1 before the first good
	// reading.
	Load1Age, CPUUsageAge, MemoryAge time.Duration
	// Inbound is the statistics of all inbound traffic (every resource's
	// entries of sluice.Inbound), which system rules on inbound QPS,
	// concurrency and RT read: counted only while a system rule is in
	// force (see sluice.Engine.SystemMetrics).
	Inbound Snapshot `json:"-"`
}

// Second is what a resource counted in one second of the engine's clock:
// an element of Engine.History. Counts are of requests (an entry with a
// batch of n counts n).
type Second struct {
	// Start is the engine clock's reading at the start of the second, in
	// nanoseconds (a whole number of seconds).
	Start int64
	// Pass, Block, Complete and Error count the requests that passed, were
	// refused, exited, and exited with an error in the second.
	Pass, Block, Complete, Error uint64
	// AvgRT is the mean response time of the requests that exited in the
	// second, and MinRT the smallest, both to the microsecond; zero when
	// none exited. Like Snapshot.AvgRT, they may come from a sample of the
	// exits, and so may MeanConcurrency.
	AvgRT, MinRT time.Duration
	// MeanConcurrency is the response times of the requests that exited in
	// the second, summed, over one second: by Little's law the mean number
	// of requests in flight during the second, when response times are
	// short against a second (a request's whole time counts in the second
	// it exits in).
	MeanConcurrency float64
	// MaxConcurrency is the highest number of requests in flight at any
	// instant of the second (by batch): the number in flight at its start,
	// or right after one of its passes, whichever is highest. On a
	// resource whose calls contend across cores (its counters striped),
	// the passes' numbers are sampled, and a peak between two samples can
	// be missed.
	MaxConcurrency int64
	// ShadowBlock counts the requests of the second that rules in shadow
	// mode would have refused (see Snapshot.ShadowBlockedBy).
	ShadowBlock uint64
	// AdaptiveLimit is the limit of the resource's adaptive concurrency
	// rule in force at the end of the second (Snapshot.AdaptiveLimit as it
	// read then); zero when the resource had none.
	AdaptiveLimit int64
}

// EventKind names what an Event reports.
type EventKind string

const (
	// EventRulesLoaded: a load put new rules of kind RuleKind in force
	// (loads that change nothing report nothing). A rule set loaded whole
	// reports one event per kind it changed, in the order of rules.Set.
	EventRulesLoaded EventKind = "rules-loaded"
	// EventRulesRefused: a load was refused and changed nothing; Err says
	// why (an *rules.Error, reached with errors.As, for an invalid rule).
	// RuleKind is "set": a load is of the whole set (Engine.LoadRules,
	// Engine.UpdateRules).
	EventRulesRefused EventKind = "rules-refused"
	// EventBreaker: a circuit breaker of Resource changed state, From and
	// To ("closed", "open", "half-open"); Rule is its rules.CircuitBreaker
	// and Value the figure that caused the change:
	//   - closed to open: the observed value that crossed the threshold
	//     (the ratio of slow or failed calls, or the error count);
	//   - open to half-open: 0;
	//   - half-open to open: the failed probe's response time in
	//     milliseconds, or, when probes that never exited were given up,
	//     the milliseconds since the last of them was admitted;
	//   - half-open to closed: the number of successful probes.
	EventBreaker EventKind = "breaker"
	// EventSheddingStarted: system protection refused an inbound entry
	// after refusing none for at least a second.
	EventSheddingStarted EventKind = "shedding-started"
	// EventSheddingStopped: system protection has refused nothing for a
	// second. It is noticed at the next system refusal, the next sample
	// of the system metrics sampler, or the next call of Engine.History,
	// Snapshot, SystemMetrics or Each, whichever comes first; At is when it
	// was noticed.
	EventSheddingStopped EventKind = "shedding-stopped"
	// EventClusterFallback: the engine's cluster store failed and limits
	// shared across instances are now decided by their fallback; Err is the
	// store's error. Resource is empty: the store serves every cluster rule.
	// Value is the instance count local shares divide by (ClusterStatus
	// says where it comes from). It comes again, without a recovery
	// between, when a probe of the failing store fails otherwise than the
	// last call (a Redis that restarted, EOF, now refuses the password):
	// Err is then the new cause.
	EventClusterFallback EventKind = "cluster-fallback"
	// EventClusterRecovered: the cluster store answers again and decides
	// the shared limits. Resource is empty.
	EventClusterRecovered EventKind = "cluster-recovered"
	// EventWatchFired: a watch's metric over its window reached its
	// threshold (see Engine.Watch). Watch is the watch, Resource its
	// resource, Value the metric over the window, and At the end of the
	// window: the window is the Watch.Window before At, whole seconds. It
	// fires once per crossing: again only after an EventWatchCleared.
	EventWatchFired EventKind = "watch-fired"
	// EventWatchCleared: the metric of a watch that fired fell back below
	// its threshold; the fields are those of EventWatchFired.
	EventWatchCleared EventKind = "watch-cleared"
	// EventTier: a tiered flow rule of Resource (rules.Flow.Tiers) moved
	// from step From to step To ("0" for the rule's own Threshold, "i" for
	// Tiers[i-1]); Rule is its rules.Flow, Value the metric that moved it
	// (milliseconds for avg-rt, a ratio otherwise) and At when it was read.
	EventTier EventKind = "tier"
	// EventAdaptive: the limit of an adaptive concurrency rule of Resource
	// (rules.Flow.Adaptive) moved materially: by a tenth or more since the
	// last EventAdaptive of the rule (its Initial before the first), or
	// onto its Min or Max. It is published at the window decision that
	// moved it, so at most once per sample window. Rule is its rules.Flow,
	// From the limit the last event reported, To and Value the new limit,
	// At the decision's time.
	EventAdaptive EventKind = "adaptive-limit"
)

// Event is one entry of an engine's event stream (Engine.Subscribe). Only
// the fields its Kind names are set.
type Event struct {
	// Kind says what happened.
	Kind EventKind
	// At is the engine clock's reading when it happened, in nanoseconds.
	At int64
	// RuleKind is the kind of rules loaded or refused: "flow",
	// "isolation", "system", "circuit breaker", "param", or "set".
	RuleKind string
	// Resource is the resource of a breaker or of a shared limit.
	Resource string
	// Rule is the rule concerned (a breaker's rules.CircuitBreaker), by
	// value; nil when none.
	Rule any
	// From and To are a breaker's states before and after.
	From, To string
	// Value is the figure that caused a breaker's change, or a watch's
	// metric over its window.
	Value float64
	// Err is why rules were refused, or why a shared limit fell back.
	Err error
	// Watch is the watch that fired or cleared.
	Watch Watch
}

// Metric names what a Watch measures over its window.
type Metric uint8

const (
	// MetricPass is the number of requests that passed (by batch).
	MetricPass Metric = iota + 1
	// MetricBlock is the number of requests refused.
	MetricBlock
	// MetricComplete is the number of requests that exited.
	MetricComplete
	// MetricError is the number of requests that exited with an error.
	MetricError
	// MetricAvgRT is the mean response time of the requests that exited,
	// in milliseconds; zero when none exited.
	MetricAvgRT
	// MetricMaxConcurrency is the highest number of requests in flight
	// (Second.MaxConcurrency, the largest of the window's seconds).
	MetricMaxConcurrency
)

// String returns the metric's lower-case name ("pass", "block",
// "complete", "error", "avg-rt", "max-concurrency").
func (m Metric) String() string {
	switch m {
	case MetricPass:
		return "pass"
	case MetricBlock:
		return "block"
	case MetricComplete:
		return "complete"
	case MetricError:
		return "error"
	case MetricAvgRT:
		return "avg-rt"
	case MetricMaxConcurrency:
		return "max-concurrency"
	}
	return "Metric(" + strconv.Itoa(int(m)) + ")"
}

// Watch asks for an event when Metric of Resource over a sliding window of
// Window reaches Threshold (EventWatchFired), and again when it falls back
// below (EventWatchCleared): "tell me when errors reach 250 in any minute"
// is Watch{Resource: r, Metric: MetricError, Window: time.Minute,
// Threshold: 250}. See Engine.Watch.
type Watch struct {
	// Resource is the resource watched. It need not be tracked yet: until
	// it is (and once it is forgotten), its seconds count as quiet.
	Resource string
	// Metric is what is measured.
	Metric Metric
	// Window is the length of the sliding window: a whole number of
	// seconds, from one second to the engine's history length
	// (sluice.WithHistory).
	Window time.Duration
	// Threshold is the value, in the metric's unit (requests; milliseconds
	// for MetricAvgRT), at or above which the watch fires. It must be
	// positive and finite.
	Threshold float64
}

// BreakerState is a circuit breaker's state.
type BreakerState uint8

const (
	// BreakerClosed lets calls through and counts their outcomes.
	BreakerClosed BreakerState = iota
	// BreakerOpen refuses every call until the retry timeout has passed.
	BreakerOpen
	// BreakerHalfOpen lets a fixed number of probe calls through to decide whether
	// to close or open again.
	BreakerHalfOpen
)

// String returns "closed", "open" or "half-open".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("BreakerState(%d)", uint8(s))
}
