package sluice

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unsafe"

	"sync/atomic"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/clock"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/degrade"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/internal/flow"
	"github.com/sluice-go/sluice/internal/notify"
	"github.com/sluice-go/sluice/internal/param"
	"github.com/sluice-go/sluice/internal/system"
	"github.com/sluice-go/sluice/internal/window"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// ErrClosed is returned by Entry, EntryContext and the rule loaders of an
// engine that has been closed, and by entries that were waiting for their
// turn (throttling rules) when it closed.
var ErrClosed = entry.ErrClosed

// defaultMaxResources is the number of distinct resources an engine tracks
// when Limits.Resources is not given.
const defaultMaxResources = 10000

// overflowResource is the name under which entries of resources beyond the
// engine's resource limit are counted (such an entry takes no lock and
// allocates nothing). Resources named by rules are always tracked, whatever
// the limit.
const overflowResource = "__sluice_overflow__"

// Option configures an engine built by New (see the With functions). Options
// apply in order; a later one overrides an earlier one of the same kind.
type Option func(*config)

type config struct {
	clock        core.Clock
	maxResources int
	maxRules     int              // WithLimits (limits.go)
	maxNameBytes int              // WithLimits
	isFailure    func(error) bool // circuit breakers' error classifier (degrade.go)
	sysSource    SystemSource     // system metrics (system.go)
	sysInterval  time.Duration
	sysOnError   func(error)
	history      time.Duration
	blockLog     *slog.Logger  // (blocklog.go)
	clusterStore cluster.Store // WithCluster (cluster.go)
	cluster      ClusterConfig
}

// WithClock makes the engine read time from c instead of the system's
// monotonic clock (also the meaning of a nil c). Tests pass a
// *sluicetest.ManualClock.
func WithClock(c core.Clock) Option { return func(cf *config) { cf.clock = c } }

// defaultHistory is how much per-second history each resource keeps when
// WithHistory is not given.
const defaultHistory = 5 * time.Minute

// WithHistory sets how much per-second history each resource keeps for
// Engine.History: d rounded up to whole seconds, at most one hour; zero or
// less keeps none. The default is five minutes.
//
// A resource keeps the windows that serve reports only once a reader asks
// for them, so that many resources nobody looks at stay small (about
// 2 KiB each). The first Snapshot or History of a resource (or Each) makes
// its one-minute window, which serves the last 64 seconds: their counts
// and RT sums (1.4 KiB), and from the first History on their MinRT and
// MaxConcurrency (512 bytes more); the first History asking for more than that
// makes the window of older seconds: 56 bytes per second, rounded up to a
// power of two seconds,
// 14 KiB for the default five minutes (256 seconds beyond the minute
// window), 224 KiB for an hour. Seconds that left the second-level window
// before a window was made count in the totals only: the first read of a
// resource sees the last second or two in its minute figures and history,
// and every second after that. Nothing on the request path writes these
// windows: a second moves there when its bucket of the window before is
// reused.
func WithHistory(d time.Duration) Option { return func(cf *config) { cf.history = d } }

// Engine is an independent instance of sluice: its own clock, resources,
// statistics and rules. Make one with New; the zero value is not usable.
// All methods are safe for concurrent use.
type Engine struct {
	clock   core.Clock
	inbound *window.Node
	reg     registry
	// maxName and maxRules are Limits.NameBytes and Limits.Rules.
	maxName, maxRules int
	chain             entry.Chain
	system            *system.Slot
	closed            atomic.Bool
	// life ends at Close (endLife): entries waiting for their turn stop
	// waiting then (entry.Context.Life).
	life    context.Context
	endLife context.CancelFunc

	// mu serializes rule loads and Close (an engine's own: loads into
	// different engines never wait for each other). The rules of each
	// kind in force, below, change only under it.
	mu         sync.Mutex
	flow       kindState[rules.Flow, map[string][]*flow.Controller]
	sys        kindState[rules.System, *system.RuleSet]
	breakers   kindState[rules.CircuitBreaker, map[string][]*degrade.Breaker]
	param      kindState[rules.Param, map[string][]*param.Controller]
	authority  kindState[rules.Authority, map[string]*authorityCheck]
	callers    callerFlowState
	breakerHub *degrade.Hub // classifier, listeners and transition order of the breakers

	events  notify.Hub[stat.Event] // the event stream (Subscribe)
	shed    shedding               // whether system protection sheds, for events
	blocks  *blockLog              // nil without WithBlockLog
	cluster clusterState           // the cluster store's Manager and heartbeat; set by New
	watches watchSet               // Watch (watch.go)

	// refusedCallers counts refused callers for telemetry frames; nil
	// until a fleet publisher asks (refusedcallers.go).
	refusedCallers atomic.Pointer[callerTally]

	id, host string // the instance's identity (InstanceID) and host name

	// estimateExit is set for the system clock: an Exit whose response
	// time nothing consumes then takes recent as its instant instead of
	// reading the clock (see exitNeedsClock). inboundRead is set by the
	// first reader of the inbound node's figures (SystemMetrics).
	estimateExit bool
	inboundRead  atomic.Bool
	// inboundUsed is set before the first system rule is put in force:
	// until then the inbound node holds nothing (countsInbound).
	inboundUsed atomic.Bool
	_           window.Pad
	// recent is the engine clock's latest reading by an Entry, kept at
	// most a millisecond behind it while entries come (Entry stores it
	// only when it moved by more than that, so in parallel its line is
	// written at most a thousand times a second).
	recent atomic.Int64
	_      window.Pad
}

