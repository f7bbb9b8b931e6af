package sluice

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/internal/chain"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/statistic"
	"github.com/sluice-go/sluice/internal/window"
	"github.com/sluice-go/sluice/slots"
)

// Errors Entry returns (wrapped, with the offending value) for an entry it
// cannot make sense of. The entry is not counted anywhere.
var (
	// ErrBadBatch: a batch count below one or above 2^30.
	ErrBadBatch = errors.New("sluice: invalid batch count")
	// ErrBadTraffic: a traffic type other than Inbound and Outbound.
	ErrBadTraffic = errors.New("sluice: invalid traffic type")
	// ErrBadResource: an empty resource name, or one longer than the
	// engine's limit (Limits.NameBytes).
	ErrBadResource = errors.New("sluice: invalid resource name")
	// ErrTooManyAttachments: more than eight attachments and typed
	// arguments together (WithAttachment, WithStringAttachment,
	// WithIntAttachment, WithStringArg, WithIntArg).
	ErrTooManyAttachments = errors.New("sluice: too many attachments")
)

// maxBatch is the largest batch count one entry may carry.
const maxBatch = 1 << 30

// EntryOption configures one entry. Options are plain values (no closures)
// so that building them and applying them never allocates.
//
// There is deliberately no option carrying a context.Context: use
// EntryContext. A context held in the options would make the Go compiler move
// every argument given with WithArgs to the heap (see docs/design/architecture.md).
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

// maxAttachments is the most values one entry may carry one per option:
// attachments (WithAttachment, WithStringAttachment, WithIntAttachment) and
// typed positional arguments (WithStringArg, WithIntArg) together.
const maxAttachments = 8

// WithTraffic sets the entry's traffic type. The default is Inbound.
func WithTraffic(t core.TrafficType) EntryOption { return EntryOption{kind: optTraffic, n: int64(t)} }

// WithBatch makes the entry stand for n requests: QPS rules count n, and
// concurrency rules count n in flight. n must be in [1, 2^30]; a batch
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
// the eight attachments an entry may carry (see ErrTooManyAttachments). (An index no rule can name, below 0 or above
// 255, is carried but never read.)
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
// eight (see ErrTooManyAttachments); a later attachment with the same key wins, typed or not.
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
// panics (but counts it as a success: Do counts a panic as an error).
//
// A Pass belongs to the goroutine that made it: SetError and Exit are not
// safe to call concurrently with each other. Only Entry and EntryContext
// make one; the zero Pass is not usable. Every method may be called on a nil
// *Pass, and does nothing (or returns the zero value). Do not copy a Pass
// (go vet's copylocks check reports copies): a copy shares its original's
// release, so of the two, only the first Exit releases anything. (It is not
// called Entry because Go does not allow a type and a function of the same
// name in one package, and sluice.Entry is the verb every Sentinel user
// knows.)
type Pass struct {
	_      noCopy
	eng    *Engine
	res    *resource
	ctx    entry.Context
	err    error
	custom *slots.Entry    // what custom slots see, nil without them
	slots  *chain.Snapshot // the custom slots the entry ran through
	// guard and gen make Exit release once across copies of the Pass: Exit
	// releases only if it moves guard from gen to gen+1, and a copy holds
	// the same guard and gen. Guards are recycled (their generation goes on
	// counting), so the pass path allocates nothing.
	guard *passGuard
	gen   uint64
}

// noCopy makes go vet's copylocks check report a copied Pass.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

// passGuard is the release right of one pass at a time (see Pass.guard).
type passGuard struct{ gen atomic.Uint64 }

var passGuards = sync.Pool{New: func() any { return new(passGuard) }}

// arm gives p its release right; enter calls it once the entry passed.
func (p *Pass) arm() {
	g := passGuards.Get().(*passGuard)
	p.guard, p.gen = g, g.gen.Load()
}

// SetError records err as the outcome of the protected work; circuit
// breakers and error statistics see it at Exit. A nil err clears it. On a
// nil *Pass it does nothing.
func (p *Pass) SetError(err error) {
	if p != nil {
		p.err = err
	}
}

