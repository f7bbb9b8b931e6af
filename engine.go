package sluice

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/atomic"

	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/slots/degrade"
	"github.com/sluice-go/sluice/slots/flow"
	"github.com/sluice-go/sluice/slots/isolation"
	"github.com/sluice-go/sluice/slots/param"
	"github.com/sluice-go/sluice/slots/system"
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
	isFailure    func(error) bool  // circuit breakers' error classifier (degrade.go)
	sysSource    stat.SystemSource // system metrics (system.go)
	sysInterval  time.Duration
	sysOnError   func(error)
}

// WithClock makes the engine read time from c instead of the system's
// monotonic clock. Tests pass a *core.ManualClock.
func WithClock(c Clock) Option { return func(cf *config) { cf.clock = c } }

// WithMaxResources bounds the number of distinct resources the engine keeps
// statistics for (each costs about 3.5 KiB). Entries of further resources
// without rules are counted together under OverflowResource. Zero or less
// means DefaultMaxResources.
func WithMaxResources(n int) Option { return func(cf *config) { cf.maxResources = n } }

// Engine is an independent instance of sluice: its own clock, resources,
// statistics and rules. All methods are safe for concurrent use.
type Engine struct {
	clock   core.Clock
	max     int
	inbound *stat.Node
	reg     registry
	chain   core.Chain
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
	g := &Engine{clock: cf.clock, max: cf.maxResources, inbound: stat.NewNode()}
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

// RegisterSlot adds a custom slot (a core.PrepareSlot, core.RuleCheckSlot or
// core.StatSlot) at position order among custom slots; lower runs first.
// Custom slots run after the built-in ones. Engines without custom slots pay
// one pointer check for the feature.
func (g *Engine) RegisterSlot(s core.Slot, order int) error {
	if !g.chain.Add(s, order) {
		return fmt.Errorf("sluice: %T implements none of core.PrepareSlot, core.RuleCheckSlot, core.StatSlot", s)
	}
	return nil
}

// resource is one tracked resource: its statistics and the rules on it.
type resource struct {
	rules atomic.Pointer[ruleSet]
	name  string
	node  stat.Node // by value: the hot statistics share the allocation (padded inside)
}

func newResource(name string) *resource {
	r := &resource{name: name}
	r.node.Init()
	return r
}

// ruleSet is the immutable set of controllers on one resource, swapped whole
// when rules change.
type ruleSet struct {
	flow      []*flow.Controller
	isolation []*isolation.Controller
	param     []*param.Controller
	degrade   []*degrade.Breaker
}

func (rs *ruleSet) empty() bool {
	return len(rs.flow) == 0 && len(rs.isolation) == 0 && len(rs.param) == 0 && len(rs.degrade) == 0
}

// registry maps names to resources. Reads are lock-free: a read-only map
// behind an atomic pointer; misses fall back to a locked map of all
// resources, which is promoted to the read map once misses have paid for the
// copy.
type registry struct {
	read   atomic.Pointer[map[string]*resource]
	mu     sync.Mutex
	all    map[string]*resource
	misses int
}

func (r *registry) init() {
	m := map[string]*resource{}
	r.read.Store(&m)
	r.all = map[string]*resource{}
}

func (r *registry) load(name string) *resource {
	return (*r.read.Load())[name]
}

// lookup returns the resource, creating it with mk when absent and allowed.
// It returns nil when mk does.
func (r *registry) lookup(name string, mk func() *resource) *resource {
	r.mu.Lock()
	defer r.mu.Unlock()
	if x, ok := r.all[name]; ok {
		r.miss()
		return x
	}
	x := mk()
	if x == nil {
		return nil
	}
	r.all[x.name] = x
	r.miss()
	return x
}

// miss records a read-map miss and promotes the full map once misses reach
// an eighth of its size, so the copy costs at most eight entries per miss.
// Must hold mu.
func (r *registry) miss() {
	r.misses++
	if r.misses < len(r.all)/8+1 {
		return
	}
	m := make(map[string]*resource, len(r.all))
	for k, v := range r.all {
		m[k] = v
	}
	r.read.Store(&m)
	r.misses = 0
}

func (r *registry) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.all)
}

func (r *registry) each(f func(*resource)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.all {
		f(x)
	}
}

// resource returns the named resource, creating it if the limit allows, or
// the overflow resource.
func (g *Engine) resource(name string) *resource {
	if x := g.reg.load(name); x != nil {
		return x
	}
	return g.slowResource(name, false)
}

func (g *Engine) slowResource(name string, force bool) *resource {
	x := g.reg.lookup(name, func() *resource {
		if !force && len(g.reg.all) >= g.max {
			return nil
		}
		return newResource(strings.Clone(name))
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
func (g *Engine) node(name string) *stat.Node { return &g.slowResource(name, true).node }

// publish rebuilds every resource's rule set from the controllers in force.
// Must hold g.mu.
func (g *Engine) publish() {
	sets := map[string]*ruleSet{}
	get := func(res string) *ruleSet {
		s := sets[res]
		if s == nil {
			s = &ruleSet{}
			sets[res] = s
		}
		return s
	}
	for res, cs := range g.flowCtl {
		get(res).flow = cs
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
	for res := range sets {
		g.slowResource(res, true)
	}
	g.reg.each(func(x *resource) {
		s := sets[x.name]
		if s != nil && s.empty() {
			s = nil
		}
		x.rules.Store(s)
	})
}

// Snapshot returns the statistics of a resource at the engine clock's
// current reading, and false when the engine does not track it.
func (g *Engine) Snapshot(resourceName string) (stat.Snapshot, bool) {
	x := g.reg.load(resourceName)
	if x == nil {
		g.reg.mu.Lock()
		x = g.reg.all[resourceName]
		g.reg.mu.Unlock()
	}
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