// New returns an engine with no rules, configured by opts. It starts no
// goroutine, except the heartbeat of a cluster store (WithCluster); the
// first Watch starts the watches' evaluator. Following a rule store and
// publishing telemetry are package fleet's.
func New(opts ...Option) *Engine {
	cf := config{clock: clock.System(), maxResources: defaultMaxResources, history: defaultHistory}
	for _, o := range opts {
		o(&cf)
	}
	if cf.maxResources <= 0 {
		cf.maxResources = defaultMaxResources
	}
	if cf.maxRules <= 0 {
		cf.maxRules = rules.DefaultMaxRules
	}
	if cf.maxNameBytes <= 0 {
		cf.maxNameBytes = rules.DefaultMaxNameBytes
	}
	if cf.clock == nil {
		cf.clock = clock.System()
	}
	eng := &Engine{clock: cf.clock, inbound: window.NewNode(), maxRules: cf.maxRules, maxName: cf.maxNameBytes}
	// Only the system clock: on any other clock (a test's manual one)
	// every Exit reads it, so that statistics stay exactly where that
	// clock puts them.
	eng.estimateExit = cf.clock == clock.System()
	eng.life, eng.endLife = context.WithCancel(context.Background())
	eng.reg.init(cf.maxResources, cf.history)
	eng.system = system.New(system.Config{
		Clock: eng.clock, Inbound: eng.inbound,
		Source: cf.sysSource, Interval: cf.sysInterval, OnError: cf.sysOnError,
		OnSample: eng.noticeShedding,
	})
	eng.breakerHub = degrade.NewHub(cf.isFailure)
	eng.breakerHub.AddListener(eng.breakerEvent)
	if cf.blockLog != nil {
		eng.blocks = newBlockLog(cf.blockLog, eng.clock)
	}
	eng.id, eng.host = instanceID(cf.cluster.InstanceID)
	eng.cluster.start(cf.clusterStore, cf.cluster, eng.id, eng.host, eng.clock, func(fallback bool, err error, live int, _ string) {
		eng.clusterEvent("", fallback, err, live)
	})
	return eng
}

// Clock returns the engine's clock: the one WithClock gave, or the
// system clock. Code that follows an engine (package fleet, tests on a
// manual clock) times itself by it.
func (eng *Engine) Clock() core.Clock { return eng.clock }

// Close stops everything the engine started (such as the system metrics
// sampler, the watches' evaluator and the cluster store's heartbeat, after
// giving unused leased permits back) and waits for it. Afterwards Entry,
// the rule loaders and Watch return ErrClosed, and so do entries that were waiting for their turn under a
// throttling rule (they return at once); entries in flight may still Exit.
// Close is idempotent and returns the sampler's error, if any, the first
// time.
func (eng *Engine) Close() error {
	eng.mu.Lock()
	already := eng.closed.Swap(true)
	eng.mu.Unlock()
	if already {
		return nil
	}
	eng.endLife()
	eng.watches.close()
	eng.cluster.close()
	err := eng.system.Close()
	if eng.blocks != nil {
		eng.blocks.flushAll()
	}
	return err
}

// RegisterSlot adds a custom slot (a slots.Preparer, slots.Checker or
// slots.Observer, or several) at position order among custom slots; lower
// runs first, equal orders in registration order. Custom slots run after the
// built-in ones, on the goroutine of each Entry and Exit, so they must be
// safe for concurrent use. Entries already made keep the slots they started
// with. A slot that panics makes Entry panic with the same value, after the
// entry has given back everything it reserved (see Entry). Engines without
// custom slots pay one pointer check for the feature. Slots cannot be
// removed.
func (eng *Engine) RegisterSlot(s any, order int) error {
	if !eng.chain.Add(s, order) {
		return fmt.Errorf("sluice: %T implements none of slots.Preparer, slots.Checker, slots.Observer", s)
	}
	return nil
}

