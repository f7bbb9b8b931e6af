// Package slots holds the contracts of custom slots: code a program adds to
// an engine's chain with Engine.RegisterSlot to observe entries or refuse
// them by rules of its own.
//
// The built-in slots run first, in this order: system, flow, isolation,
// param, degrade; then the statistics are recorded. Custom slots run after
// the built-in ones, ordered by the position given at registration. A value
// registered as a slot implements at least one of Preparer, Checker and
// Observer.
//
// A custom slot sees an Entry made for it: the entry's arguments
// (sluice.WithArgs) are not part of it, because they belong to the caller's
// stack frame; that is what keeps entries on the built-in path free of
// allocations. Engines without custom slots pay one pointer check for the
// feature.
package slots

import (
	"github.com/sluice-go/sluice/internal/core"
)

// Entry is what a custom slot sees of one entry. It is made for the custom
// slots of that entry and stays valid after the calls return.
type Entry struct {
	// Resource is the name of the protected resource.
	Resource string
	// Traffic is the entry's traffic type.
	Traffic core.TrafficType
	// Caller is the calling application (sluice.WithCaller), empty when
	// the entry names none.
	Caller string
	// Batch is how many requests the entry stands for; at least 1.
	Batch int64
	// Start is the engine clock's reading when the entry began, in
	// nanoseconds on the engine's clock (sluice.Clock.Nanotime).
	Start int64
}

// Preparer runs first for every entry, before any rule check.
type Preparer interface {
	Prepare(e *Entry)
}

// Checker decides whether an entry may pass. Check returns nil to let the
// entry through or a *sluice.BlockError to refuse it; a refusal whose Type is
// zero is reported as sluice.BlockCustom (and one without a Resource names
// the entry's), in a copy: the engine never writes to the error, so a
// checker may return one error for many refusals. Checkers run after the built-in
// checks, so a refusal here gives back what the built-in checks reserved.
//
// A Checker that reserves something of its own (a token, a slot) should
// also be an Observer, and give it back in OnBlock (a later check refused
// the entry) or OnExit.
type Checker interface {
	Check(e *Entry) *core.BlockError
}

// Observer learns the outcome of entries.
type Observer interface {
	// OnPass is called when the entry passed every check.
	OnPass(e *Entry)
	// OnBlock is called when a check refused the entry. err may be shared
	// with other refusals and with the caller of Entry: read it only.
	OnBlock(e *Entry, err *core.BlockError)
	// OnExit is called once when a passed entry exits, with the engine
	// clock's reading at Exit (end, in nanoseconds: end-e.Start is the
	// response time) and the error the caller recorded with Pass.SetError,
	// if any.
	OnExit(e *Entry, end int64, err error)
}
