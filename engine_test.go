package sluice

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"sync/atomic"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/slots"
)

func TestFlowRulesRefusedWholeKeepOld(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	good := []rules.Flow{{Resource: "a", Threshold: 5}}
	mustLoadFlow(t, g, good...)

	tests := []struct {
		name      string
		give      []rules.Flow
		wantIndex int
		wantField string
		wantRes   string
	}{
		{"negative threshold", []rules.Flow{{Resource: "a", Threshold: 10}, {Resource: "b", Threshold: -1}}, 1, "Threshold", "b"},
		{"empty resource", []rules.Flow{{Threshold: 1}}, 0, "Resource", ""},
		{"queueing too long", []rules.Flow{{Resource: "c", Threshold: 1, Throttle: &rules.Throttle{MaxQueueing: 2 * time.Hour}}}, 0, "Throttle.MaxQueueing", "c"},
		{"warm-up without period", []rules.Flow{{Resource: "a", Threshold: 1}, {Resource: "a", Threshold: 1, StatInterval: time.Minute}, {Resource: "d", Threshold: 1, WarmUp: &rules.WarmUp{}}}, 2, "WarmUp.Period", "d"},
		{"duplicate", []rules.Flow{{Resource: "a", Threshold: 5}, {Resource: "b", Threshold: 1}, {Resource: "a", Threshold: 3}}, 2, "", "a"},
		{"bad interval", []rules.Flow{{Resource: "e", Threshold: 1, StatInterval: 1500 * time.Microsecond}}, 0, "StatInterval", "e"},
		{"throttle on concurrency", []rules.Flow{{Resource: "f", Threshold: 1, Metric: rules.Concurrency, Throttle: &rules.Throttle{}}}, 0, "Throttle", "f"},
		{"associated self", []rules.Flow{{Resource: "g", RefResource: "g", Threshold: 1}}, 0, "RefResource", "g"},
		{"absurd threshold", []rules.Flow{{Resource: "h", Threshold: 1e13}}, 0, "Threshold", "h"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			changed, err := loadFlow(g, tt.give)
			require.Error(t, err)
			assert.False(t, changed)
			var re *rules.Error
			require.ErrorAs(t, err, &re)
			assert.Equal(t, tt.wantIndex, re.Index)
			assert.Equal(t, tt.wantField, re.Field)
			assert.Equal(t, tt.wantRes, re.Resource)
			assert.Equal(t, "flow", re.Kind)
			assert.Contains(t, err.Error(), fmt.Sprintf("flow rule %d", tt.wantIndex))
			assert.Equal(t, good, g.Rules().Flow, "the rules in force stay in force")
		})
	}
	// And the old rule still enforces its limit.
	n := 0
	for i := 0; i < 10; i++ {
		if try(g, "a") {
			n++
		}
	}
	assert.Equal(t, 5, n)
}

func TestReloadKeepsCountingState(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 10})
	for i := 0; i < 10; i++ {
		require.True(t, try(g, "r"))
	}
	// Identical rules: nothing changes.
	changed, err := loadFlow(g, []rules.Flow{{Resource: "r", Threshold: 10}})
	require.NoError(t, err)
	assert.False(t, changed)
	require.False(t, try(g, "r"))

	// A new threshold keeps what was admitted this second: 10 more, not 20.
	changed, err = loadFlow(g, []rules.Flow{{ID: "raised", Resource: "r", Threshold: 20}})
	require.NoError(t, err)
	assert.True(t, changed)
	n := 0
	for i := 0; i < 30; i++ {
		if try(g, "r") {
			n++
		}
	}
	assert.Equal(t, 10, n)

	// A different kind of counting (another interval) starts fresh.
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 20, StatInterval: 2 * time.Second})
	assert.True(t, try(g, "r"))

	// Removing the rules lets everything through; the next second is clean.
	mustLoadFlow(t, g)
	assert.Empty(t, g.Rules().Flow)
	for i := 0; i < 100; i++ {
		require.True(t, try(g, "r"))
	}
	clk.Advance(time.Second)
}

