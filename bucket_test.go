package sluice

import (
	"context"
	"github.com/sluice-go/sluice/internal/core"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/rules"
)

// A token-bucket rule through the engine, on a manual clock: a full bucket
// at the start, Burst at one instant, one token per Interval/Threshold
// after, an exact RetryAfter, a batch larger than the burst refused for
// good, and a reload that keeps the stored tokens.
func TestFlowTokenBucketThroughEngine(t *testing.T) {
	g, clk := newTestEngine(t, int64(time.Hour))
	rule := rules.Flow{Resource: "r", Threshold: 10, Bucket: &rules.Bucket{Burst: 5}}
	mustLoadFlow(t, g, rule)
	for i := 0; i < 5; i++ {
		require.True(t, try(g, "r"), "request %d of the burst", i)
	}
	be := refusal(t, g, "r")
	assert.Equal(t, 100*time.Millisecond, be.RetryAfter)
	assert.Equal(t, "too few tokens", be.Reason)
	obeyRetryAfter(t, g, clk, "r", 1, be, "one token")
	be = refusal(t, g, "r", WithBatch(3))
	assert.Equal(t, 300*time.Millisecond, be.RetryAfter)
	obeyRetryAfter(t, g, clk, "r", 3, be, "three tokens")

	be = refusal(t, g, "r", WithBatch(6))
	assert.Equal(t, "batch larger than burst", be.Reason)
	assert.Zero(t, be.RetryAfter)

	// A second later: 5 stored (10 refilled, capped at 5). A reload to
	// 100/s with burst 3 keeps 3 of them, then refills one per 10 ms.
	clk.Advance(time.Second)
	rule.Threshold, rule.Bucket = 100, &rules.Bucket{Burst: 3}
	mustLoadFlow(t, g, rule)
	for i := 0; i < 3; i++ {
		require.True(t, try(g, "r"), "request %d after the reload", i)
	}
	be = refusal(t, g, "r")
	assert.Equal(t, 10*time.Millisecond, be.RetryAfter)
}

// A token-bucket rule gives its tokens back when a later rule refuses the
// entry.
func TestFlowTokenBucketGivesBackOnLaterRefusal(t *testing.T) {
	g, _ := newTestEngine(t, int64(time.Hour))
	mustLoadFlow(t, g,
		rules.Flow{Resource: "r", Threshold: 10, Bucket: &rules.Bucket{Burst: 2}},
		rules.Flow{Resource: "r", Threshold: 1, StatInterval: time.Minute},
	)
	require.True(t, try(g, "r"))
	for i := 0; i < 5; i++ {
		be := refusal(t, g, "r")
		require.Equal(t, float64(1), be.Threshold, "refused by the per-minute rule, not the bucket")
	}
	// Two tokens had been taken at most at once; the refused entries gave
	// theirs back, so one is still stored.
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 10, Bucket: &rules.Bucket{Burst: 2}})
	require.True(t, try(g, "r"))
	require.False(t, try(g, "r"))
}

// Reloads with other thresholds while goroutines enter, the clock frozen:
// each instant admits exactly the burst, whichever rule each call found.
func TestFlowTokenBucketReloadUnderConcurrency(t *testing.T) {
	const burst, workers, perWorker = 40, 8, 30
	g, clk := newTestEngine(t, int64(time.Hour))
	load := func(threshold float64) {
		mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: threshold, Bucket: &rules.Bucket{Burst: burst}})
	}
	load(1)
	for round := 0; round < 4; round++ {
		clk.Advance(24 * time.Hour) // full again at any of the thresholds
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < perWorker; i++ {
					if try(g, "r") {
						admitted.Add(1)
					}
				}
			}()
		}
		for i := 0; i < 20; i++ {
			load([]float64{1, 7, 100, 2.5}[i%4])
		}
		wg.Wait()
		require.Equal(t, int64(burst), admitted.Load(), "round %d", round)
	}
}

// A token-bucket throttle rule through the engine: of twelve callers at
// one instant, Burst pass at once, those whose tokens come within
// MaxQueueing wait for them, one per token, and the rest are refused at
// once.
func TestFlowTokenBucketThrottleWaitsForTokens(t *testing.T) {
	g, clk := newTestEngine(t, 0)
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 10, Bucket: &rules.Bucket{Burst: 3}, Throttle: &rules.Throttle{MaxQueueing: 300 * time.Millisecond}})
	type result struct {
		at  int64 // clock when Entry returned
		err error
	}
	results := make(chan result, 12)
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := g.Entry("r")
			results <- result{at: clk.Nanotime(), err: err}
			p.Exit() // the zero Pass when refused: does nothing
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, clk.BlockUntil(ctx, 3))
	passed := 0
	for i := 0; i < 9; i++ {
		r := <-results
		require.Zero(t, r.at)
		if r.err == nil {
			passed++
			continue
		}
		var be *core.BlockError
		require.ErrorAs(t, r.err, &be)
		assert.Equal(t, "wait 400ms exceeds max queueing 300ms", be.Reason)
		assert.Equal(t, 100*time.Millisecond, be.RetryAfter)
	}
	require.Equal(t, 3, passed, "the burst passes at once")
	for k := int64(1); k <= 3; k++ {
		clk.Advance(100 * time.Millisecond)
		r := <-results
		require.NoError(t, r.err)
		require.Equal(t, k*int64(100*time.Millisecond), r.at)
		select {
		case r := <-results:
			t.Fatalf("two callers released at %v: %+v", time.Duration(r.at), r)
		default:
		}
	}
	wg.Wait()
}
