package sluice

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/slots"
	"github.com/sluice-go/sluice/stat"
)

var errDependency = errors.New("dependency failed")

// cbEngine returns an engine on a manual clock with the given breakers, and
// a log of its transitions.
func cbEngine(t testing.TB, rs []rules.CircuitBreaker, opts ...Option) (*Engine, *sluicetest.ManualClock, *transitions) {
	t.Helper()
	clk := sluicetest.NewManualClock(int64(time.Hour))
	g := New(append([]Option{WithClock(clk)}, opts...)...)
	t.Cleanup(func() { _ = g.Close() })
	log := &transitions{}
	g.Subscribe(log.add)
	changed, err := loadBreakers(g, rs)
	require.NoError(t, err)
	require.Equal(t, len(rs) > 0, changed)
	return g, clk, log
}

// transitions logs the breaker events of an engine's event stream.
type transitions struct {
	mu sync.Mutex
	ts []stat.Event
}

func (l *transitions) add(e stat.Event) {
	if e.Kind != stat.EventBreaker {
		return
	}
	l.mu.Lock()
	l.ts = append(l.ts, e)
	l.mu.Unlock()
}

func (l *transitions) moves() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, t := range l.ts {
		out = append(out, t.Resource+": "+t.From+">"+t.To)
	}
	return out
}

// do makes one entry on res that takes rt and ends with err; it returns the
// entry's error.
func do(g *Engine, clk *sluicetest.ManualClock, res string, rt time.Duration, err error) error {
	p, e := g.Entry(res)
	if e != nil {
		return e
	}
	clk.Advance(rt)
	p.SetError(err)
	p.Exit()
	return nil
}

func states(g *Engine) []stat.BreakerState {
	var out []stat.BreakerState
	for _, s := range g.CircuitBreakerStates() {
		out = append(out, s.State)
	}
	return out
}

func TestCircuitBreakerCycleThroughEngine(t *testing.T) {
	ratio := rules.CircuitBreaker{Resource: "orders", Strategy: rules.ErrorRatio, Threshold: 0.5, MinRequestAmount: 4, RetryTimeout: 5 * time.Second, Probes: 2}
	slow := rules.CircuitBreaker{Resource: "search", Strategy: rules.SlowRequestRatio, Threshold: 0.5, MaxAllowedRT: 50 * time.Millisecond, MinRequestAmount: 2, RetryTimeout: time.Second}
	g, clk, log := cbEngine(t, []rules.CircuitBreaker{ratio, slow})

	for i, err := range []error{nil, errDependency, nil, errDependency} {
		require.NoError(t, do(g, clk, "orders", time.Millisecond, err), "call %d", i)
	}
	assert.Equal(t, []stat.BreakerState{stat.BreakerClosed, stat.BreakerClosed}, states(g), "2 of 4 is not above 0.5")
	require.NoError(t, do(g, clk, "orders", time.Millisecond, errDependency))
	assert.Equal(t, []stat.BreakerState{stat.BreakerOpen, stat.BreakerClosed}, states(g), "3 of 5 is")
	opened := clk.Nanotime()

	clk.Advance(5*time.Second - 1)
	err := do(g, clk, "orders", 0, nil)
	require.ErrorIs(t, err, core.ErrBlocked)
	var be *core.BlockError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, core.BlockDegrade, be.Type)
	assert.Equal(t, "orders", be.Resource)
	assert.Equal(t, time.Millisecond, be.RetryAfter, "1 ns to wait, rounded up to the millisecond")
	assert.Equal(t, 0.6, be.Observed)
	assert.Equal(t, 0.5, be.Threshold)
	assert.Equal(t, core.RuleRef{ID: ratio.ID, Metric: string(ratio.Strategy)}, be.Rule)
	s, ok := g.Snapshot("orders")
	require.True(t, ok)
	assert.Equal(t, uint64(1), s.TotalBlock, "the refusal is counted as a block")

	clk.Set(opened + int64(5*time.Second))
	p1, err := g.Entry("orders")
	require.NoError(t, err)
	p2, err := g.Entry("orders")
	require.NoError(t, err)
	_, err = g.Entry("orders")
	require.ErrorIs(t, err, core.ErrBlocked, "only two probes")
	p1.Exit()
	assert.Equal(t, []stat.BreakerState{stat.BreakerHalfOpen, stat.BreakerClosed}, states(g))
	p2.Exit()
	assert.Equal(t, []stat.BreakerState{stat.BreakerClosed, stat.BreakerClosed}, states(g))

	// The slow-ratio breaker reads RT from Entry to Exit.
	require.NoError(t, do(g, clk, "search", 50*time.Millisecond, nil))
	require.NoError(t, do(g, clk, "search", 51*time.Millisecond, nil))
	assert.Equal(t, stat.BreakerClosed, states(g)[1], "1 slow of 2 is not above 0.5")
	require.NoError(t, do(g, clk, "search", 60*time.Millisecond, nil))
	assert.Equal(t, stat.BreakerOpen, states(g)[1])

	assert.Equal(t, []string{
		"orders: closed>open", "orders: open>half-open", "orders: half-open>closed",
		"search: closed>open",
	}, log.moves())
}

