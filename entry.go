package sluice

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/ruledef"
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
	// ErrBadArgIndex: a typed positional argument (WithStringArg,
	// WithIntArg) at an index no param rule can name, below 0 or above 255.
	ErrBadArgIndex = errors.New("sluice: invalid argument index")
	// ErrBadCaller: a caller (WithCaller) longer than 256 bytes, not
	// valid UTF-8, or holding a control character.
	ErrBadCaller = errors.New("sluice: invalid caller")
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
// the eight attachments an entry may carry (see ErrTooManyAttachments). i
// must be an index a param rule can name, 0 to 255 (rules.Param.Index):
// Entry refuses any other with ErrBadArgIndex, since no rule could read it.
func WithStringArg(i int, s string) EntryOption {
	return EntryOption{kind: optArg, arg: entry.Arg{Index: i, Value: entry.Value{Str: s, Kind: entry.KindString}}}
}

// WithIntArg is WithStringArg for an integer, whose string form for param
// rules (and their Exceptions) is its decimal form: WithIntArg(0, 42) and
// WithStringArg(0, "42") are the same value. i must be in [0, 255], as for
// WithStringArg.
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
// rule lets the call through. Call Exit exactly once per admitted entry,
// when the protected work ends; typically `defer p.Exit()` right after a
// successful Entry, which also releases the entry if the protected code
// panics (but counts it as a success: Do counts a panic as an error).
//
// A Pass is a small value (a reference to the entry's record and the
// record's generation) and may be copied: every copy stands for the same
// entry, and the entry is released once, by whichever copy calls Exit
// first. A second Exit, on the Pass or on any copy, does nothing, and so
// does SetError after Exit; both stay harmless after the engine has reused
// the record for another entry (the generation no longer matches). Copies
// may be used from several goroutines at once: Exit sees the last SetError
// made before it, and a SetError after it does nothing.
//
// The zero Pass is inert: SetError and Exit do nothing. Entry and
// EntryContext return it with every refusal or error. (It is not called
// Entry because Go does not allow a type and a function of the same name in
// one package, and sluice.Entry is the verb every Sentinel user knows.)
type Pass struct {
	rec *passRecord
	gen uint64
}

// passRecord is the state of one entry from Entry to Exit. Records are
// recycled (passRecords), so the pass path allocates nothing whichever way
// Entry is called; gen tells the Passes of one use of a record from those
// of its other uses.
//
// gen goes up by two per admitted entry (a refused one hands out no Pass
// and leaves it). A Pass holds the even generation of its entry:
// Exit moves gen from it to the next even one (once, across copies: the
// winner of that compare-and-swap alone releases the entry and recycles the
// record), and SetError holds it odd while it writes err, so that a write
// never lands in a later use of the record nor races one (a stale Pass finds
// the generation moved and writes nothing).
type passRecord struct {
	gen    atomic.Uint64
	eng    *Engine
	res    *resource
	ctx    entry.Context
	err    error
	custom *slots.Entry    // what custom slots see, nil without them
	slots  *entry.Snapshot // the custom slots the entry ran through
	// inbound: the entry is counted on the engine's inbound node
	// (countsInbound), so its exit is too.
	inbound bool
}

// passRecords recycles records (see the pass path's section of
// docs/design/architecture.md for why a sync.Pool rather than a list per
// engine).
var passRecords = sync.Pool{New: func() any { return new(passRecord) }}

// genStep is how far gen moves per use of a record; gen+1 is "SetError is
// writing".
const genStep = 2

// SetError records err as the outcome of the protected work; circuit
// breakers and error statistics see it at Exit. A nil err clears it. After
// Exit (on any copy), and on the zero Pass, it does nothing.
func (p Pass) SetError(err error) {
	r := p.rec
	if r == nil {
		return
	}
	if r.gen.CompareAndSwap(p.gen, p.gen+1) || r.hold(p.gen, p.gen+1) {
		r.err = err
		r.gen.Store(p.gen)
	}
}