func TestReloadKeepsInFlightConcurrency(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	_, err := loadFlow(g, []rules.Flow{{Metric: rules.Concurrency, Resource: "r", Threshold: 3}})
	require.NoError(t, err)
	var held []Pass
	for i := 0; i < 3; i++ {
		p, err := g.Entry("r")
		require.NoError(t, err)
		held = append(held, p)
	}
	// Raise to 4 while 3 are in flight: exactly one more fits.
	_, err = loadFlow(g, []rules.Flow{{Metric: rules.Concurrency, Resource: "r", Threshold: 4}})
	require.NoError(t, err)
	p, err := g.Entry("r")
	require.NoError(t, err)
	held = append(held, p)
	_, err = g.Entry("r")
	require.ErrorIs(t, err, core.ErrBlocked)
	for _, p := range held {
		p.Exit()
	}
	assert.Equal(t, []rules.Flow{{Metric: rules.Concurrency, Resource: "r", Threshold: 4}}, g.Rules().Flow)
}

// TestReloadUnderTrafficIsExact reloads equivalent rules (new IDs, same
// counting) continuously while 32 goroutines hammer the resource at one
// instant: exactly the threshold passes, whatever the interleaving.
func TestReloadUnderTrafficIsExact(t *testing.T) {
	const T = 500
	g, _ := newTestEngine(t, 0)
	mustLoadFlow(t, g, rules.Flow{ID: "v0", Resource: "r", Threshold: T})
	var passed atomic.Int64
	stop := make(chan struct{})
	var reloads sync.WaitGroup
	reloads.Add(1)
	go func() {
		defer reloads.Done()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_, err := loadFlow(g, []rules.Flow{{ID: fmt.Sprintf("v%d", i), Resource: "r", Threshold: T}})
			if err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				if try(g, "r") {
					passed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	reloads.Wait()
	assert.Equal(t, int64(T), passed.Load())
}

type denySlot struct {
	resource string
	checked  atomic.Int64
}

func (d *denySlot) Check(ec *slots.Entry) *core.BlockError {
	d.checked.Add(1)
	if ec.Resource == d.resource {
		return &core.BlockError{Reason: "denied by custom slot", Threshold: 0}
	}
	return nil
}

type countSlot struct {
	mu                  sync.Mutex
	pass, block, exited int
	lastRT              int64
}

func (c *countSlot) OnPass(*slots.Entry) { c.mu.Lock(); c.pass++; c.mu.Unlock() }
func (c *countSlot) OnBlock(_ *slots.Entry, be *core.BlockError) {
	c.mu.Lock()
	c.block++
	c.mu.Unlock()
}
func (c *countSlot) OnExit(e *slots.Entry, end int64, _ error) {
	c.mu.Lock()
	c.exited++
	c.lastRT = end - e.Start
	c.mu.Unlock()
}

func TestCustomSlots(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	require.Error(t, g.RegisterSlot(struct{}{}, 0), "a value that is no slot is refused")
	deny := &denySlot{resource: "secret"}
	counts := &countSlot{}
	require.NoError(t, g.RegisterSlot(deny, 10))
	require.NoError(t, g.RegisterSlot(counts, 20))
	mustLoadFlow(t, g, rules.Flow{Resource: "secret", Threshold: 1})

	// The custom check runs after the built-in ones and its refusal gives
	// back what flow reserved: the flow rule still has its one token.
	_, err := g.Entry("secret")
	var be *core.BlockError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, core.BlockCustom, be.Type, "be.Type == core.BlockCustom")
	assert.Equal(t, "secret", be.Resource)
	assert.Equal(t, "denied by custom slot", be.Reason)

	p, err := g.Entry("public")
	require.NoError(t, err)
	clk.Advance(3 * time.Millisecond)
	p.Exit()
	counts.mu.Lock()
	assert.Equal(t, 1, counts.pass)
	assert.Equal(t, 1, counts.block)
	assert.Equal(t, 1, counts.exited)
	assert.Equal(t, int64(3*time.Millisecond), counts.lastRT)
	counts.mu.Unlock()

	// A stat slot registered while an entry is in flight does not see that
	// entry's exit (it never saw it pass).
	late := &countSlot{}
	inFlight, err := g.Entry("public")
	require.NoError(t, err)
	require.NoError(t, g.RegisterSlot(late, 30))
	inFlight.Exit()
	late.mu.Lock()
	assert.Equal(t, 0, late.exited)
	late.mu.Unlock()

	// Removing the denial shows the flow token was never spent.
	deny.resource = "nothing"
	require.True(t, try(g, "secret"))
	require.False(t, try(g, "secret"))
}

func TestEnginesAreIndependent(t *testing.T) {
	a, clkA := newTestEngine(t, 0)
	b, _ := newTestEngine(t, 0)
	mustLoadFlow(t, a, rules.Flow{Resource: "r", Threshold: 1})
	require.True(t, try(a, "r"))
	require.False(t, try(a, "r"))
	for i := 0; i < 5; i++ {
		require.True(t, try(b, "r"), "engine b has no rules")
	}
	assert.Empty(t, b.Rules().Flow)
	clkA.Advance(time.Second)
	require.True(t, try(a, "r"), "engine a's clock moved, b's did not matter")
	sa, _ := a.Snapshot("r")
	sb, _ := b.Snapshot("r")
	assert.Equal(t, uint64(2), sa.TotalPass)
	assert.Equal(t, uint64(5), sb.TotalPass)
}

func TestResourceLimitAndOverflow(t *testing.T) {
	g, _ := newTestEngine(t, 0, WithLimits(Limits{Resources: 2}))
	require.True(t, try(g, "a"))
	require.True(t, try(g, "b"))
	require.True(t, try(g, "c")) // beyond the limit: counted under the overflow resource
	_, ok := g.Snapshot("c")
	assert.False(t, ok)
	s, ok := g.Snapshot(overflowResource)
	require.True(t, ok)
	assert.Equal(t, uint64(1), s.TotalPass)
	// A rule on a new resource is always tracked, whatever the limit.
	mustLoadFlow(t, g, rules.Flow{Resource: "d", Threshold: 1})
	require.True(t, try(g, "d"))
	require.False(t, try(g, "d"))
}

func TestInboundAndOutboundStatistics(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	watchInbound(t, g) // inbound entries are counted from now on
	p, err := g.Entry("in")
	require.NoError(t, err)
	q, err := g.Entry("out", WithTraffic(core.Outbound))
	require.NoError(t, err)
	assert.Equal(t, int64(1), g.SystemMetrics().Inbound.Concurrency, "only inbound counts globally")
	clk.Advance(5 * time.Millisecond)
	q.Exit()
	p.SetError(errors.New("failed"))
	assert.Error(t, p.rec.err)
	p.Exit()
	in := g.SystemMetrics().Inbound
	assert.Equal(t, uint64(1), in.TotalPass)
	assert.Equal(t, uint64(1), in.TotalError)
	assert.Equal(t, 5*time.Millisecond, in.AvgRT)
	out, _ := g.Snapshot("out")
	assert.Equal(t, uint64(1), out.TotalComplete)
	assert.Equal(t, uint64(0), out.TotalError)
}

func TestClosedEngineRefusesEntries(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	p, err := g.Entry("r")
	require.NoError(t, err)
	require.NoError(t, g.Close())
	require.NoError(t, g.Close(), "Close is idempotent")
	p.Exit() // in-flight entries may still exit
	_, err = g.Entry("r")
	require.ErrorIs(t, err, ErrClosed)
	require.NotErrorIs(t, err, core.ErrBlocked)
	_, err = g.EntryContext(context.Background(), "r")
	require.ErrorIs(t, err, ErrClosed)
}

func TestTooManyAttachments(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	opts := make([]EntryOption, maxAttachments+1)
	for i := range opts {
		opts[i] = WithAttachment(fmt.Sprint(i), i)
	}
	_, err := g.Entry("r", opts...)
	require.ErrorIs(t, err, ErrTooManyAttachments)
	require.True(t, try(g, "r", opts[:maxAttachments]...))
}

func TestDefaultEngine(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	old := SetDefault(New(WithClock(clk)))
	t.Cleanup(func() { _ = SetDefault(old).Close() })
	require.NoError(t, LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "pkg", Threshold: 2}}}))
	assert.Len(t, Default().Rules().Flow, 1)
	for i := 0; i < 2; i++ {
		p, err := Entry("pkg")
		require.NoError(t, err)
		p.Exit()
	}
	_, err := EntryContext(context.Background(), "pkg")
	require.ErrorIs(t, err, core.ErrBlocked)
	s, ok := Default().Snapshot("pkg")
	require.True(t, ok)
	assert.Equal(t, uint64(2), s.TotalPass)
	require.NoError(t, LoadRules(rules.Set{Flow: []rules.Flow{{Metric: rules.Concurrency, Resource: "pkg", Threshold: 1}}}))
	assert.Len(t, Default().Rules().Flow, 1)
}

