package sluice

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/internal/chain"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/statistic"
	"github.com/sluice-go/sluice/internal/window"
	"github.com/sluice-go/sluice/slots"
)

// ErrBadBatch is returned (wrapped) by Entry for a batch count below one or
// above MaxBatch.
var ErrBadBatch = errors.New("sluice: invalid batch count")

// MaxBatch is the largest batch count one entry may carry.
const MaxBatch = 1 << 30

// EntryOption configures one entry. Options are plain values (no closures)
// so that building them and applying them never allocates.
//
// There is deliberately no option carrying a context.Context: use
// EntryContext. A context held in the options would make the Go compiler move
// every argument given with WithArgs to the heap (see docs/architecture.md).
type EntryOption struct {
	kind optKind
	n    int64
	args []any
	arg  entry.Arg
}

type optKind uint8

const (
	optNone optKind = iota
	optTraffic
	optBatch
	optArgs
	optArg // an attachment or a typed positional argument, in arg
)

// MaxAttachments is the most values one entry may carry one per option:
// attachments (WithAttachment, WithStringAttachment, WithIntAttachment) and
// typed positional arguments (WithStringArg, WithIntArg) together.
const MaxAttachments = 8

// ErrTooManyAttachments is returned (wrapped) by Entry for an entry with
// more than MaxAttachments attachments and typed arguments.
var ErrTooManyAttachments = errors.New("sluice: too many attachments")

// WithTraffic sets the entry's traffic type. The default is Inbound.
func WithTraffic(t TrafficType) EntryOption { return EntryOption{kind: optTraffic, n: int64(t)} }

// WithBatch makes the entry stand for n requests: QPS rules count n, and
// concurrency rules count n in flight. n must be in [1, MaxBatch]; a batch
// larger than a rule's threshold is always refused by that rule.
func WithBatch(n int) EntryOption { return EntryOption{kind: optBatch, n: int64(n)} }

// WithArgs passes positional arguments of any type for param rules (a rule
// with Index i reads the i-th). They belong to the entry: the engine reads
// them during Entry and keeps none of them. Each is boxed in an interface,
// and whether a box costs an allocation is the compiler's escape analysis's
// call: today nothing the engine does with the boxes lets them escape, so
// strings and integers cost none, but that is an observation, not a
// promise. For a string or an integer, WithStringArg and WithIntArg carry no
// interface and never allocate. A later WithArgs replaces an earlier one.
func WithArgs(args ...any) EntryOption { return EntryOption{kind: optArgs, args: args} }

// WithStringArg passes s as positional argument i for param rules (those
// with Index i), in place of the i-th value of WithArgs; a later typed
// argument at the same index wins. It never allocates: it carries no
// interface, and s is read during Entry and not kept. It counts towards
// MaxAttachments. (An index no rule can name, below 0 or above
// rules.MaxParamIndex, is carried but never read.)
func WithStringArg(i int, s string) EntryOption {
	return EntryOption{kind: optArg, arg: entry.Arg{Index: i, Value: entry.Value{Str: s, Kind: entry.KindString}}}
}

// WithIntArg is WithStringArg for an integer, whose string form for param
// rules (and their Exceptions) is its decimal form: WithIntArg(0, 42) and
// WithStringArg(0, "42") are the same value.
func WithIntArg(i int, n int64) EntryOption {
	return EntryOption{kind: optArg, arg: entry.Arg{Index: i, Value: entry.Value{Int: n, Kind: entry.KindInt}}}
}

// WithAttachment attaches a named value of any type, for param rules that
// read a named key. Like WithArgs, it is read during Entry and not kept, and
// boxing it may allocate (see WithArgs). An entry carries at most
// MaxAttachments; a later attachment with the same key wins, typed or not.
func WithAttachment(key string, value any) EntryOption {
	return EntryOption{kind: optArg, arg: entry.Arg{Key: key, Named: true, Value: entry.Value{Any: value, Kind: entry.KindAny}}}
}