// TestCircuitBreakerTransitionCounts drives a breaker through two opens, a
// failed probe round and a successful one, with refusals in between that
// change nothing, and reads the counts by target state.
func TestCircuitBreakerTransitionCounts(t *testing.T) {
	r := rules.CircuitBreaker{ID: "pay", Resource: "pay", Strategy: rules.ErrorCount, Threshold: 1, MinRequestAmount: 1, RetryTimeout: time.Second}
	g, clk, log := cbEngine(t, []rules.CircuitBreaker{r})
	counts := func() [3]uint64 { return g.CircuitBreakerStates()[0].Transitions }
	assert.Equal(t, [3]uint64{}, counts())
	require.NoError(t, do(g, clk, "pay", 0, nil))
	assert.Equal(t, [3]uint64{}, counts(), "a pass that keeps the state counts nothing")
	require.NoError(t, do(g, clk, "pay", 0, errDependency)) // closed > open
	for i := 0; i < 5; i++ {
		require.ErrorIs(t, do(g, clk, "pay", 0, nil), core.ErrBlocked)
	}
	assert.Equal(t, [3]uint64{stat.BreakerOpen: 1}, counts(), "refusals count nothing")
	clk.Advance(time.Second)
	require.NoError(t, do(g, clk, "pay", 0, errDependency)) // open > half-open > open
	assert.Equal(t, [3]uint64{stat.BreakerOpen: 2, stat.BreakerHalfOpen: 1}, counts())
	clk.Advance(time.Second)
	require.NoError(t, do(g, clk, "pay", 0, nil)) // open > half-open > closed
	want := [3]uint64{stat.BreakerClosed: 1, stat.BreakerOpen: 2, stat.BreakerHalfOpen: 2}
	assert.Equal(t, want, counts())
	assert.Len(t, log.moves(), 5, "one count per transition the listeners saw")

	// An equivalent reload keeps the counts with the state; another
	// strategy starts from zero.
	same := r
	same.Threshold = 3
	_, err := loadBreakers(g, []rules.CircuitBreaker{same})
	require.NoError(t, err)
	assert.Equal(t, want, counts())
	ratio := rules.CircuitBreaker{Resource: "pay", Strategy: rules.ErrorRatio, Threshold: 0.5, RetryTimeout: time.Second}
	_, err = loadBreakers(g, []rules.CircuitBreaker{ratio})
	require.NoError(t, err)
	assert.Equal(t, [3]uint64{}, counts())
}

func TestCircuitBreakerLoadRefusesWholeAndKeepsState(t *testing.T) {
	count := rules.CircuitBreaker{Resource: "orders", Strategy: rules.ErrorCount, Threshold: 2, MinRequestAmount: 1, RetryTimeout: 10 * time.Second}
	g, clk, _ := cbEngine(t, []rules.CircuitBreaker{count})
	require.NoError(t, do(g, clk, "orders", 0, errDependency))

	raised := count
	raised.Threshold, raised.ID = 3, "raised"
	bad := count
	bad.Resource, bad.RetryTimeout = "users", 0
	changed, err := loadBreakers(g, []rules.CircuitBreaker{raised, bad})
	assert.False(t, changed)
	var re *rules.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, 1, re.Index)
	assert.Equal(t, "users", re.Resource)
	assert.Equal(t, "RetryTimeout", re.Field)
	assert.Equal(t, []rules.CircuitBreaker{count}, g.Rules().CircuitBreaker, "old rules stay in force")

	// The window survives an equivalent reload: one error before, one after.
	changed, err = loadBreakers(g, []rules.CircuitBreaker{count})
	require.NoError(t, err)
	assert.False(t, changed, "same rules")
	lowered := count
	lowered.ID = "renamed"
	changed, err = loadBreakers(g, []rules.CircuitBreaker{lowered})
	require.NoError(t, err)
	assert.True(t, changed)
	require.NoError(t, do(g, clk, "orders", 0, errDependency))
	require.Equal(t, []stat.BreakerState{stat.BreakerOpen}, states(g))

	// Open survives an equivalent reload, until the same instant.
	opened := clk.Nanotime()
	_, err = loadBreakers(g, []rules.CircuitBreaker{raised})
	require.NoError(t, err)
	assert.Equal(t, []BreakerStatus{{Rule: raised, State: stat.BreakerOpen, Transitions: [3]uint64{stat.BreakerOpen: 1}}}, g.CircuitBreakerStates(), "state and counts")
	clk.Set(opened + int64(10*time.Second) - 1)
	require.ErrorIs(t, do(g, clk, "orders", 0, nil), core.ErrBlocked)

	// Another strategy starts afresh; no rules means no breaker.
	ratio := rules.CircuitBreaker{Resource: "orders", Strategy: rules.ErrorRatio, Threshold: 0.5, RetryTimeout: time.Second}
	_, err = loadBreakers(g, []rules.CircuitBreaker{ratio})
	require.NoError(t, err)
	assert.Equal(t, []stat.BreakerState{stat.BreakerClosed}, states(g))
	require.NoError(t, do(g, clk, "orders", 0, nil))
	changed, err = loadBreakers(g, nil)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Empty(t, g.CircuitBreakerStates())
}