// Exit ends the entry: it records completion, RT and error, and releases
// everything the entry held (concurrency, circuit-breaker probes). Calling
// Exit again, on a copy of an exited Pass, or on a nil *Pass, does nothing.
func (p *Pass) Exit() {
	if p == nil || p.guard == nil || !p.guard.gen.CompareAndSwap(p.gen, p.gen+1) {
		return
	}
	passGuards.Put(p.guard)
	p.guard = nil
	eng := p.eng
	var in *window.Node
	if p.ctx.Traffic == core.Inbound {
		in = eng.inbound
	}
	if !eng.exitNeedsClock(p, in) {
		// Nothing reads this exit's RT or instant beyond its bucket: the
		// latest reading of an Entry stands for the clock (never earlier
		// than the entry's own start).
		end := max(p.ctx.Start, eng.recent.Load())
		if p.ctx.HoldsTickets() {
			p.ctx.ReleaseTickets(entry.ExitInfo{Start: p.ctx.Start, End: end, Batch: p.ctx.Batch, Err: p.err})
		}
		statistic.ExitUntimed(end, p.ctx.Batch, p.err != nil, &p.res.node, in)
		return
	}
	now := eng.clock.Nanotime()
	info := entry.ExitInfo{Start: p.ctx.Start, End: now, Batch: p.ctx.Batch, Err: p.err}
	p.ctx.ReleaseTickets(info)
	statistic.Exit(info, &p.res.node, in)
	if p.slots != nil {
		// The slots the entry passed through, not whatever is registered
		// now: a slot added meanwhile never saw this entry pass.
		for _, s := range p.slots.Stat {
			s.OnExit(p.custom, now, p.err)
		}
	}
}

// recentStep is how far Engine.recent may fall behind the latest Entry's
// clock reading.
const recentStep = int64(time.Millisecond)

// noteRecent raises Engine.recent to now unless it is already within
// recentStep of it. It only raises it, so that an Entry whose goroutine was
// held up between its clock read and this store does not set it back.
func (eng *Engine) noteRecent(now int64) {
	for {
		old := eng.recent.Load()
		if now-old <= recentStep || eng.recent.CompareAndSwap(old, now) {
			return
		}
	}
}

// exitNeedsClock reports whether Exit must read the clock for p: the one
// place that decides whether an exit's response time (and exact instant) is
// consumed. Everything that reads RT is a condition here, and a new consumer
// is one more line:
//
//   - a clock other than the system clock (exactness on a manual clock);
//   - a ticket that reads the exit's RT or exact instant (see
//     entry.ExitClock): a slow-call breaker, a half-open probe, an
//     error-ratio or error-count breaker on an error or while its window
//     holds a failure, an adaptive rule; not a concurrency rule, a param
//     rule, or an error breaker's success in a window without failures,
//     which get the estimate;
//   - custom slots (OnExit gets the End);
//   - a reader of the resource's figures (Snapshot, History, Each, the
//     exporters, watches and telemetry all make its minute window; a
//     tiered rule on the average RT reads it);
//   - for inbound entries, a system rule that reads the inbound RT
//     (InboundAvgRT, BBR's minimum RT) or a reader of the inbound figures
//     (SystemMetrics).
//
// When none holds, Exit counts the exit as untimed at an estimate of its
// instant (see window.Node.AddCompleteUntimed and docs/design/architecture.md).
func (eng *Engine) exitNeedsClock(p *Pass, in *window.Node) bool {
	return !eng.estimateExit ||
		p.ctx.ExitNeedsClock(p.err != nil, &eng.recent) ||
		p.slots != nil ||
		p.res.node.Read() ||
		in != nil && (eng.system.ReadsRT() || eng.inboundRead.Load())
}

