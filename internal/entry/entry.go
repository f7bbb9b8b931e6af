// Package entry holds what the built-in slots see of one entry: its
// identity, batch and start instant, its arguments, and the tickets its
// checks hold until it ends; and the statistic slot (statistic.go), which
// records the entry's pass, block and exit on its resource's node; and the
// chain of an engine's custom slots (chain.go) that an entry runs through.
package entry

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/internal/clock"
	"github.com/sluice-go/sluice/internal/core"
)

// Context is what the built-in slots see of one entry: a pointer into the
// entry itself, valid only for the duration of the call.
type Context struct {
	// Resource is the name of the protected resource.
	Resource string
	// Traffic is the entry's traffic type.
	Traffic core.TrafficType
	// Priority is the entry's priority (sluice.WithPriority).
	Priority core.Priority
	// timed is set when a ticket needs the exit's clock reading
	// (ExitTimed); gate is 1 + the index among the tickets of the one that
	// decides at Exit (ExitTimedIfGate), 0 when there is none. They sit in
	// the padding before Batch, so that they cost the entry no space.
	timed bool
	gate  uint8
	// WantBudget is set when the entry asked for its remaining budget
	// (sluice.WithBudget): rate rules then note theirs in Budget. (In the
	// same padding as timed and gate.)
	WantBudget bool
	// Batch is how many requests the entry stands for; at least 1.
	Batch int64
	// Start is the engine clock's reading when the entry began, in
	// nanoseconds.
	Start int64
	// Life is the lifetime of the engine that makes the entry: it ends
	// when the engine closes, and a check waiting for the entry (Sleep)
	// stops waiting then. Nil means no engine to wait for.
	Life context.Context

	// Budget is the tightest budget noted so far (NoteBudget), or the
	// refusing rule's; meaningful only with WantBudget.
	Budget core.Budget

	tickets [4]Ticket
	n       int
	more    []Ticket
	undo    [4]Ticket
	nu      int
	moreU   []Ticket
}

// ExitClock is what a ticket's Release reads of its entry's exit: the
// engine reads the clock at Exit only when a ticket the entry holds needs
// it, and otherwise gives the tickets an estimate as ExitInfo.End: a
// reading no earlier than the entry's start and no later than its exit
// (the latest clock reading of an Entry on the engine; see
// docs/design/architecture.md, "The clock").
type ExitClock uint8

const (
	// ExitTimed: the release reads the response time or the exact instant
	// of the exit (a slow-call breaker, a half-open probe, an adaptive
	// limit's sample). AddTicket adds tickets so.
	ExitTimed ExitClock = iota
	// ExitTimedIfGate: the ticket, a ClockGate, decides at Exit.
	ExitTimedIfGate
	// ExitUntimed: neither the response time nor the instant; the
	// estimate will do (a concurrency slot given back).
	ExitUntimed
)

// ClockGate is a ticket that decides at Exit whether its release needs the
// exit's clock reading (ExitTimedIfGate).
type ClockGate interface {
	Ticket
	// ExitNeedsClock reports whether the release of an entry ending with
	// (failed) or without an error needs the exact instant or response
	// time, given est, the estimate of the exit's instant (no later than
	// the exit).
	ExitNeedsClock(failed bool, est int64) bool
}

// Ticket is something a rule check holds for an entry that passed it: a
// reserved token, an in-flight slot, a circuit-breaker probe. The engine calls
// Release exactly once per ticket: when the entry exits, or when a later check
// blocks the entry.
type Ticket interface {
	Release(x ExitInfo)
}

// ExitInfo is what a ticket learns when its entry ends.
type ExitInfo struct {
	// Start is the clock reading when the entry began, in nanoseconds.
	Start int64
	// End is the clock reading at Exit, in nanoseconds; equal to Start when
	// the entry was blocked.
	End int64
	// Batch is the entry's batch count.
	Batch int64
	// Err is the error recorded with SetError, if any.
	Err error
	// Blocked is true when a later check refused the entry: the protected
	// code never ran and anything reserved must be given back.
	Blocked bool
}

// RT returns the entry's response time in nanoseconds (End - Start).
func (info ExitInfo) RT() int64 { return info.End - info.Start }