func TestCircuitBreakerHalfOpenAdmitsExactlyNConcurrentEntries(t *testing.T) {
	defer goleak.VerifyNone(t)
	const probes, callers = 3, 100
	g, clk, log := cbEngine(t, []rules.CircuitBreaker{{Resource: "orders", Strategy: rules.ErrorCount, Threshold: 1, MinRequestAmount: 1, RetryTimeout: time.Second, Probes: probes}})
	require.NoError(t, do(g, clk, "orders", 0, errDependency))
	clk.Advance(time.Second)

	var (
		wg     sync.WaitGroup
		start  = make(chan struct{})
		passed = make(chan Pass, callers)
		errs   = make(chan error, callers)
	)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			p, err := g.Entry("orders")
			if err != nil {
				errs <- err
				return
			}
			passed <- p
		}()
	}
	close(start)
	wg.Wait()
	close(passed)
	close(errs)
	require.Len(t, passed, probes)
	require.Len(t, errs, callers-probes)
	for err := range errs {
		var be *core.BlockError
		require.ErrorAs(t, err, &be)
		assert.Equal(t, core.BlockDegrade, be.Type)
	}
	for p := range passed {
		p.Exit()
	}
	assert.Equal(t, []stat.BreakerState{stat.BreakerClosed}, states(g))
	assert.Equal(t, []string{"orders: closed>open", "orders: open>half-open", "orders: half-open>closed"}, log.moves())
}

// refuser is a custom check slot that refuses every entry while on.
type refuser struct{ on bool }

func (r *refuser) Check(*slots.Entry) *core.BlockError {
	if r.on {
		return &core.BlockError{Reason: "refused by a custom slot"}
	}
	return nil
}

func TestCircuitBreakerProbeBlockedLaterGivesSlotBack(t *testing.T) {
	g, clk, log := cbEngine(t, []rules.CircuitBreaker{{Resource: "orders", Strategy: rules.ErrorCount, Threshold: 1, MinRequestAmount: 1, RetryTimeout: time.Second}})
	custom := &refuser{}
	require.NoError(t, g.RegisterSlot(custom, 0))
	require.NoError(t, do(g, clk, "orders", 0, errDependency))
	clk.Advance(time.Second)

	custom.on = true
	var be *core.BlockError
	require.ErrorAs(t, do(g, clk, "orders", 0, nil), &be)
	assert.Equal(t, core.BlockCustom, be.Type, "the breaker admitted the probe; the custom slot refused it")
	require.Equal(t, []stat.BreakerState{stat.BreakerHalfOpen}, states(g))

	custom.on = false
	require.NoError(t, do(g, clk, "orders", 0, nil), "the slot was given back")
	assert.Equal(t, []stat.BreakerState{stat.BreakerClosed}, states(g))
	assert.Equal(t, []string{"orders: closed>open", "orders: open>half-open", "orders: half-open>closed"}, log.moves())
}

func TestCircuitBreakerReentrantListener(t *testing.T) {
	rule := rules.CircuitBreaker{Resource: "orders", Strategy: rules.ErrorCount, Threshold: 1, MinRequestAmount: 1, RetryTimeout: time.Second}
	g, clk, log := cbEngine(t, []rules.CircuitBreaker{rule})
	var inside []string
	g.Subscribe(func(tr stat.Event) {
		if tr.Kind != stat.EventBreaker || tr.To != stat.BreakerOpen.String() || len(inside) > 0 {
			return
		}
		// Call back into the engine from the listener.
		_, err := g.Entry("orders")
		inside = append(inside, "entry: "+err.Error())
		renamed := rule
		renamed.ID = "renamed"
		require.NoError(t, g.UpdateRules(func(s *rules.Set) { s.CircuitBreaker = []rules.CircuitBreaker{renamed} }))
		inside = append(inside, "state: "+g.CircuitBreakerStates()[0].State.String())
		clk.Advance(time.Second)
		require.NoError(t, do(g, clk, "orders", 0, nil)) // a probe: half-open, then closed
	})
	done := make(chan error, 1)
	go func() { done <- do(g, clk, "orders", 0, errDependency) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("a listener calling back into the engine deadlocked")
	}
	assert.Equal(t, []string{
		`entry: sluice: blocked by degrade rule on "orders": observed 1, threshold 1 (circuit breaker open), retry after 1s`,
		"state: open",
	}, inside)
	assert.Equal(t, []string{"orders: closed>open", "orders: open>half-open", "orders: half-open>closed"}, log.moves())
	assert.Equal(t, "renamed", log.ts[2].Rule.(rules.CircuitBreaker).ID, "transitions carry the rule in force")
	assert.Equal(t, []stat.BreakerState{stat.BreakerClosed}, states(g))
}

