package sluice

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unsafe"

	"go.uber.org/atomic"

	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/internal/chain"
	"github.com/sluice-go/sluice/internal/degrade"
	"github.com/sluice-go/sluice/internal/flow"
	"github.com/sluice-go/sluice/internal/isolation"
	"github.com/sluice-go/sluice/internal/layout"
	"github.com/sluice-go/sluice/internal/param"
	"github.com/sluice-go/sluice/internal/system"
	"github.com/sluice-go/sluice/internal/window"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// Re-exported contracts, so most programs import only this package.
type (
	// TrafficType says whether an entry is served (Inbound) or sent
	// (Outbound).
	TrafficType = core.TrafficType
	// BlockType names the kind of rule that refused an entry.
	BlockType = core.BlockType
	// BlockError describes a refused entry; reach it with errors.As.
	BlockError = core.BlockError
	// Clock is an engine's source of time.
	Clock = core.Clock
)

const (
	// Inbound is traffic this process serves (the default).
	Inbound = core.Inbound
	// Outbound is traffic this process sends to others.
	Outbound = core.Outbound
)

// ErrBlocked matches (errors.Is) every error returned for a refused entry.
var ErrBlocked = core.ErrBlocked

// ErrClosed is returned by Entry on an engine that has been closed.
var ErrClosed = errors.New("sluice: engine closed")

// DefaultMaxResources is the number of distinct resources an engine tracks
// when WithMaxResources is not given.
const DefaultMaxResources = 10000

// OverflowResource is the name under which entries of resources beyond the
// engine's resource limit are counted. Resources named by rules are always
// tracked, whatever the limit.
const OverflowResource = "__sluice_overflow__"

// Option configures an engine built by New.
type Option func(*config)

type config struct {
	clock        core.Clock
	maxResources int
	isFailure    func(error) bool // circuit breakers' error classifier (degrade.go)
	sysSource    SystemSource     // system metrics (system.go)
	sysInterval  time.Duration
	sysOnError   func(error)
}

// WithClock makes the engine read time from c instead of the system's
// monotonic clock. Tests pass a *sluicetest.ManualClock.
func WithClock(c Clock) Option { return func(cf *config) { cf.clock = c } }

// WithMaxResources bounds the number of distinct resources the engine keeps
// statistics for (each costs about 5 KiB). Entries of further resources
// without rules are counted together under OverflowResource. Zero or less
// means DefaultMaxResources.
func WithMaxResources(n int) Option { return func(cf *config) { cf.maxResources = n } }

// Engine is an independent instance of sluice: its own clock, resources,
// statistics and rules. All methods are safe for concurrent use.
type Engine struct {
	clock   core.Clock
	max     int
	inbound *window.Node
	reg     registry
	chain   chain.Chain
	system  *system.Slot
	closed  atomic.Bool

	mu        sync.Mutex // serializes rule loads and resource creation
	flowRules []rules.Flow
	flowCtl   map[string][]*flow.Controller
	isoRules  []rules.Isolation
	isoCtl    map[string][]*isolation.Controller
	cbRules   []rules.CircuitBreaker
	cbCtl     map[string][]*degrade.Breaker
	cbHub     *degrade.Hub // classifier, listeners and transition order of the breakers
	parRules  []rules.Param
	parCtl    map[string][]*param.Controller
}

// New returns an engine with no rules.
func New(opts ...Option) *Engine {
	cf := config{clock: core.SystemClock(), maxResources: DefaultMaxResources}
	for _, o := range opts {
		o(&cf)
	}
	if cf.maxResources <= 0 {
		cf.maxResources = DefaultMaxResources
	}
	g := &Engine{clock: cf.clock, max: cf.maxResources, inbound: window.NewNode()}
	g.reg.init()
	g.system = system.New(system.Config{
		Clock: g.clock, Inbound: g.inbound,
		Source: cf.sysSource, Interval: cf.sysInterval, OnError: cf.sysOnError,
	})
	g.cbHub = degrade.NewHub(cf.isFailure)
	return g
}

