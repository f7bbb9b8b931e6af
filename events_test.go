package sluice

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/stat"
)

// recorder collects events as "kind detail" strings.
type recorder struct {
	mu  sync.Mutex
	got []string
	evs []stat.Event
}

func (r *recorder) on(ev stat.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := string(ev.Kind)
	switch ev.Kind {
	case stat.EventRulesLoaded, stat.EventRulesRefused:
		s += " " + ev.RuleKind
	case stat.EventBreaker:
		s += " " + ev.Resource + " " + ev.From + ">" + ev.To
	case stat.EventClusterFallback, stat.EventClusterRecovered:
		s += " " + ev.Resource
	}
	r.got = append(r.got, s)
	r.evs = append(r.evs, ev)
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.got
	r.got = nil
	return g
}

func TestEventsInOrder(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	var rec recorder
	cancel := g.Subscribe(rec.on)

	mustLoadFlow(t, g, rules.Flow{Resource: "f", Threshold: 1})
	mustLoadFlow(t, g, rules.Flow{Resource: "f", Threshold: 1}) // no change, no event
	_, err := loadFlow(g, []rules.Flow{{Resource: "f", Threshold: -1}})
	require.Error(t, err)
	cb := rules.CircuitBreaker{Resource: "b", Strategy: rules.ErrorCount, Threshold: 2, MinRequestAmount: 1, StatInterval: time.Second, RetryTimeout: time.Second}
	require.NoError(t, g.LoadRules(rules.Set{
		Flow:           []rules.Flow{{Resource: "f", Threshold: 1}, {Metric: rules.Concurrency, Resource: "i", Threshold: 1}},
		CircuitBreaker: []rules.CircuitBreaker{cb},
	}))
	require.Error(t, g.LoadRules(rules.Set{Flow: []rules.Flow{{Metric: rules.Concurrency, Resource: "i"}}}))
	assert.Equal(t, []string{
		"rules-loaded flow", "rules-refused set",
		"rules-loaded flow", "rules-loaded circuit breaker",
		"rules-refused set",
	}, rec.take())
	rec.mu.Lock()
	var re *rules.Error
	assert.ErrorAs(t, rec.evs[1].Err, &re)
	assert.ErrorAs(t, rec.evs[4].Err, &re)
	rec.mu.Unlock()

	// Breaker: two errors open it, the retry timeout half-opens it, a good
	// probe closes it.
	boom := errors.New("boom")
	require.True(t, exitAfter(g, clk, "b", time.Millisecond, boom))
	require.True(t, exitAfter(g, clk, "b", time.Millisecond, boom))
	require.False(t, try(g, "b"))
	clk.Advance(time.Second)
	require.True(t, exitAfter(g, clk, "b", time.Millisecond, nil))
	assert.Equal(t, []string{"breaker b closed>open", "breaker b open>half-open", "breaker b half-open>closed"}, rec.take())
	rec.mu.Lock()
	assert.Equal(t, cb, rec.evs[5].Rule)
	assert.Equal(t, float64(2), rec.evs[5].Value)
	rec.mu.Unlock()

	// System protection: refusals start shedding once; a quiet second,
	// noticed by a Snapshot, stops it.
	_, err = loadSystem(g, []rules.System{{Metric: rules.InboundQPS, Threshold: 2}})
	require.NoError(t, err)
	clk.Advance(2 * time.Second)
	require.True(t, try(g, "s"))
	require.True(t, try(g, "s"))
	start := clk.Nanotime()
	for i := 0; i < 5; i++ {
		require.False(t, try(g, "s"))
	}
	clk.Advance(500 * time.Millisecond)
	_ = g.SystemMetrics().Inbound
	require.False(t, try(g, "s")) // still within the second of the last refusal
	assert.Equal(t, []string{"rules-loaded system", "shedding-started"}, rec.take())
	clk.Advance(time.Second)
	_, _ = g.Snapshot("s")
	stop := clk.Nanotime()
	// A refusal after an unnoticed quiet second reports the stop first.
	clk.Advance(3 * time.Second)
	for i := 0; i < 3; i++ {
		try(g, "s")
	}
	clk.Advance(2 * time.Second)
	for i := 0; i < 3; i++ {
		try(g, "s")
	}
	assert.Equal(t, []string{"shedding-stopped", "shedding-started", "shedding-stopped", "shedding-started"}, rec.take())
	rec.mu.Lock()
	n := len(rec.evs)
	assert.Equal(t, start, rec.evs[n-5].At)
	assert.Equal(t, stop, rec.evs[n-4].At)
	rec.mu.Unlock()

	g.clusterEvent("c", true, boom)
	g.clusterEvent("c", false, nil)
	assert.Equal(t, []string{"cluster-fallback c", "cluster-recovered c"}, rec.take())
	rec.mu.Lock()
	assert.Equal(t, boom, rec.evs[len(rec.evs)-2].Err)
	rec.mu.Unlock()

	cancel()
	cancel()
	mustLoadFlow(t, g)
	assert.Empty(t, rec.take())
}