// resource is one tracked resource: its statistics and the rules on it.
//
// It starts with what a call reads before it writes: the rules in force,
// the flow gate (flow.Gate: a lone one-second reject rule, checked without
// reading the rule set) and the name when it is short, which the registry
// compares. Rule loads write these fields; calls only read them, so cores
// share their line without transfers. The node follows, and keeps the
// counters calls write on lines of their own (see window.Node).
type resource struct {
	rules atomic.Pointer[ruleSet] // the rules in force; nil for none
	flow  flow.Gate
	n     uint8 // the name's length, or longName
	short [shortName]byte
	node  window.Node // by value: the counters a call writes share the allocation
	name  string
}

const (
	// shortName is the longest name a resource holds inline: its fields
	// before the node then fill one cache line.
	shortName = int(window.CacheLine - unsafe.Sizeof(atomic.Pointer[ruleSet]{}) - unsafe.Sizeof(flow.Gate{}) - unsafe.Sizeof(uint8(0)))
	// longName marks a resource whose name is longer than shortName:
	// lookups then compare the name itself.
	longName = 255
)

// newResource returns a resource without history (see newResourceHistory).
func newResource(name string) *resource { return newResourceHistory(name, 0) }

// newResourceHistory returns a resource whose node keeps keep of history
// (see window.Node.InitHistory).
func newResourceHistory(name string, keep time.Duration) *resource {
	r := &resource{name: strings.Clone(name), n: longName}
	if len(name) <= shortName {
		r.n = uint8(len(name))
		copy(r.short[:], name)
	}
	r.node.InitHistory(keep)
	return r
}

// named reports whether the resource's name is name.
func (r *resource) named(name string) bool {
	if r.n == longName {
		return r.name == name
	}
	return int(r.n) == len(name) && string(r.short[:r.n]) == name
}

// setRules puts rs in force: the rule set first, then the flow gate (see
// flow.Gate.Set).
func (r *resource) setRules(rs *ruleSet) {
	r.rules.Store(rs)
	if rs == nil {
		r.flow.Set(nil, true, &r.node)
		return
	}
	r.flow.Set(rs.flow, rs.other == nil, &r.node)
}

// ruleSet is the immutable set of controllers on one resource, swapped whole
// when rules change. Flow controllers are held by value (a Controller is
// the interface of its checker, which points to the counting state), and a
// single one is stored inside the rule set itself. The rarer kinds sit
// behind one pointer that is nil when there are none.
type ruleSet struct {
	flow  []flow.Controller
	other *otherRules
	flow1 [1]flow.Controller // flow's storage when it holds one controller
}

// otherRules are the controllers of a resource other than flow ones.
type otherRules struct {
	param     []*param.Controller
	degrade   []*degrade.Breaker
	authority *authorityCheck
	callers   *callerFlow
	apps      []*appsCheck // cluster rules' Cluster.Apps
}

func (o *otherRules) empty() bool {
	return len(o.param) == 0 && len(o.degrade) == 0 && o.authority == nil && o.callers == nil && len(o.apps) == 0
}

// newRuleSet returns the rule set of the given controllers, or nil when
// there are none.
func newRuleSet(fl []*flow.Controller, o otherRules) *ruleSet {
	if len(fl) == 0 && o.empty() {
		return nil
	}
	rs := &ruleSet{}
	switch len(fl) {
	case 0:
	case 1:
		rs.flow1[0] = *fl[0]
		rs.flow = rs.flow1[:]
	default:
		rs.flow = make([]flow.Controller, len(fl))
		for i, c := range fl {
			rs.flow[i] = *c
		}
	}
	if !o.empty() {
		rs.other = &o
	}
	return rs
}

// missedResource returns the resource for a name read table t lacks (the
// entry path reads t first, with no lock). When t is of a full registry, that is the overflow resource until it is time to sweep;
// otherwise it finds or makes the resource under the registry's lock,
// sweeping for room first when the registry is full, unless a rule load
// (which sweeps itself) holds the engine.
func (eng *Engine) missedResource(t *table, name string, now int64) *resource {
	if o := t.overflow; o != nil && now < eng.reg.nextSweep.Load() {
		return o
	}
	reg := &eng.reg
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if r := reg.lookup(name, now, false); r != nil {
		return r
	}
	if now >= reg.nextSweep.Load() && eng.mu.TryLock() {
		eng.sweepLocked(now)
		eng.mu.Unlock()
		if r := reg.lookup(name, now, false); r != nil {
			return r
		}
	}
	return reg.overflowResource()
}

// node returns the statistics node of name, creating the resource whatever
// the limit. Rules use it for the resources they name.
func (eng *Engine) node(name string) *window.Node {
	now := eng.clock.Nanotime()
	eng.reg.mu.Lock()
	defer eng.reg.mu.Unlock()
	return &eng.reg.lookup(name, now, true).node
}