// Exit ends the entry: it records completion, RT and error, and releases
// everything the entry held (concurrency, circuit-breaker probes). Calling
// Exit again, on a copy of an exited Pass, or on the zero Pass, does
// nothing.
func (p Pass) Exit() {
	r := p.rec
	if r == nil {
		return
	}
	// The common case, no SetError on a copy under way, without a call.
	if r.gen.CompareAndSwap(p.gen, p.gen+genStep) || r.hold(p.gen, p.gen+genStep) {
		r.exit()
		r.err = nil
		passRecords.Put(r)
	}
}

// hold moves gen from the generation of a Pass, gen, to to, waiting out a
// SetError on a copy of the Pass (gen+1). It reports false when gen has
// moved on: the entry exited.
func (r *passRecord) hold(gen, to uint64) bool {
	for {
		if r.gen.CompareAndSwap(gen, to) {
			return true
		}
		switch r.gen.Load() {
		case gen: // a SetError on a copy has just finished
		case gen + 1: // a SetError on a copy is writing
			runtime.Gosched()
		default:
			return false
		}
	}
}

// exit is the body of Exit, run once per entry by the Exit that won the
// record.
func (r *passRecord) exit() {
	eng := r.eng
	var in *window.Node
	if r.inbound {
		in = eng.inbound
	}
	if !eng.exitNeedsClock(r, in) {
		// No rule reads this exit's RT or instant beyond its bucket:
		// untimed, or a sample for readers (exitsample.go).
		eng.exitSampled(r, in)
		return
	}
	now := eng.clock.Nanotime()
	info := entry.ExitInfo{Start: r.ctx.Start, End: now, Batch: r.ctx.Batch, Err: r.err}
	r.ctx.ReleaseTickets(info)
	entry.Exit(info, &r.res.node, in)
	if r.slots != nil {
		// The slots the entry passed through, not whatever is registered
		// now: a slot added meanwhile never saw this entry pass.
		for _, s := range r.slots.Stat {
			s.OnExit(r.custom, now, r.err)
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

// exitNeedsClock reports whether Exit must read the clock for r: the one
// place that decides whether an exit's response time (and exact instant) is
// consumed by a rule, so that every exit must be timed. Everything that
// reads RT is a condition here, and a new consumer is one more line:
//
//   - a clock other than the system clock (exactness on a manual clock),
//     on a resource nobody reads (a read one times a sample of its exits
//     at the clock's exact instant, see exitSampled);
//   - a ticket that reads the exit's RT or exact instant (see
//     entry.ExitClock): a slow-call breaker, a half-open probe, an
//     error-ratio or error-count breaker on an error or while its window
//     holds a failure, an adaptive rule; not a concurrency rule, a param
//     rule, or an error breaker's success in a window without failures,
//     which get the estimate;
//   - custom slots (OnExit gets the End);
//   - a tiered rule on the average RT (window.Node.TimeExits);
//   - for inbound entries, a system rule that reads the inbound RT
//     (InboundAvgRT, BBR's minimum RT).
//
// When none holds, Exit counts the exit at an estimate of its instant,
// untimed, or timed in a sample when a reader (Snapshot, History, Each,
// the exporters, watches, telemetry; SystemMetrics for the inbound
// figures) reads the node (see exitSampled, window.SampleFirst and
// docs/design/architecture.md).
func (eng *Engine) exitNeedsClock(r *passRecord, in *window.Node) bool {
	return !eng.estimateExit && !r.res.node.Read() ||
		r.ctx.ExitNeedsClock(r.err != nil, &eng.recent) ||
		r.slots != nil ||
		r.res.node.ExitsTimed() ||
		in != nil && eng.system.ReadsRT()
}

// Entry asks to enter resource. It returns a Pass when every rule lets the
// call through, and otherwise the zero Pass and an error: a *BlockError
// (matching ErrBlocked) when a rule refused it; ErrBadResource,
// ErrBadTraffic, ErrBadBatch, ErrTooManyAttachments, ErrBadArgIndex or
// ErrBadCaller (wrapped) for an entry
// it cannot make sense of; or ErrClosed. A throttling rule may make it wait
// for its turn (at most the rule's MaxQueueing, and never past Close).
//
// A custom slot that panics makes Entry panic with the same value; the entry
// then holds nothing (what the rules reserved for it is given back) and is
// counted neither as passed nor as blocked.
func (eng *Engine) Entry(resource string, opts ...EntryOption) (Pass, error) {
	return eng.enter(context.Background(), resource, opts)
}

// EntryContext is Entry with a context that bounds any wait: an entry whose
// context ends while it waits for its turn is refused with a *BlockError
// whose Cause is the context's error, and one whose turn would come after
// the context's deadline is refused at once, holding nothing, with Cause
// context.DeadlineExceeded. An entry that need not wait passes whatever its
// context. The context is not kept.
func (eng *Engine) EntryContext(ctx context.Context, resource string, opts ...EntryOption) (Pass, error) {
	return eng.enter(ctx, resource, opts)
}

// enter runs an entry through the chain and returns its Pass, or the zero
// Pass and the reason.
//
// complexity: the entry path: options, resource lookup, chain and record, in one frame so that an entry allocates nothing
func (eng *Engine) enter(ctx context.Context, name string, opts []EntryOption) (Pass, error) {
	traffic, batch, priority := core.Inbound, int64(1), core.Priority(0)
	// Arguments stay in this frame and are lent to the param slot only.
	var (
		args  entry.Args
		given [maxAttachments]*entry.Arg
		nn    int
		out   *core.Budget // WithBudget
		// caller is WithCaller's, checked below (caller.go)
		caller string
	)
	for i := range opts {
		o := &opts[i]
		switch o.kind {
		case optTraffic:
			if o.n != int64(core.Inbound) && o.n != int64(core.Outbound) {
				return Pass{}, fmt.Errorf("%w: %v", ErrBadTraffic, core.TrafficType(o.n))
			}
			traffic = core.TrafficType(o.n)
		case optBatch:
			batch = o.n
		case optArgs:
			args.Positional = o.args
		case optPriority:
			priority = core.Priority(o.n)
		case optBudget:
			out = budgetOut(o)
		case optCaller:
			caller = o.arg.Value.Str
		case optArg:
			if nn == len(given) {
				return Pass{}, fmt.Errorf("%w: more than %d", ErrTooManyAttachments, maxAttachments)
			}
			if !o.arg.Named && uint(o.arg.Index) > ruledef.MaxParamIndex {
				return Pass{}, fmt.Errorf("%w: %d (want 0 to %d, the indexes a param rule can name)", ErrBadArgIndex, o.arg.Index, ruledef.MaxParamIndex)
			}
			given[nn] = &o.arg
			nn++
		}
	}
	args.Given, args.Caller = given[:nn], caller
	if batch < 1 || batch > maxBatch {
		return Pass{}, fmt.Errorf("%w: %d (want 1 to %d)", ErrBadBatch, batch, maxBatch)
	}
	if name == "" {
		return Pass{}, fmt.Errorf("%w: empty", ErrBadResource)
	}
	if len(name) > eng.maxName {
		return Pass{}, fmt.Errorf("%w: %d bytes, more than the engine's limit of %d (Limits.NameBytes)", ErrBadResource, len(name), eng.maxName)
	}
	if caller != "" {
		if err := checkCaller(caller); err != nil {
			return Pass{}, err
		}
	}
	if eng.closed.Load() {
		return Pass{}, ErrClosed
	}
	p := passRecords.Get().(*passRecord)
	// Every field but the tickets, which the record's last use left empty
	// (released at Exit or on refusal; the undo-only ones dropped).
	p.eng, p.err, p.custom, p.slots = eng, nil, nil, nil
	c := &p.ctx
	c.Resource, c.Traffic, c.Batch, c.Priority = name, traffic, batch, priority
	if c.WantBudget = out != nil; out != nil {
		c.Budget = core.Budget{}
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
	if c.Traffic == core.Inbound && eng.countsInbound() {
		in = eng.inbound
	}
	p.inbound = in != nil
	if snap := eng.chain.Snapshot(); snap != nil {
		return eng.enterCustom(ctx, p, args, r, in, snap, out)
	}
	be := eng.check(ctx, c, args, r)
	if out != nil {
		*out = c.Budget
	}
	if be != nil {
		err := eng.refuse(c, r, in, be, args.Caller)
		passRecords.Put(p)
		return Pass{}, err
	}
	c.DropUndo()
	entry.Pass(c, &r.node, in)
	return Pass{rec: p, gen: p.gen.Load()}, nil
}

// enterCustom is the rest of enter on an engine with custom slots: Prepare,
// the built-in checks, the custom checks, then the observers. If a custom
// slot panics, the entry gives back everything its checks reserved, is
// counted neither as passed nor as blocked, and the panic goes on up to the
// caller of Entry unchanged. (Observers that saw OnPass before the one that
// panicked see no OnExit: the entry never passed.)
func (eng *Engine) enterCustom(ctx context.Context, p *passRecord, args entry.Args, r *resource, in *window.Node, snap *entry.Snapshot, out *core.Budget) (Pass, error) {
	c := &p.ctx
	p.custom = customCopy(c, args.Caller)
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
	if out != nil {
		*out = c.Budget
	}
	if be != nil {
		settled = true
		err := eng.refuse(c, r, in, be, args.Caller)
		for _, s := range snap.Stat {
			s.OnBlock(p.custom, be)
		}
		passRecords.Put(p)
		return Pass{}, err
	}
	// The observers run before the entry is counted as passed and its
	// undo-only reservations are dropped, so that one that panics leaves
	// nothing behind.
	for _, s := range snap.Stat {
		s.OnPass(p.custom)
	}
	settled = true
	c.DropUndo()
	entry.Pass(c, &r.node, in)
	return Pass{rec: p, gen: p.gen.Load()}, nil
}

// refuse gives back what the checks of a refused entry reserved, counts the
// block (the block log names caller, which it copies), and returns the
// error Entry returns: be, or ErrClosed when the engine closed meanwhile (a
// wait cut short by Close, or a refusal racing it).
func (eng *Engine) refuse(c *entry.Context, r *resource, in *window.Node, be *core.BlockError, caller string) error {
	c.ReleaseRefused()
	entry.Block(c, &r.node, in, be.Type)
	if be.Type == core.BlockSystem {
		eng.systemRefused(c.Start)
	}
	if eng.blocks != nil {
		eng.blocks.noteCaller(be, c.Resource, caller, c.Batch, c.Start)
	}
	if t := eng.refusedCallers.Load(); t != nil && caller != "" {
		t.note(r.name, caller, c.Batch, c.Start)
	}
	if eng.closed.Load() {
		return ErrClosed
	}
	return be
}

// check runs the built-in rule checks in chain order; the first refusal
// wins. The refusal of a rule in shadow mode is counted and passed over
// (shadowed).
//
// complexity: the built-in checks in chain order with their shadow mode; the entry path, kept in one frame
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
	if o := rs.other; o != nil && o.authority != nil {
		if be := o.authority.check(c, args.Caller); be != nil && !eng.shadowed(c, r, be) {
			return be
		}
	}
	if o := rs.other; o != nil {
		for _, a := range o.apps {
			if be := a.check(c, args.Caller); be != nil && !eng.shadowed(c, r, be) {
				return be
			}
		}
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
	if o.callers != nil {
		if be := o.callers.check(ctx, c, args.Caller, eng.clock); be != nil && !eng.shadowed(c, r, be) {
			return be
		}
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
// the entry's: a copy says so, since the slot's error may be one it shares
// between refusals (a refusal whose type and resource are set is returned
// as it is, and allocates nothing).
func customCheck(c *entry.Context, e *slots.Entry, snap *entry.Snapshot) *core.BlockError {
	for _, s := range snap.Check {
		if be := s.Check(e); be != nil {
			if be.Type == 0 || be.Resource == "" {
				cp := *be
				cp.Type = cmp.Or(cp.Type, core.BlockCustom)
				cp.Resource = cmp.Or(cp.Resource, c.Resource)
				be = &cp
			}
			return be
		}
	}
	return nil
}

// customCopy is the entry custom slots see: a heap copy of the entry's
// context and caller (its arguments never leave the entry).
func customCopy(c *entry.Context, caller string) *slots.Entry {
	return &slots.Entry{
		Resource: c.Resource,
		Traffic:  c.Traffic,
		Caller:   strings.Clone(caller),
		Batch:    c.Batch,
		Start:    c.Start,
	}
}
