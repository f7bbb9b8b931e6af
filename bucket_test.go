package sluice

import (
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
	rule := rules.Flow{Resource: "r", Threshold: 10, Strategy: rules.TokenBucket, Burst: 5}
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
	rule.Threshold, rule.Burst = 100, 3
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
		rules.Flow{Resource: "r", Threshold: 10, Strategy: rules.TokenBucket, Burst: 2},
		rules.Flow{Resource: "r", Threshold: 1, StatInterval: time.Minute},
	)
	require.True(t, try(g, "r"))
	for i := 0; i < 5; i++ {
		be := refusal(t, g, "r")
		require.Equal(t, float64(1), be.Threshold, "refused by the per-minute rule, not the bucket")
	}
	// Two tokens had been taken at most at once; the refused entries gave
	// theirs back, so one is still stored.
	mustLoadFlow(t, g, rules.Flow{Resource: "r", Threshold: 10, Strategy: rules.TokenBucket, Burst: 2})
	require.True(t, try(g, "r"))
	require.False(t, try(g, "r"))
}