// Entry asks to enter resource. It returns a *Pass when every rule lets the
// call through, and otherwise a nil *Pass and an error: a *BlockError
// (matching ErrBlocked) when a rule refused it; ErrBadResource,
// ErrBadTraffic, ErrBadBatch or ErrTooManyAttachments (wrapped) for an entry
// it cannot make sense of; or ErrClosed. A throttling rule may make it wait
// for its turn (at most the rule's MaxQueueing, and never past Close).
//
// A custom slot that panics makes Entry panic with the same value; the entry
// then holds nothing (what the rules reserved for it is given back) and is
// counted neither as passed nor as blocked.
func (eng *Engine) Entry(resource string, opts ...EntryOption) (*Pass, error) {
	// Small enough to inline: the Entry is then allocated in the caller's
	// frame and, when the caller keeps it local, never reaches the heap.
	return eng.enterNoCtx(new(Pass), resource, opts)
}

// EntryContext is Entry with a context that bounds any wait: an entry whose
// context ends while it waits for its turn is refused with a *BlockError
// whose Cause is the context's error, and one whose turn would come after
// the context's deadline is refused at once, holding nothing, with Cause
// context.DeadlineExceeded. An entry that need not wait passes whatever its
// context. The context is not kept.
func (eng *Engine) EntryContext(ctx context.Context, resource string, opts ...EntryOption) (*Pass, error) {
	return eng.enter(new(Pass), ctx, resource, opts)
}

// enterNoCtx is enter without a context. It has one parameter fewer, which
// keeps Engine.Entry within the inliner's budget.
//
//go:noinline
func (eng *Engine) enterNoCtx(p *Pass, name string, opts []EntryOption) (*Pass, error) {
	return eng.enter(p, nil, name, opts)
}

// enter runs p through the chain and returns it, or nil and the reason.
func (eng *Engine) enter(p *Pass, ctx context.Context, name string, opts []EntryOption) (*Pass, error) {
	p.eng = eng
	c := &p.ctx
	c.Resource = name
	c.Batch = 1
	// Arguments stay in this frame and are lent to the param slot only.
	var (
		args  entry.Args
		given [maxAttachments]*entry.Arg
		nn    int
	)
	for i := range opts {
		o := &opts[i]
		switch o.kind {
		case optTraffic:
			if o.n != int64(core.Inbound) && o.n != int64(core.Outbound) {
				return nil, fmt.Errorf("%w: %v", ErrBadTraffic, core.TrafficType(o.n))
			}
			c.Traffic = core.TrafficType(o.n)
		case optBatch:
			c.Batch = o.n
		case optArgs:
			args.Positional = o.args
		case optPriority:
			c.Priority = core.Priority(o.n)
		case optArg:
			if nn == len(given) {
				return nil, fmt.Errorf("%w: more than %d", ErrTooManyAttachments, maxAttachments)
			}
			given[nn] = &o.arg
			nn++
		}
	}
	args.Given = given[:nn]
	if c.Batch < 1 || c.Batch > maxBatch {
		return nil, fmt.Errorf("%w: %d (want 1 to %d)", ErrBadBatch, c.Batch, maxBatch)
	}
	if name == "" {
		return nil, fmt.Errorf("%w: empty", ErrBadResource)
	}
	if len(name) > eng.maxName {
		return nil, fmt.Errorf("%w: %d bytes, more than the engine's limit of %d (Limits.NameBytes)", ErrBadResource, len(name), eng.maxName)
	}
	if eng.closed.Load() {
		return nil, ErrClosed
	}
	// The resource is looked up before the clock is read, with the latest
	// Entry's reading standing in for the clock to pick the bucket slot
	// its node prefetches, so that the clock read overlaps the misses of a
	// cold resource. A miss (which may create a resource or sweep) waits
	// for the reading.
	recent := eng.recent.Load()
	t := eng.reg.read.Load()
	r := t.get(name, recent)
	c.Start = eng.clock.Nanotime()
	if c.Start-recent > recentStep {
		eng.noteRecent(c.Start)
	}
	c.Life = eng.life
	if r == nil {
		r = eng.missedResource(t, name, c.Start)
	}
	p.res = r
	var in *window.Node
	if c.Traffic == core.Inbound {
		in = eng.inbound
	}
	if snap := eng.chain.Snapshot(); snap != nil {
		return eng.enterCustom(ctx, p, args, r, in, snap)
	}
	if be := eng.check(ctx, c, args, r); be != nil {
		return nil, eng.refuse(c, r, in, be)
	}
	c.DropUndo()
	statistic.Pass(c, &r.node, in)
	p.arm()
	return p, nil
}