func TestCircuitBreakerErrorClassifier(t *testing.T) {
	ignoreCanceled := WithErrorClassifier(func(err error) bool { return !errors.Is(err, context.Canceled) })
	g, clk, _ := cbEngine(t, []rules.CircuitBreaker{{Resource: "orders", Strategy: rules.ErrorCount, Threshold: 2, MinRequestAmount: 1, RetryTimeout: time.Second}}, ignoreCanceled)
	for range 10 {
		require.NoError(t, do(g, clk, "orders", 0, context.Canceled))
	}
	assert.Equal(t, []stat.BreakerState{stat.BreakerClosed}, states(g))
	s, _ := g.Snapshot("orders")
	assert.Equal(t, uint64(10), s.TotalError, "resource statistics still count every error")
	require.NoError(t, do(g, clk, "orders", 0, errDependency))
	require.NoError(t, do(g, clk, "orders", 0, context.DeadlineExceeded))
	assert.Equal(t, []stat.BreakerState{stat.BreakerOpen}, states(g))
}

func TestCircuitBreakerEvents(t *testing.T) {
	// The event stream carries what breaker listeners received: resource,
	// rule in force, from, to, the value that caused it and the clock reading.
	rs := []rules.CircuitBreaker{{Resource: "orders", Strategy: rules.ErrorCount, Threshold: 1, MinRequestAmount: 1, RetryTimeout: time.Second}}
	g, clk, log := cbEngine(t, rs)
	require.NoError(t, do(g, clk, "orders", 0, errDependency))
	assert.Equal(t, []BreakerStatus{{Rule: rs[0], State: stat.BreakerOpen, Transitions: [3]uint64{stat.BreakerOpen: 1}}}, g.CircuitBreakerStates())
	_, err := g.Entry("orders")
	require.ErrorIs(t, err, core.ErrBlocked)
	require.Len(t, log.ts, 1)
	assert.Equal(t, stat.Event{Kind: stat.EventBreaker, At: clk.Nanotime(), Resource: "orders", Rule: rs[0],
		From: "closed", To: "open", Value: 1}, log.ts[0])
}

// Benchmarks: Entry+Exit without and with a closed breaker in the same run,
// and Entry on an open breaker. Run with
//
//	go test -run '^$' -bench CircuitBreaker -benchmem -benchtime=200ms -count 3 .
func BenchmarkCircuitBreaker(b *testing.B) {
	closed := []rules.CircuitBreaker{{Resource: "bench", Strategy: rules.ErrorRatio, Threshold: 0.5, RetryTimeout: time.Second}}
	for _, bc := range []struct {
		name  string
		rules []rules.CircuitBreaker
	}{{"pass/none", nil}, {"pass/closed", closed}} {
		g := New()
		_, err := loadBreakers(g, bc.rules)
		require.NoError(b, err)
		b.Run(bc.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p, err := g.Entry("bench")
				if err != nil {
					b.Fatal(err)
				}
				p.Exit()
			}
		})
		b.Run(bc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p, err := g.Entry("bench")
					if err != nil {
						b.Fatal(err)
					}
					p.Exit()
				}
			})
		})
		_ = g.Close()
	}

	g := New()
	defer g.Close()
	_, err := loadBreakers(g, []rules.CircuitBreaker{{Resource: "bench", Strategy: rules.ErrorCount, Threshold: 1, MinRequestAmount: 1, RetryTimeout: 24 * time.Hour}})
	require.NoError(b, err)
	p, err := g.Entry("bench")
	require.NoError(b, err)
	p.SetError(errDependency)
	p.Exit()
	b.Run("open-rejection/serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := g.Entry("bench"); err == nil {
				b.Fatal("passed an open breaker")
			}
		}
	})
	b.Run("open-rejection/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := g.Entry("bench"); err == nil {
					b.Fatal("passed an open breaker")
				}
			}
		})
	})
}