func TestEntryExitAllocatesNothing(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	_, err := loadFlow(g, []rules.Flow{{Resource: "r", Threshold: 1e12}, {Metric: rules.Concurrency, Resource: "r", Threshold: 1e9}})
	require.NoError(t, err)
	user := fmt.Sprint("user-", 42)
	tests := []struct {
		name string
		run  func()
	}{
		{"engine", func() { p, _ := g.Entry("r"); p.Exit() }},
		{"engine with options", func() {
			p, _ := g.Entry("r", WithTraffic(core.Outbound), WithBatch(2), WithArgs(user, 7), WithAttachment("ip", user))
			p.Exit()
		}},
		{"engine with context", func() { p, _ := g.EntryContext(context.Background(), "r"); p.Exit() }},
		{"package level", func() { p, _ := Entry("r"); p.Exit() }},
		{"package level with context", func() { p, _ := EntryContext(context.Background(), "r"); p.Exit() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if raceEnabled && strings.HasPrefix(tt.name, "package level") {
				t.Skip("the race detector changes inlining; make test checks this without -race (make allocs)")
			}
			assert.Zero(t, testing.AllocsPerRun(200, tt.run))
		})
	}
}

// TestEntryRefusesWhatItCannotMakeSenseOf checks the entries refused before
// any rule runs: each error names the problem, none is a block, and nothing
// is counted or tracked.
func TestEntryRefusesWhatItCannotMakeSenseOf(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	// An inbound concurrency limit that one held entry exhausts: an entry
	// that slipped past as neither inbound nor outbound would skip it.
	_, err := loadSystem(g, []rules.System{{Metric: rules.InboundConcurrency, Threshold: 1}})
	require.NoError(t, err)
	held, err := g.Entry("held")
	require.NoError(t, err)
	defer held.Exit()

	tests := []struct {
		name     string
		resource string
		opts     []EntryOption
		want     error
		wantText string
	}{
		{"empty resource", "", nil, ErrBadResource, "sluice: invalid resource name: empty"},
		{"empty resource, outbound", "", []EntryOption{WithTraffic(core.Outbound)}, ErrBadResource, ""},
		{"unknown traffic type", "r", []EntryOption{WithTraffic(core.TrafficType(7))}, ErrBadTraffic, "sluice: invalid traffic type: 7"},
		{"traffic type 2", "r", []EntryOption{WithTraffic(core.Outbound + 1)}, ErrBadTraffic, ""},
		{"zero batch", "r", []EntryOption{WithBatch(0)}, ErrBadBatch, ""},
		{"batch over maxBatch", "r", []EntryOption{WithBatch(maxBatch + 1)}, ErrBadBatch, ""},
		{"string arg index -1", "r", []EntryOption{WithStringArg(-1, "u")}, ErrBadArgIndex, "sluice: invalid argument index: -1 (want 0 to 255, the indexes a param rule can name)"},
		{"string arg index 1000", "r", []EntryOption{WithStringArg(1000, "u")}, ErrBadArgIndex, "sluice: invalid argument index: 1000 (want 0 to 255, the indexes a param rule can name)"},
		{"int arg index 256", "r", []EntryOption{WithIntArg(0, 1), WithIntArg(256, 7)}, ErrBadArgIndex, ""},
		{"int arg index min int", "r", []EntryOption{WithIntArg(math.MinInt, 7)}, ErrBadArgIndex, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := g.Entry(tt.resource, tt.opts...)
			require.Zero(t, p)
			require.ErrorIs(t, err, tt.want)
			require.NotErrorIs(t, err, core.ErrBlocked)
			if tt.wantText != "" {
				require.EqualError(t, err, tt.wantText)
			}
			_, err = g.EntryContext(context.Background(), tt.resource, tt.opts...)
			require.ErrorIs(t, err, tt.want)
		})
	}
	in := g.SystemMetrics().Inbound
	assert.Equal(t, uint64(1), in.TotalPass, "only the held entry")
	assert.Zero(t, in.TotalBlock)
	assert.Equal(t, 1, g.reg.len(), "only the held entry's resource is tracked")
	p, err := g.Entry("r", WithTraffic(core.Outbound))
	require.NoError(t, err, "outbound entries are not subject to system rules")
	p.Exit()
}