// WithStringAttachment attaches the string s under key, for param rules that
// read that key. It never allocates (see WithStringArg).
func WithStringAttachment(key, s string) EntryOption {
	return EntryOption{kind: optArg, arg: entry.Arg{Key: key, Named: true, Value: entry.Value{Str: s, Kind: entry.KindString}}}
}

// WithIntAttachment attaches the integer n under key, for param rules that
// read that key; its string form is its decimal form. It never allocates.
func WithIntAttachment(key string, n int64) EntryOption {
	return EntryOption{kind: optArg, arg: entry.Arg{Key: key, Named: true, Value: entry.Value{Int: n, Kind: entry.KindInt}}}
}

// Pass is one admitted call into a resource: what Entry returns when every
// rule lets the call through. Call Exit exactly once when the protected work
// ends (a second Exit does nothing); typically `defer p.Exit()` right after a
// successful Entry, which also releases the pass if the protected code
// panics.
//
// A Pass belongs to the goroutine that made it: SetError and Exit are not
// safe to call concurrently with each other. (It is not called Entry because
// Go does not allow a type and a function of the same name in one package,
// and sluice.Entry is the verb every Sentinel user knows.)
type Pass struct {
	eng    *Engine
	res    *resource
	ctx    entry.Context
	err    error
	custom *slots.Entry    // what custom slots see, nil without them
	slots  *chain.Snapshot // the custom slots the entry ran through
	done   bool
}

// Resource returns the name of the resource the pass is for.
func (e *Pass) Resource() string { return e.ctx.Resource }

// SetError records err as the outcome of the protected work; circuit
// breakers and error statistics see it at Exit. A nil err clears it.
func (e *Pass) SetError(err error) { e.err = err }

// Err returns the error recorded with SetError.
func (e *Pass) Err() error { return e.err }

// Exit ends the entry: it records completion, RT and error, and releases
// everything the entry held (concurrency, circuit-breaker probes). Calling
// Exit again, or on a nil *Pass, does nothing.
func (e *Pass) Exit() {
	if e == nil || e.done {
		return
	}
	e.done = true
	g := e.eng
	now := g.clock.Nanotime()
	x := entry.ExitInfo{Start: e.ctx.Start, End: now, Batch: e.ctx.Batch, Err: e.err}
	e.ctx.ReleaseTickets(x)
	var in *window.Node
	if e.ctx.Traffic == core.Inbound {
		in = g.inbound
	}
	statistic.Exit(x, &e.res.node, in)
	if e.slots != nil {
		// The slots the entry passed through, not whatever is registered
		// now: a slot added meanwhile never saw this entry pass.
		for _, s := range e.slots.Stat {
			s.OnExit(e.custom, slots.Exit{End: now, Err: e.err})
		}
	}
}

// Entry asks to enter resource. It returns a *Pass when every rule lets the
// call through, and otherwise a nil *Pass and an error: a *BlockError (matching
// ErrBlocked) when a rule refused it, ErrBadBatch for an invalid batch, or
// ErrClosed.
func (g *Engine) Entry(resource string, opts ...EntryOption) (*Pass, error) {
	// Small enough to inline: the Entry is then allocated in the caller's
	// frame and, when the caller keeps it local, never reaches the heap.
	return g.enterNoCtx(new(Pass), resource, opts)
}

// EntryContext is Entry with a context that bounds any wait.
func (g *Engine) EntryContext(ctx context.Context, resource string, opts ...EntryOption) (*Pass, error) {
	return g.enter(new(Pass), ctx, resource, opts)
}

// enterNoCtx is enter without a context. It has one parameter fewer, which
// keeps the package-level Entry within the inliner's budget.
//
//go:noinline
func (g *Engine) enterNoCtx(e *Pass, name string, opts []EntryOption) (*Pass, error) {
	return g.enter(e, nil, name, opts)
}