// sweep forgets the resources that have been idle for a while (see
// registry.sweep), at the engine clock's current reading. Must hold eng.mu.
func (eng *Engine) sweep() {
	now := eng.clock.Nanotime()
	eng.reg.mu.Lock()
	defer eng.reg.mu.Unlock()
	eng.sweepLocked(now)
}

// sweepLocked is sweep at now. Must hold eng.mu and eng.reg.mu. It keeps the
// resources the rules in force need: those with rules, and the associated
// resources of flow rules, whose nodes those rules read.
func (eng *Engine) sweepLocked(now int64) {
	refs := map[string]bool{}
	for _, r := range eng.flow.rules {
		if r.RefResource != "" {
			refs[r.RefResource] = true
		}
	}
	eng.reg.sweep(now, func(r *resource) bool { return r.rules.Load() != nil || refs[r.name] })
}

// publish rebuilds every resource's rule set from the controllers in force.
// Must hold eng.mu.
func (eng *Engine) publish() {
	others := map[string]*otherRules{}
	get := func(res string) *otherRules {
		o := others[res]
		if o == nil {
			o = &otherRules{}
			others[res] = o
		}
		return o
	}
	for res, cs := range eng.param.ctl {
		get(res).param = cs
	}
	for res, cs := range eng.breakers.ctl {
		get(res).degrade = cs
	}
	for res, a := range eng.authority.ctl {
		get(res).authority = a
	}
	for res, f := range eng.callers.byRes {
		get(res).callers = f
	}
	for res, as := range compileApps(eng.flow.rules, eng.param.rules) {
		get(res).apps = as
	}
	for res := range eng.flow.ctl {
		eng.node(res)
	}
	for res := range others {
		eng.node(res)
	}
	eng.reg.rebind(func(r *resource) *ruleSet {
		var o otherRules
		if p := others[r.name]; p != nil {
			o = *p
		}
		return newRuleSet(eng.flow.ctl[r.name], o)
	})
}

// Snapshot returns the statistics of a resource at the engine clock's
// current reading, and false when the engine does not track it (it never
// saw it, the resource limit left it out, or it was forgotten).
//
// A resource that no rule needs is forgotten, statistics included, once it
// has gone two minutes of the engine's clock without new entries (and with
// none in flight); a later entry of its name starts afresh. The engine looks
// for such resources at rule loads, and when a new resource needs room in a
// full engine (at most once per 30 seconds of its clock); it looks at each
// resource once per two minutes, so one is forgotten between two and four
// minutes after its last entry, given sweeps. It starts no goroutine for
// this.
func (eng *Engine) Snapshot(resourceName string) (stat.Snapshot, bool) {
	x := eng.reg.get(resourceName)
	if x == nil {
		return stat.Snapshot{}, false
	}
	now := eng.clock.Nanotime()
	eng.noticeShedding(now)
	return x.snapshot(now), true
}

// History returns what resourceName counted in each completed second (of
// the engine's clock) of the last since, oldest first: one element per
// second, quiet seconds included, and at most as many seconds as
// WithHistory keeps (the current, incomplete second is left out). It
// returns nil when the engine does not track the resource (see Snapshot)
// or keeps no history. A resource that was forgotten and made again has
// the history of the new one only. The resource keeps its history from
// the first read on (see WithHistory): a reader that wants the full
// history reads once early, a Watch does so when it starts.
//
// The figures are exact when no entry of the resource races the call; one
// that does may be missed, or counted twice in that one result. History
// reads the resource's windows and allocates its result; it takes no lock
// that entries take.
func (eng *Engine) History(resourceName string, since time.Duration) []stat.Second {
	x := eng.reg.get(resourceName)
	if x == nil {
		return nil
	}
	now := eng.clock.Nanotime()
	eng.noticeShedding(now)
	return x.node.History(now, since)
}

// Each calls f with the name and statistics of every resource the engine
// tracks ("__sluice_overflow__" included once an entry has overflowed), in no
// particular order, all at one reading of the engine's clock. It copies the
// list of resources under the registry's lock and calls f outside it, so f
// may call the engine; resources made or forgotten meanwhile may or may not
// be seen.
func (eng *Engine) Each(f func(name string, s stat.Snapshot)) {
	now := eng.clock.Nanotime()
	eng.noticeShedding(now)
	eng.reg.mu.Lock()
	rs := make([]*resource, 0, len(eng.reg.all))
	for _, r := range eng.reg.all {
		rs = append(rs, r)
	}
	eng.reg.mu.Unlock()
	for _, r := range rs {
		f(r.name, r.snapshot(now))
	}
}