// TestCloseReleasesQueuedEntries queues an entry behind each kind of
// throttling rule and closes the engine: the entry returns ErrClosed at
// once, without the clock moving, and its timer is gone.
func TestCloseReleasesQueuedEntries(t *testing.T) {
	flowThrottle := rules.Flow{Resource: "r", Threshold: 1, Throttle: &rules.Throttle{MaxQueueing: 5 * time.Second}}
	warmThrottle := rules.Flow{Resource: "r", Threshold: 10, WarmUp: &rules.WarmUp{Period: 10 * time.Second}, Throttle: &rules.Throttle{MaxQueueing: 5 * time.Second}}
	paramThrottle := rules.Param{Resource: "r", Index: 0, Threshold: 1, Throttle: &rules.Throttle{MaxQueueing: 5 * time.Second}}
	entry := func(g *Engine) (Pass, error) { return g.Entry("r", WithArgs("user-1")) }
	withContext := func(g *Engine) (Pass, error) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		return g.EntryContext(ctx, "r", WithArgs("user-1"))
	}
	tests := []struct {
		name  string
		set   rules.Set
		enter func(*Engine) (Pass, error)
	}{
		{"flow throttle, Entry", rules.Set{Flow: []rules.Flow{flowThrottle}}, entry},
		{"flow throttle, EntryContext", rules.Set{Flow: []rules.Flow{flowThrottle}}, withContext},
		{"warm-up throttle", rules.Set{Flow: []rules.Flow{warmThrottle}}, entry},
		{"param throttle, Entry", rules.Set{Param: []rules.Param{paramThrottle}}, entry},
		{"param throttle, EntryContext", rules.Set{Param: []rules.Param{paramThrottle}}, withContext},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, clk := newTestEngine(t, 0)
			require.NoError(t, g.LoadRules(tt.set))
			p, err := tt.enter(g) // takes the turn at 0
			require.NoError(t, err)
			p.Exit()

			errc := make(chan error, 1)
			go func() {
				p, err := tt.enter(g) // queued behind it
				p.Exit()              // the zero Pass when refused: does nothing
				errc <- err
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, clk.BlockUntil(ctx, 1), "the second entry waits on the clock")
			require.NoError(t, g.Close())
			select {
			case err := <-errc:
				require.ErrorIs(t, err, ErrClosed)
				require.NotErrorIs(t, err, core.ErrBlocked)
			case <-ctx.Done():
				t.Fatal("the queued entry is still waiting after Close")
			}
			assert.Equal(t, int64(0), clk.Nanotime(), "released without the clock moving")
			assert.Zero(t, clk.Waiters(), "its timer was stopped")
		})
	}
}

