package isolation

import (
	"fmt"
	"math/rand"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/internal/conformance"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/rules"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// inflightModel is the documented semantics of an isolation rule (README
// "Isolation rules"): at most Threshold requests, counted by batch, in
// flight at once; a batch larger than Threshold is refused with the reason
// "batch larger than threshold" and Observed the batch, any other refusal
// observes the requests in flight; a reload keeps the requests in flight
// counting against the new threshold.
type inflightModel struct {
	threshold int64
	inflight  int64
}

type decision struct {
	pass            bool
	observed, limit float64
	reason          string
	retry           time.Duration // always 0: waiting cannot be predicted
}

func (d decision) String() string {
	if d.pass {
		return "pass"
	}
	return fmt.Sprintf("refuse(observed %v, threshold %v, %q)", d.observed, d.limit, d.reason)
}

func (m *inflightModel) check(n int64) decision {
	switch {
	case n > m.threshold:
		return decision{observed: float64(n), limit: float64(m.threshold), reason: "batch larger than threshold"}
	case m.inflight+n > m.threshold:
		return decision{observed: float64(m.inflight), limit: float64(m.threshold)}
	}
	m.inflight += n
	return decision{pass: true}
}

func decisionOf(be *core.BlockError) decision {
	if be == nil {
		return decision{pass: true}
	}
	return decision{observed: be.Observed, limit: be.Threshold, reason: be.Reason, retry: be.RetryAfter}
}

// TestConformanceIsolationAgainstModel drives an isolation rule with
// seeded random sequences of entries (batches up to Threshold+1), exits in
// any order, entries refused by a later check, and reloads to other
// thresholds (below and above the requests in flight): every decision and
// refusal must equal inflightModel's, and InFlight its count.
func TestConformanceIsolationAgainstModel(t *testing.T) {
	const sequences = 50
	steps := conformance.Steps(1000)
	checks, refused := 0, 0
	for seq := 0; seq < sequences; seq++ {
		seed := int64(seq)*6151 + 11
		rng := rand.New(rand.NewSource(seed))
		r := rules.Isolation{Resource: "r", Threshold: 1 + rng.Int63n(8)}
		cs := Build([]rules.Isolation{r}, nil)
		m := &inflightModel{threshold: r.Threshold}
		var held []*entry.Context
		for step := 0; step < steps; step++ {
			switch k := rng.Intn(100); {
			case k < 3:
				r.Threshold = 1 + rng.Int63n(8)
				cs = Build([]rules.Isolation{r}, cs)
				m.threshold = r.Threshold
			case k < 45 && len(held) > 0:
				i := rng.Intn(len(held))
				ec := held[i]
				held = append(held[:i], held[i+1:]...)
				ec.ReleaseTickets(entry.ExitInfo{Start: ec.Start, End: ec.Start + 1, Batch: ec.Batch})
				m.inflight -= ec.Batch
			default:
				n := int64(1)
				if rng.Intn(3) == 0 {
					n = 1 + rng.Int63n(r.Threshold+1)
				}
				ec := &entry.Context{Resource: "r", Batch: n}
				got := decisionOf(cs["r"][0].Check(ec))
				want := m.check(n)
				checks++
				if !want.pass {
					refused++
				}
				if got != want {
					t.Fatalf("seed %d step %d: threshold %d, batch %d, %d in flight: engine %v, model %v",
						seed, step, r.Threshold, n, m.inflight, got, want)
				}
				if got.pass {
					if rng.Intn(8) == 0 {
						ec.ReleaseRefused()
						m.inflight -= n
					} else {
						held = append(held, ec)
					}
				}
			}
			require.Equal(t, m.inflight, cs["r"][0].InFlight(), "seed %d step %d", seed, step)
		}
	}
	t.Logf("%d sequences, %d checks (%d refusals), 0 mismatches", sequences, checks, refused)
}

// TestConformanceIsolationUnderContention runs goroutines that enter and
// exit with batches of 1 to 3 against one rule: the requests in flight,
// counted independently between a pass and its exit, never exceed the
// threshold, and every slot comes back.
func TestConformanceIsolationUnderContention(t *testing.T) {
	const threshold, goroutines = 5, 8
	c, err := NewController(rules.Isolation{Resource: "r", Threshold: threshold})
	require.NoError(t, err)
	iterations := conformance.Steps(2000)
	var inUse, worst, passed atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(g)))
			for i := 0; i < iterations; i++ {
				ec := &entry.Context{Resource: "r", Batch: 1 + rng.Int63n(3)}
				if c.Check(ec) != nil {
					continue
				}
				passed.Add(1)
				cur := inUse.Add(ec.Batch)
				for w := worst.Load(); cur > w && !worst.CompareAndSwap(w, cur); w = worst.Load() {
				}
				runtime.Gosched() // let others in while this one holds its slots
				inUse.Add(-ec.Batch)
				ec.ReleaseTickets(entry.ExitInfo{Batch: ec.Batch})
			}
		}(g)
	}
	wg.Wait()
	require.LessOrEqual(t, worst.Load(), int64(threshold))
	require.Zero(t, c.InFlight())
	require.Positive(t, passed.Load())
	t.Logf("%d goroutines × %d entries: %d passed, at most %d in flight", goroutines, iterations, passed.Load(), worst.Load())
}