// TestEventsReentrant: a subscriber that loads rules and makes entries
// (taking the engine's locks) gets the events it causes after it returns,
// in order, and is never called inside itself.
func TestEventsReentrant(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	var rec recorder
	depth := 0
	g.Subscribe(func(ev stat.Event) {
		depth++
		defer func() { depth-- }()
		require.Equal(t, 1, depth, "delivered inside a subscriber")
		rec.on(ev)
		switch {
		case ev.Kind == stat.EventRulesLoaded && ev.RuleKind == "flow":
			_, err := loadBreakers(g, []rules.CircuitBreaker{{Resource: "b", Strategy: rules.ErrorCount, Threshold: 1, MinRequestAmount: 1, StatInterval: time.Second, RetryTimeout: time.Minute}})
			require.NoError(t, err)
			assert.Len(t, g.Rules().CircuitBreaker, 1, "loaded before its event")
		case ev.Kind == stat.EventRulesLoaded:
			p, err := g.Entry("b")
			require.NoError(t, err)
			p.SetError(errors.New("boom"))
			p.Exit() // opens the breaker: delivered after this subscriber
			_, err = loadFlow(g, []rules.Flow{{Resource: "b", Threshold: -1}})
			require.Error(t, err)
		}
	})
	mustLoadFlow(t, g, rules.Flow{Resource: "f", Threshold: 1})
	assert.Equal(t, []string{"rules-loaded flow", "rules-loaded circuit breaker", "breaker b closed>open", "rules-refused set"}, rec.take())
}

// TestEventsConcurrentLoads: loads from several goroutines each report
// once, and a subscriber sees them one at a time.
func TestEventsConcurrentLoads(t *testing.T) {
	g, _ := newTestEngine(t, 0)
	var mu sync.Mutex
	busy, loaded := false, 0
	g.Subscribe(func(ev stat.Event) {
		mu.Lock()
		require.False(t, busy)
		busy = true
		mu.Unlock()
		mu.Lock()
		busy = false
		if ev.Kind == stat.EventRulesLoaded {
			loaded++
		}
		mu.Unlock()
	})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				_, _ = loadFlow(g, []rules.Flow{{Resource: "f", Threshold: float64(w*100 + i + 1)}})
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 200, loaded, "every load changed the rules")
}

// TestSheddingStopNoticedBySampler: with a rule on CPU usage, the
// sampler's next sample notices a quiet second without any call.
func TestSheddingStopNoticedBySampler(t *testing.T) {
	g, clk, src := sysEngine(t)
	var rec recorder
	g.Subscribe(rec.on)
	loadSystemSampled(t, g, clk, rules.System{Metric: rules.CPUUsage, Threshold: 0.7})
	resample(t, clk, src, 0, 0.75)
	require.False(t, try(g, "GET /a"))
	require.False(t, try(g, "GET /a"))
	assert.Equal(t, []string{"rules-loaded system", "shedding-started"}, rec.take())
	resample(t, clk, src, 0, 0.65) // a second later: the sample notices
	assert.Equal(t, []string{"shedding-stopped"}, rec.take())
	require.True(t, try(g, "GET /a"))
	assert.Empty(t, rec.take())
}