// TestOversizedBatchSaysWhy checks the refusal of a batch larger than a
// rule's threshold, which no retry can let through: the reason says so, the
// batch is what was observed, no RetryAfter is suggested, and nothing stays
// reserved (a batch of exactly the threshold still passes).
func TestOversizedBatchSaysWhy(t *testing.T) {
	tests := []struct {
		name      string
		set       rules.Set
		wantType  core.BlockType
		wantLimit float64
	}{
		{"flow QPS", rules.Set{Flow: []rules.Flow{{Resource: "r", Threshold: 10}}}, core.BlockFlow, 10},
		{"isolation", rules.Set{Flow: []rules.Flow{{Metric: rules.Concurrency, Resource: "r", Threshold: 10}}}, core.BlockFlow, 10},
		{"system concurrency", rules.Set{System: []rules.System{{Metric: rules.InboundConcurrency, Threshold: 10}}}, core.BlockSystem, 10},
		{"system QPS", rules.Set{System: []rules.System{{Metric: rules.InboundQPS, Threshold: 10}}}, core.BlockSystem, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, _ := newTestEngine(t, 0)
			require.NoError(t, g.LoadRules(tt.set))
			_, err := g.Entry("r", WithBatch(11))
			var be *core.BlockError
			require.ErrorAs(t, err, &be)
			assert.Equal(t, tt.wantType, be.Type)
			assert.Equal(t, "batch larger than threshold", be.Reason)
			assert.Equal(t, 11.0, be.Observed)
			assert.Equal(t, tt.wantLimit, be.Threshold)
			assert.Zero(t, be.RetryAfter)
			assert.True(t, try(g, "r", WithBatch(10)), "the refused batch reserved nothing")
		})
	}
}

// panicSlot is a custom slot that panics at one stage while armed.
type panicSlot struct {
	at    string // "prepare", "check" or "pass"
	armed atomic.Bool
}

type slotPanic struct{ at string }

func (s *panicSlot) boom(at string) {
	if s.at == at && s.armed.Load() {
		panic(slotPanic{at})
	}
}
func (s *panicSlot) Prepare(*slots.Entry)                   { s.boom("prepare") }
func (s *panicSlot) Check(*slots.Entry) *core.BlockError    { s.boom("check"); return nil }
func (s *panicSlot) OnPass(*slots.Entry)                    { s.boom("pass") }
func (s *panicSlot) OnBlock(*slots.Entry, *core.BlockError) {}
func (s *panicSlot) OnExit(*slots.Entry, int64, error)      {}

