package flow

import (
	"context"
	"math/rand"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/conformance"
	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/rules"
)

// TestConformanceConcurrencyRuleAgainstModel drives a flow rule of the
// concurrency metric (the one mechanism that caps requests in flight)
// against the documented semantics (README "Flow
// rules", Concurrency): at most Threshold in flight by batch; a batch larger
// than Threshold refused as such, with Observed the batch; any other refusal
// observes the requests in flight, with no RetryAfter; slots come back at
// exit or when a later check refuses the entry; a reload to another
// threshold keeps the requests in flight.
func TestConformanceConcurrencyRuleAgainstModel(t *testing.T) {
	const sequences = 50
	steps := conformance.Steps(1000)
	checks, refused := 0, 0
	for seq := 0; seq < sequences; seq++ {
		seed := int64(seq)*4273 + 9
		rng := rand.New(rand.NewSource(seed))
		r := rules.Flow{Resource: "r", Metric: rules.Concurrency, Threshold: float64(1 + rng.Intn(8))}
		nf := nodes(nil)
		cs, err := Build([]rules.Flow{r}, nil, nf, nil)
		require.NoError(t, err)
		var inflight int64
		var held []*entry.Context
		for step := 0; step < steps; step++ {
			switch k := rng.Intn(100); {
			case k < 3:
				r.Threshold = float64(1 + rng.Intn(8))
				cs, err = Build([]rules.Flow{r}, cs, nf, nil)
				require.NoError(t, err)
			case k < 45 && len(held) > 0:
				i := rng.Intn(len(held))
				ec := held[i]
				held = append(held[:i], held[i+1:]...)
				ec.ReleaseTickets(entry.ExitInfo{Start: ec.Start, End: ec.Start + 1, Batch: ec.Batch})
				inflight -= ec.Batch
			default:
				n := int64(1)
				if rng.Intn(3) == 0 {
					n = 1 + rng.Int63n(int64(r.Threshold)+1)
				}
				ec := &entry.Context{Resource: "r", Batch: n}
				got := decisionOf(cs["r"][0].Check(context.Background(), ec, nil))
				var want windowDecision
				switch {
				case float64(n) > r.Threshold:
					want = windowDecision{observed: float64(n), threshold: r.Threshold, reason: reasonTooLarge}
				case float64(inflight+n) > r.Threshold:
					want = windowDecision{observed: float64(inflight), threshold: r.Threshold}
				default:
					want = windowDecision{pass: true}
					inflight += n
				}
				checks++
				if !want.pass {
					refused++
				}
				if got != want {
					t.Fatalf("seed %d step %d: threshold %v, batch %d, %d in flight: engine %v, model %v",
						seed, step, r.Threshold, n, inflight, got, want)
				}
				if got.pass {
					if rng.Intn(8) == 0 {
						ec.ReleaseRefused()
						inflight -= n
					} else {
						held = append(held, ec)
					}
				}
			}
			require.Equal(t, inflight, cs["r"][0].c.(*concurrency).inflight.Load(), "seed %d step %d", seed, step)
		}
	}
	t.Logf("%d sequences, %d checks (%d refusals), 0 mismatches", sequences, checks, refused)
}

// TestConformanceConcurrencyRuleUnderContention runs goroutines that enter
// and exit with batches of 1 to 3 against one concurrency rule: the
// requests in flight, counted independently between a pass and its exit,
// never exceed the threshold, and every slot comes back (a last entry of
// the whole threshold passes).
func TestConformanceConcurrencyRuleUnderContention(t *testing.T) {
	const threshold, goroutines = 5, 8
	cs, err := Build([]rules.Flow{{Resource: "r", Metric: rules.Concurrency, Threshold: threshold}}, nil, nodes(nil), nil)
	require.NoError(t, err)
	c := cs["r"][0]
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
				if c.Check(context.Background(), ec, nil) != nil {
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
	require.Positive(t, passed.Load())
	require.Nil(t, c.Check(context.Background(), &entry.Context{Resource: "r", Batch: threshold}, nil), "every slot came back")
}

// TestPeersConcurrencyCases replays sentinel-golang's isolation cases
// (core/isolation/slot_test.go) on concurrency flow rules, which are how
// sluice caps requests in flight. Test_Isolation_Pass: with a threshold of
// 10, ten entries in flight pass and the eleventh is refused.
// Test_RegexIsolation_Pass: Sentinel matches resources by a regular
// expression and limits each matched resource on its own; sluice has no
// regex rules, so each resource gets its own rule, and the case checks
// that those limits are independent and that slots freed by exits are
// reused.
func TestPeersConcurrencyCases(t *testing.T) {
	build := func(res ...string) map[string][]*Controller {
		var rs []rules.Flow
		for _, r := range res {
			rs = append(rs, rules.Flow{Resource: r, Metric: rules.Concurrency, Threshold: 10})
		}
		cs, err := Build(rs, nil, nodes(nil), nil)
		require.NoError(t, err)
		return cs
	}
	enter := func(c *Controller, res string) (*entry.Context, *core.BlockError) {
		ec := &entry.Context{Resource: res, Batch: 1}
		return ec, c.Check(context.Background(), ec, nil)
	}
	t.Run("Test_Isolation_Pass", func(t *testing.T) {
		c := build("abc")["abc"][0]
		for i := 0; i < 10; i++ {
			_, be := enter(c, "abc")
			require.Nil(t, be, "entry %d", i)
		}
		_, be := enter(c, "abc")
		require.NotNil(t, be)
		require.Equal(t, core.BlockFlow, be.Type)
		require.True(t, be.Overloaded())
		require.Equal(t, 10.0, be.Observed)
	})
	t.Run("Test_RegexIsolation_Pass", func(t *testing.T) {
		cs := build("abc/123", "abc/456")
		a, b := cs["abc/123"][0], cs["abc/456"][0]
		var held []*entry.Context
		for i := 0; i < 10; i++ {
			ec, be := enter(a, "abc/123")
			require.Nil(t, be)
			held = append(held, ec)
		}
		_, be := enter(a, "abc/123")
		require.NotNil(t, be)
		for _, ec := range held {
			ec.ReleaseTickets(entry.ExitInfo{Batch: 1})
		}
		for i := 0; i < 10; i++ {
			_, be := enter(a, "abc/123")
			require.Nil(t, be, "slots freed by exits are reused")
		}
		for i := 0; i < 10; i++ {
			_, be := enter(b, "abc/456")
			require.Nil(t, be, "the other resource has limits of its own")
		}
		_, be = enter(b, "abc/456")
		require.NotNil(t, be)
	})
}