// Clock returns the engine's clock.
func (g *Engine) Clock() Clock { return g.clock }

// Close stops everything the engine started (such as the system metrics
// sampler) and waits for it. Entries made after Close return ErrClosed;
// entries in flight may still Exit. Close is idempotent.
func (g *Engine) Close() error {
	if g.closed.Swap(true) {
		return nil
	}
	return g.system.Close()
}

// RegisterSlot adds a custom slot (a slots.Preparer, slots.Checker or
// slots.Observer) at position order among custom slots; lower runs first.
// Custom slots run after the built-in ones. Engines without custom slots pay
// one pointer check for the feature.
func (g *Engine) RegisterSlot(s any, order int) error {
	if !g.chain.Add(s, order) {
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
	shortName = int(layout.CacheLine - unsafe.Sizeof(atomic.Pointer[ruleSet]{}) - unsafe.Sizeof(flow.Gate{}) - unsafe.Sizeof(uint8(0)))
	// longName marks a resource whose name is longer than shortName:
	// lookups then compare the name itself.
	longName = 255
)

func newResource(name string) *resource {
	r := &resource{name: strings.Clone(name), n: longName}
	if len(name) <= shortName {
		r.n = uint8(len(name))
		copy(r.short[:], name)
	}
	r.node.Init()
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
	isolation []*isolation.Controller
	param     []*param.Controller
	degrade   []*degrade.Breaker
}

func (o *otherRules) empty() bool {
	return len(o.isolation) == 0 && len(o.param) == 0 && len(o.degrade) == 0
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

// resource returns the named resource, creating it if the limit allows, or
// the overflow resource, and starts loading the counters a call at now will
// use (window.Node.Prefetch).
func (g *Engine) resource(name string, now int64) *resource {
	if x := g.reg.load(name, now); x != nil {
		return x
	}
	return g.slowResource(name, false)
}

func (g *Engine) slowResource(name string, force bool) *resource {
	x := g.reg.lookup(name, func() *resource {
		if !force && len(g.reg.all) >= g.max {
			return nil
		}
		return newResource(name)
	})
	if x != nil {
		return x
	}
	return g.reg.lookup(OverflowResource, func() *resource {
		return newResource(OverflowResource)
	})
}

// node returns the statistics node of name, creating the resource whatever
// the limit. Rules use it for the resources they name.
func (g *Engine) node(name string) *window.Node { return &g.slowResource(name, true).node }

// publish rebuilds every resource's rule set from the controllers in force.
// Must hold g.mu.
func (g *Engine) publish() {
	others := map[string]*otherRules{}
	get := func(res string) *otherRules {
		o := others[res]
		if o == nil {
			o = &otherRules{}
			others[res] = o
		}
		return o
	}
	for res, cs := range g.isoCtl {
		get(res).isolation = cs
	}
	for res, cs := range g.parCtl {
		get(res).param = cs
	}
	for res, cs := range g.cbCtl {
		get(res).degrade = cs
	}
	for res := range g.flowCtl {
		g.slowResource(res, true)
	}
	for res := range others {
		g.slowResource(res, true)
	}
	g.reg.rebind(func(x *resource) *ruleSet {
		var o otherRules
		if p := others[x.name]; p != nil {
			o = *p
		}
		return newRuleSet(g.flowCtl[x.name], o)
	})
}

// Snapshot returns the statistics of a resource at the engine clock's
// current reading, and false when the engine does not track it.
func (g *Engine) Snapshot(resourceName string) (stat.Snapshot, bool) {
	x := g.reg.get(resourceName)
	if x == nil {
		return stat.Snapshot{}, false
	}
	return x.node.Snapshot(g.clock.Nanotime()), true
}

// InboundSnapshot returns the statistics of all inbound traffic.
func (g *Engine) InboundSnapshot() stat.Snapshot {
	return g.inbound.Snapshot(g.clock.Nanotime())
}

// Resources returns the number of resources the engine tracks.
func (g *Engine) Resources() int { return g.reg.len() }
