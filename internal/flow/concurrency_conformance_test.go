package flow

import (
	"context"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/conformance"
	"github.com/sluice-go/sluice/internal/entry"
	"github.com/sluice-go/sluice/rules"
)

// TestConformanceConcurrencyRuleAgainstModel drives a flow rule of the
// concurrency metric as TestConformanceIsolationAgainstModel drives an
// isolation rule, against the same documented semantics (README "Flow
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
