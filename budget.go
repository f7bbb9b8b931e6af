package sluice

import (
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
)

// optBudget is the option kind of WithBudget (a value of its own, apart
// from the kinds counted up from optNone, so that other options added
// beside it never share it).
const optBudget optKind = 200

// WithBudget asks the engine to fill *b with the remaining budget of the
// tightest rate rule that decided the entry (see Budget): on a pass
// with what remains after the entry, on a refusal by a rate rule with that
// rule's. b is written during Entry (or Do, before fn runs) and not kept;
// a local variable stays on the caller's stack, so asking costs no
// allocation. Without the option no rule computes its budget. A nil b is
// ignored.
func WithBudget(b *core.Budget) EntryOption {
	if b == nil {
		return EntryOption{}
	}
	// The pointer travels in the attachment's interface word: an option
	// then needs no field of its own (see EntryOption).
	return EntryOption{kind: optBudget, arg: entry.Arg{Value: entry.Value{Any: b}}}
}

// budgetOut returns the *Budget of a WithBudget option.
func budgetOut(o *EntryOption) *core.Budget {
	b, _ := o.arg.Value.Any.(*core.Budget)
	return b
}