// enterCustom is the rest of enter on an engine with custom slots: Prepare,
// the built-in checks, the custom checks, then the observers. If a custom
// slot panics, the entry gives back everything its checks reserved, is
// counted neither as passed nor as blocked, and the panic goes on up to the
// caller of Entry unchanged. (Observers that saw OnPass before the one that
// panicked see no OnExit: the entry never passed.)
func (eng *Engine) enterCustom(ctx context.Context, p *Pass, args entry.Args, r *resource, in *window.Node, snap *chain.Snapshot) (*Pass, error) {
	c := &p.ctx
	p.custom = customCopy(c)
	p.slots = snap
	settled := false
	defer func() {
		if !settled { // a slot panicked: the protected code never runs
			c.ReleaseRefused()
		}
	}()
	for _, s := range snap.Prepare {
		s.Prepare(p.custom)
	}
	be := eng.check(ctx, c, args, r)
	if be == nil {
		be = customCheck(c, p.custom, snap)
	}
	if be != nil {
		settled = true
		err := eng.refuse(c, r, in, be)
		for _, s := range snap.Stat {
			s.OnBlock(p.custom, be)
		}
		return nil, err
	}
	// The observers run before the entry is counted as passed and its
	// undo-only reservations are dropped, so that one that panics leaves
	// nothing behind.
	for _, s := range snap.Stat {
		s.OnPass(p.custom)
	}
	settled = true
	c.DropUndo()
	statistic.Pass(c, &r.node, in)
	p.arm()
	return p, nil
}

// refuse gives back what the checks of a refused entry reserved, counts the
// block, and returns the error Entry returns: be, or ErrClosed when the
// engine closed meanwhile (a wait cut short by Close, or a refusal racing
// it).
func (eng *Engine) refuse(c *entry.Context, r *resource, in *window.Node, be *core.BlockError) error {
	c.ReleaseRefused()
	statistic.Block(c, &r.node, in, be.Type)
	if be.Type == core.BlockSystem {
		eng.systemRefused(c.Start)
	}
	if eng.blocks != nil {
		eng.blocks.note(be, c.Resource, c.Batch, c.Start)
	}
	if eng.closed.Load() {
		return ErrClosed
	}
	return be
}

// check runs the built-in rule checks in chain order; the first refusal
// wins. The refusal of a rule in shadow mode is counted and passed over
// (shadowed).
func (eng *Engine) check(ctx context.Context, c *entry.Context, args entry.Args, r *resource) *core.BlockError {
	if c.Traffic == core.Inbound && eng.system.Active() {
		if be := eng.system.Check(c); be != nil && !eng.shadowed(c, r, be) {
			return be
		}
	}
	if be, decided := r.flow.Check(c, &r.node); decided {
		if be != nil && eng.shadowed(c, r, be) {
			return nil
		}
		return be
	}
	rs := r.rules.Load()
	if rs == nil {
		return nil
	}
	for i := range rs.flow {
		if be := rs.flow[i].Check(ctx, c, eng.clock); be != nil && !eng.shadowed(c, r, be) {
			return be
		}
	}
	o := rs.other
	if o == nil {
		return nil
	}
	for _, f := range o.param {
		if be := f.Check(ctx, c, args, eng.clock); be != nil && !eng.shadowed(c, r, be) {
			return be
		}
	}
	for _, f := range o.degrade {
		if be := f.Check(c); be != nil && !eng.shadowed(c, r, be) {
			return be
		}
	}
	return nil
}

// customCheck runs the custom checks in order; the first refusal wins. A
// refusal without a type is BlockCustom, and one without a resource names
// the entry's.
func customCheck(c *entry.Context, e *slots.Entry, snap *chain.Snapshot) *core.BlockError {
	for _, s := range snap.Check {
		if be := s.Check(e); be != nil {
			if be.Type == 0 {
				be.Type = core.BlockCustom
			}
			if be.Resource == "" {
				be.Resource = c.Resource
			}
			return be
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
