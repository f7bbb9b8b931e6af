package sluice

import "github.com/sluice-go/sluice/internal/core"

// The vocabulary of entries and refusals. These names are defined in an
// internal package that the engine's machinery, custom slots (package slots)
// and statistics (package stat) share; a program names them here, so that
// limiting a handler, a per-user limit or a breaker needs only this package
// and package rules (docs/design/architecture.md, "The public surface").
// Each is the same type as the one those packages' signatures show as
// core.X: a *sluice.BlockError is what slots.Checker.Check returns, a
// sluice.Clock is what cluster/filestore.Config.Clock holds.

// ErrBlocked is matched by every error returned for an entry that a rule
// refused: errors.Is(err, ErrBlocked) is true for any *BlockError.
var ErrBlocked = core.ErrBlocked

// BlockError describes why an entry was refused: its Type, Resource, Rule
// (RuleRef), Observed and Threshold, RetryAfter, Reason and Cause, and
// whether it was refused for overload (Overloaded). Entry returns it as an
// error, never as a typed nil; errors.As reaches it. It may be shared by
// equal refusals (so that they allocate nothing): read it, never write to
// it.
type BlockError = core.BlockError

// BlockType names the kind of rule that refused an entry; its String is
// "flow", "system", "param", "degrade", "cluster", "custom" or "authority".
type BlockType = core.BlockType

// The kinds of rule that refuse entries (BlockError.Type).
const (
	BlockFlow      = core.BlockFlow      // a flow (QPS or concurrency) rule
	BlockSystem    = core.BlockSystem    // a system adaptive protection rule
	BlockParam     = core.BlockParam     // a hot-parameter rule
	BlockDegrade   = core.BlockDegrade   // an open or probing circuit breaker
	BlockCluster   = core.BlockCluster   // a limit shared across instances
	BlockCustom    = core.BlockCustom    // a user-registered rule-check slot
	BlockAuthority = core.BlockAuthority // an authority rule: the caller is not allowed
)

// RuleRef names the rule that refused an entry (BlockError.Rule) or that a
// Budget describes: its ID and Metric.
type RuleRef = core.RuleRef

// Budget is what is left of the tightest rate rule that decided an entry,
// filled for an entry that asks with WithBudget: Limit, Remaining, Reset,
// Window and Rule (docs/rules.md, "Remaining budget").
type Budget = core.Budget

// Priority says how much an entry matters when a resource is overloaded
// (WithPriority); the zero value is PriorityDefault.
type Priority = core.Priority

// The priorities of an entry (WithPriority).
const (
	PriorityDefault   = core.PriorityDefault   // an entry that names none
	PrioritySheddable = core.PrioritySheddable // work dropped first: prefetches, retries, batch jobs
	PriorityCritical  = core.PriorityCritical  // work that keeps a share of adaptive limits and system protection
)

// TrafficType says whether an entry is a call into this process (Inbound,
// the default) or one this process makes (Outbound); system protection
// checks only Inbound traffic (WithTraffic).
type TrafficType = core.TrafficType

// The traffic types of an entry (WithTraffic).
const (
	Inbound  = core.Inbound  // a call into this process: a request served
	Outbound = core.Outbound // a call this process makes: never blocked by system rules
)

// Clock is the source of time for an engine (WithClock): Nanotime and
// NewTimer. sluicetest.ManualClock drives it by hand in tests.
type Clock = core.Clock

// Timer is a one-shot timer made by a Clock.
type Timer = core.Timer
