package sluice

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/internal/core"
	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
)

// TestBudgetClusterIsTheLocalView: two instances share a cluster rule of
// 1,000 per second through one store. An instance's budget counts the
// permits it holds: after the other instance has spent the rest of the
// fleet's, it still admits at least the Remaining it reported (its own
// permits; a refill it asked for may add more), then is refused with Remaining 0 and Reset its RetryAfter.
// Limit and Window are the fleet's.
func TestBudgetClusterIsTheLocalView(t *testing.T) {
	clk := sluicetest.NewManualClock(1_000_000_000_000)
	st := newFakeStore(clk)
	a := New(WithClock(clk), WithCluster(st, ClusterConfig{App: "shop", InstanceID: "a"}))
	b := New(WithClock(clk), WithCluster(st, ClusterConfig{App: "shop", InstanceID: "b"}))
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	r := rules.Flow{ID: "fleet", Resource: "api", Threshold: 1000, Cluster: &rules.Cluster{}}
	mustLoadFlow(t, a, r)
	mustLoadFlow(t, b, r)

	var bg core.Budget
	require.NoError(t, a.Do("api", func() error { return nil }, WithBudget(&bg)))
	assert.Equal(t, float64(1000), bg.Limit)
	assert.Equal(t, time.Second, bg.Window)
	assert.Equal(t, time.Second, bg.Reset)
	assert.Equal(t, core.RuleRef{ID: "fleet", Metric: "qps"}, bg.Rule)
	held := bg.Remaining
	t.Logf("a holds %d permits after its first entry", held)
	require.GreaterOrEqual(t, held, int64(0))
	require.LessOrEqual(t, held, int64(999))

	// The other instance takes all the store has left.
	for i := 0; i < 2000; i++ {
		_ = b.Do("api", func() error { return nil })
	}
	// a's own permits still pass (at least those it reported: a lease
	// refill it asked for may bring more), then it is refused.
	var err error
	passed := int64(0)
	for i := 0; i < 2000; i++ {
		if err = a.Do("api", func() error { return nil }, WithBudget(&bg)); err != nil {
			break
		}
		passed++
		assert.LessOrEqual(t, bg.Remaining, int64(1000))
	}
	assert.GreaterOrEqual(t, passed, held)
	var be *core.BlockError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, core.BlockCluster, be.Type)
	assert.Zero(t, bg.Remaining)
	assert.Equal(t, be.RetryAfter, bg.Reset)
	assert.Equal(t, float64(1000), bg.Limit)
}