// enter runs e through the chain and returns it, or nil and the reason.
func (g *Engine) enter(e *Pass, ctx context.Context, name string, opts []EntryOption) (*Pass, error) {
	e.eng = g
	c := &e.ctx
	c.Resource = name
	c.Batch = 1
	// Arguments stay in this frame and are lent to the param slot only.
	var (
		args  entry.Args
		given [MaxAttachments]*entry.Arg
		nn    int
	)
	for i := range opts {
		o := &opts[i]
		switch o.kind {
		case optTraffic:
			c.Traffic = core.TrafficType(o.n)
		case optBatch:
			c.Batch = o.n
		case optArgs:
			args.Positional = o.args
		case optArg:
			if nn == len(given) {
				return nil, fmt.Errorf("%w: more than %d", ErrTooManyAttachments, MaxAttachments)
			}
			given[nn] = &o.arg
			nn++
		}
	}
	args.Given = given[:nn]
	if c.Batch < 1 || c.Batch > MaxBatch {
		return nil, fmt.Errorf("%w: %d (want 1 to %d)", ErrBadBatch, c.Batch, MaxBatch)
	}
	if g.closed.Load() {
		return nil, ErrClosed
	}
	c.Start = g.clock.Nanotime()
	r := g.resource(name, c.Start)
	e.res = r
	var in *window.Node
	if c.Traffic == core.Inbound {
		in = g.inbound
	}
	snap := g.chain.Snapshot()
	if snap != nil {
		e.custom = customCopy(c)
		e.slots = snap
		for _, s := range snap.Prepare {
			s.Prepare(e.custom)
		}
	}
	if be := g.check(ctx, e, args, r, in, snap); be != nil {
		c.ReleaseTickets(entry.ExitInfo{Start: c.Start, End: c.Start, Batch: c.Batch, Blocked: true})
		statistic.Block(c, &r.node, in)
		if snap != nil {
			for _, s := range snap.Stat {
				s.OnBlock(e.custom, be)
			}
		}
		return nil, be
	}
	c.DropUndo()
	statistic.Pass(c, &r.node, in)
	if snap != nil {
		for _, s := range snap.Stat {
			s.OnPass(e.custom)
		}
	}
	return e, nil
}

// check runs the rule checks in chain order; the first refusal wins.
func (g *Engine) check(ctx context.Context, e *Pass, args entry.Args, r *resource, in *window.Node, snap *chain.Snapshot) *core.BlockError {
	c := &e.ctx
	if in != nil && g.system.Active() {
		if be := g.system.Check(c); be != nil {
			return be
		}
	}
	if f := r.fast.Load(); f != 0 {
		if be := r.admit(c, f); be != nil {
			return be
		}
	} else if rs := r.rules.Load(); rs != nil {
		for i := range rs.flow {
			if be := rs.flow[i].Check(ctx, c, g.clock); be != nil {
				return be
			}
		}
		if o := rs.other; o != nil {
			for _, f := range o.isolation {
				if be := f.Check(c); be != nil {
					return be
				}
			}
			for _, f := range o.param {
				if be := f.Check(ctx, c, args, g.clock); be != nil {
					return be
				}
			}
			for _, f := range o.degrade {
				if be := f.Check(c); be != nil {
					return be
				}
			}
		}
	}
	if snap != nil {
		for _, s := range snap.Check {
			if be := s.Check(e.custom); be != nil {
				if be.Type == 0 {
					be.Type = core.BlockCustom
				}
				if be.Resource == "" {
					be.Resource = c.Resource
				}
				return be
			}
		}
	}
	return nil
}

// customCopy is the entry custom slots see: a heap copy of the entry's
// context (its arguments never leave the entry).
func customCopy(c *entry.Context) *slots.Entry {
	return &slots.Entry{
		Resource: c.Resource,
		Traffic:  c.Traffic,
		Batch:    c.Batch,
		Start:    c.Start,
	}
}