// TestPeersIsolationCases replays sentinel-golang's isolation cases
// (core/isolation/slot_test.go). Test_Isolation_Pass: with a threshold of
// 10, ten entries in flight pass and the eleventh is refused.
// Test_RegexIsolation_Pass: Sentinel matches resources by a regular
// expression and limits each matched resource on its own; sluice has no
// regex rules, so each resource gets its own rule, and the case checks
// that those limits are independent and that slots freed by exits are
// reused.
func TestPeersIsolationCases(t *testing.T) {
	enter := func(c *Controller) *core.BlockError {
		return c.Check(&entry.Context{Resource: c.rule.Resource, Batch: 1})
	}
	t.Run("Test_Isolation_Pass", func(t *testing.T) {
		c, err := NewController(rules.Isolation{Resource: "abc", Threshold: 10})
		require.NoError(t, err)
		for i := 0; i < 10; i++ {
			require.Nil(t, enter(c), "entry %d", i)
		}
		be := enter(c)
		require.NotNil(t, be)
		require.Equal(t, core.BlockIsolation, be.Type)
		require.Equal(t, 10.0, be.Observed)
	})
	t.Run("Test_RegexIsolation_Pass", func(t *testing.T) {
		cs := Build([]rules.Isolation{{Resource: "abc/123", Threshold: 10}, {Resource: "abc/456", Threshold: 10}}, nil)
		a, b := cs["abc/123"][0], cs["abc/456"][0]
		var held []*entry.Context
		for i := 0; i < 10; i++ {
			ec := &entry.Context{Resource: "abc/123", Batch: 1}
			require.Nil(t, a.Check(ec))
			held = append(held, ec)
		}
		require.NotNil(t, enter(a))
		for _, ec := range held {
			ec.ReleaseTickets(entry.ExitInfo{Batch: 1})
		}
		for i := 0; i < 10; i++ {
			require.Nil(t, enter(a), "slots freed by exits are reused")
		}
		for i := 0; i < 10; i++ {
			require.Nil(t, enter(b), "the other resource has limits of its own")
		}
		require.NotNil(t, enter(b))
	})
}

// TestReloadKeepsInFlightNewRuleStartsEmpty pins the reload rule the README
// states: a rule that takes over one on the same resource (by position)
// keeps counting the requests in flight, whatever its threshold, and their
// exits free its slots; a rule added beside it counts only the requests it
// admits (a request that passed before the rule existed holds no slot of
// it, so nothing would ever give such a slot back). Sentinel, which reads
// the resource's concurrency instead, would count them.
func TestReloadKeepsInFlightNewRuleStartsEmpty(t *testing.T) {
	cs := Build([]rules.Isolation{{Resource: "r", Threshold: 3}}, nil)
	var held []*entry.Context
	for i := 0; i < 3; i++ {
		ec := &entry.Context{Resource: "r", Batch: 1}
		require.Nil(t, cs["r"][0].Check(ec))
		held = append(held, ec)
	}
	cs = Build([]rules.Isolation{{Resource: "r", Threshold: 4}, {Resource: "r", Threshold: 2}}, cs)
	require.Equal(t, int64(3), cs["r"][0].InFlight(), "taken over")
	require.Equal(t, int64(0), cs["r"][1].InFlight(), "added: empty")
	require.Nil(t, cs["r"][0].Check(&entry.Context{Resource: "r", Batch: 1}), "3 of 4")
	require.NotNil(t, cs["r"][0].Check(&entry.Context{Resource: "r", Batch: 1}), "4 of 4")
	for _, ec := range held {
		ec.ReleaseTickets(entry.ExitInfo{Batch: 1})
	}
	require.Equal(t, int64(1), cs["r"][0].InFlight(), "the old requests' exits free the rule that took over")
}