// TestPanickingSlotReleasesEverything makes a custom slot panic at each
// stage of an entry on a resource whose rules admit one call at a time:
// the panic reaches the caller unchanged, nothing the built-in checks
// reserved stays taken (the next entry passes), and the entry that never
// ran is counted neither as passed nor as blocked.
func TestPanickingSlotReleasesEverything(t *testing.T) {
	sets := []struct {
		name string
		set  rules.Set
	}{
		{"isolation", rules.Set{Flow: []rules.Flow{{Metric: rules.Concurrency, Resource: "r", Threshold: 1}}}},
		{"isolation and flow", rules.Set{
			Flow: []rules.Flow{{Resource: "r", Threshold: 1}, {Metric: rules.Concurrency, Resource: "r", Threshold: 1}},
		}},
		{"fast check", rules.Set{Flow: []rules.Flow{{Resource: "r", Threshold: 1}}}},
		{"concurrency flow rule", rules.Set{Flow: []rules.Flow{{Resource: "r", Threshold: 1, Metric: rules.Concurrency}}}},
	}
	for _, set := range sets {
		for _, at := range []string{"prepare", "check", "pass"} {
			t.Run(set.name+"/"+at, func(t *testing.T) {
				g, _ := newTestEngine(t, 0)
				require.NoError(t, g.LoadRules(set.set))
				slot := &panicSlot{at: at}
				require.NoError(t, g.RegisterSlot(slot, 0))
				slot.armed.Store(true)
				require.PanicsWithValue(t, slotPanic{at}, func() { _, _ = g.Entry("r") })
				s, ok := g.Snapshot("r")
				require.True(t, ok)
				assert.Zero(t, s.TotalPass, "an entry that never ran is not counted as passed")
				assert.Zero(t, s.TotalBlock)
				assert.Zero(t, s.Concurrency)
				assert.Zero(t, g.SystemMetrics().Inbound.Concurrency)

				slot.armed.Store(false)
				p, err := g.Entry("r")
				require.NoError(t, err, "the panicked entry holds nothing")
				_, err = g.Entry("r")
				require.ErrorIs(t, err, core.ErrBlocked, "one at a time still")
				p.Exit()
			})
		}
	}
}

func TestWithNilClockMeansSystemClock(t *testing.T) {
	g := New(WithClock(nil))
	defer g.Close()
	require.NotNil(t, g.clock)
	require.True(t, try(g, "r"))
}

// BenchmarkEntryExitAllSlotKinds is Entry+Exit of an inbound entry on a
// resource with a rule of every kind, all passing (budget: <= 400 ns,
// 0 allocs): system rules on every metric, a QPS flow rule, an isolation
// rule, a param rule on the entry's argument and a closed circuit breaker.
func BenchmarkEntryExitAllSlotKinds(b *testing.B) {
	src := &sysSource{}
	src.load.Store(1)
	src.cpu.Store(0.5)
	g := New(WithSystemSampler(SystemSampler{Source: src}))
	b.Cleanup(func() { _ = g.Close() })
	err := g.LoadRules(rules.Set{
		System: []rules.System{
			{Metric: rules.InboundQPS, Threshold: 1e11},
			{Metric: rules.InboundConcurrency, Threshold: 1e9},
			{Metric: rules.InboundAvgRT, Threshold: 1e6},
			{Metric: rules.Load1, Threshold: 1000},
			{Metric: rules.CPUUsage, Threshold: 0.99, Strategy: rules.BBR},
		},
		Flow:           []rules.Flow{{Resource: "all", Threshold: 1e12}, {Metric: rules.Concurrency, Resource: "all", Threshold: 1e9}},
		Param:          []rules.Param{{Resource: "all", Threshold: rules.MaxThreshold}},
		CircuitBreaker: []rules.CircuitBreaker{{Resource: "all", Strategy: rules.ErrorRatio, Threshold: 0.5, RetryTimeout: time.Second}},
	})

	if err != nil {
		b.Fatal(err)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p, err := g.Entry("all", WithArgs("user-1"))
			if err != nil {
				b.Fatal(err)
			}
			p.Exit()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p, err := g.Entry("all", WithArgs("user-1"))
				if err != nil {
					b.Error(err)
					return
				}
				p.Exit()
			}
		})
	})
}