// AddTicket records t to be released when the entry ends, with the exit's
// clock read for it (ExitTimed).
func (c *Context) AddTicket(t Ticket) {
	c.timed = true
	c.addTicket(t)
}

// AddTicketClock records t to be released when the entry ends, needing of
// the exit's clock what need says. With ExitTimedIfGate, t must be a
// ClockGate; an entry holds one gate, and a second is taken as ExitTimed.
func (c *Context) AddTicketClock(t Ticket, need ExitClock) {
	switch need {
	case ExitTimed:
		c.timed = true
	case ExitTimedIfGate:
		if i := c.n + len(c.more); c.gate != 0 || i >= maxGate {
			c.timed = true
		} else {
			_ = t.(ClockGate) // (a misuse fails here, not at Exit)
			c.gate = uint8(i + 1)
		}
	}
	c.addTicket(t)
}

// maxGate bounds the index of a gate ticket that Context.gate can hold.
const maxGate = 255

// ExitNeedsClock reports whether a ticket the entry holds needs the exit's
// clock reading, for an entry ending with (failed) or without an error.
// recent is the engine's latest clock reading of an Entry: the tickets get
// max(Start, recent) as the exit's instant otherwise (it is read only when
// a ClockGate asks). Engines call it; slots do not.
func (c *Context) ExitNeedsClock(failed bool, recent *atomic.Int64) bool {
	return c.timed || c.gate != 0 && c.askGate(failed, recent)
}

// askGate asks the entry's gate ticket whether its release needs the clock.
func (c *Context) askGate(failed bool, recent *atomic.Int64) bool {
	i := int(c.gate) - 1
	var t Ticket
	if i < len(c.tickets) {
		t = c.tickets[i]
	} else {
		t = c.more[i-len(c.tickets)]
	}
	return t.(ClockGate).ExitNeedsClock(failed, max(c.Start, recent.Load()))
}

func (c *Context) addTicket(t Ticket) {
	if c.n < len(c.tickets) {
		c.tickets[c.n] = t
		c.n++
		return
	}
	c.more = append(c.more, t)
}

// AddUndo records t to be released only if a later check refuses the entry
// (x.Blocked); when the entry passes, the engine forgets it (DropUndo) and t
// is never called. It is for reservations that need giving back only on
// refusal, such as a token taken from a window, and spares them a call at
// Exit.
func (c *Context) AddUndo(t Ticket) {
	if c.nu < len(c.undo) {
		c.undo[c.nu] = t
		c.nu++
		return
	}
	c.moreU = append(c.moreU, t)
}

// DropUndo forgets the tickets recorded with AddUndo: the entry passed.
// Engines call it; slots do not.
func (c *Context) DropUndo() {
	c.nu = 0
	c.moreU = c.moreU[:0]
}

// ReleaseTickets releases every ticket once, in reverse order of
// acquisition, and forgets them; with x.Blocked it also releases the tickets
// recorded with AddUndo. Engines call it; slots do not.
func (c *Context) ReleaseTickets(x ExitInfo) {
	if x.Blocked {
		for i := len(c.moreU) - 1; i >= 0; i-- {
			c.moreU[i].Release(x)
			c.moreU[i] = nil
		}
		c.moreU = c.moreU[:0]
		for i := c.nu - 1; i >= 0; i-- {
			c.undo[i].Release(x)
			c.undo[i] = nil
		}
		c.nu = 0
	}
	for i := len(c.more) - 1; i >= 0; i-- {
		c.more[i].Release(x)
		c.more[i] = nil
	}
	c.more = c.more[:0]
	for i := c.n - 1; i >= 0; i-- {
		c.tickets[i].Release(x)
		c.tickets[i] = nil
	}
	c.n = 0
	c.timed, c.gate = false, 0
}

// ReleaseRefused releases every ticket, undo-only ones included, for an
// entry refused (or abandoned) before its protected code ran: ReleaseTickets
// with Blocked set and the entry ending where it started. Engines call it;
// slots do not.
func (c *Context) ReleaseRefused() {
	c.ReleaseTickets(ExitInfo{Start: c.Start, End: c.Start, Batch: c.Batch, Blocked: true})
}

// HoldsTickets reports whether the entry holds tickets to release at its
// exit (undo-only ones aside): one load, for the exit path.
func (c *Context) HoldsTickets() bool { return c.n != 0 }

// Tickets returns how many tickets the entry holds, undo-only ones
// included.
func (c *Context) Tickets() int { return c.n + len(c.more) + c.nu + len(c.moreU) }

// ErrClosed is what Sleep returns when the entry's engine closes while it
// waits (the root package's ErrClosed).
var ErrClosed = errors.New("sluice: engine closed")

// Sleep waits d on clk for a check of the entry (a throttling rule's turn).
// It returns nil after the full wait, ctx's error when ctx (nil: none) ends
// first, and ErrClosed when the entry's engine closes first (see Life). A
// non-positive d returns at once. A wait that ends after ctx's deadline
// returns context.DeadlineExceeded at once instead of waiting to fail (the
// deadline is read on the wall clock, time.Until, on which the context ends
// whatever clk reads); checks that can, refuse such a wait before they
// reserve anything. It allocates only when it waits.
func (c *Context) Sleep(ctx context.Context, clk core.Clock, d time.Duration) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if dl, ok := ctx.Deadline(); ok && d > 0 && time.Until(dl) < d {
		return context.DeadlineExceeded
	}
	if d > 0 && c.Life != nil {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		stop := context.AfterFunc(c.Life, func() { cancel(ErrClosed) })
		defer func() {
			stop()
			cancel(nil)
		}()
	}
	err := clock.Sleep(ctx, clk, d)
	if err != nil && context.Cause(ctx) == ErrClosed {
		return ErrClosed
	}
	return err
}

// Kind says which field of a Value holds it.
type Kind uint8

const (
	// KindNone is no value: the argument was not given.
	KindNone Kind = iota
	// KindString is a string, in Value.Str.
	KindString
	// KindInt is an integer, in Value.Int.
	KindInt
	// KindAny is a value of any type, in Value.Any (possibly nil).
	KindAny
)

// Value is the value of one argument. The typed options
// (sluice.WithStringArg, WithIntArg, WithStringAttachment,
// WithIntAttachment) fill Str or Int, which hold no interface, so carrying
// them never allocates; WithArgs and WithAttachment fill Any.
type Value struct {
	Str  string
	Any  any
	Int  int64
	Kind Kind
}

// Arg is an argument given by an entry option of its own: an attachment
// (Named, found by Key) or a typed positional argument (found by Index).
type Arg struct {
	Key string
	Value
	Index int
	Named bool
}

// Args are an entry's arguments: positional ones given together
// (sluice.WithArgs) and those given one per option (attachments and typed
// arguments), in option order. They belong to the entry and are lent to the
// param slot for the duration of its check; nothing may keep them or
// anything they point to, which is what lets them stay on the caller's
// stack.
type Args struct {
	Positional []any
	Given      []*Arg
	// Caller is the identity of the calling application
	// (sluice.WithCaller), validated; empty when the entry names none. It
	// points into the entry's options, like the arguments, and must not be
	// kept (strings.Clone it).
	Caller string
}

// At returns positional argument i: the last typed argument given at i,
// as v, or else the i-th value of WithArgs, as x (possibly nil); v is nil
// when x is the answer, and both are nil when there is neither. v points
// into the entry's options and must not be kept. (Pointer and interface,
// rather than a Value: copying a 48-byte Value through memory cost a check
// about 5 ns.)
func (a Args) At(i int) (v *Value, x any) {
	for j := len(a.Given) - 1; j >= 0; j-- {
		if g := a.Given[j]; !g.Named && g.Index == i {
			return &g.Value, nil
		}
	}
	if uint(i) < uint(len(a.Positional)) {
		return nil, a.Positional[i]
	}
	return nil, nil
}

// Named returns the value attached under key, the last one when key was
// attached more than once, or nil when there is none. It points into the
// entry's options and must not be kept.
func (a Args) Named(key string) *Value {
	for j := len(a.Given) - 1; j >= 0; j-- {
		if g := a.Given[j]; g.Named && g.Key == key {
			return &g.Value
		}
	}
	return nil
}
