package sluiceotel_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	sluiceotel "github.com/sluice-go/sluice/adapters/otel"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

// TestClusterMetrics: an engine on a store in memory, a strict cluster rule
// (one store call per entry), then the store down. The Redis store's own
// failures are tested in its module (cluster/redis); here, what the engine
// reports of them is exported.
func TestClusterMetrics(t *testing.T) {
	clk := sluicetest.NewManualClock(int64(time.Hour))
	store, fail := sluicetest.NewStore(clk)
	g, _ := sluicetest.NewEngine(t, sluice.WithClock(clk), sluice.WithCluster(store,
		sluice.ClusterConfig{App: "shop", InstanceID: "a", Timeout: time.Second}))
	err := g.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "pay", Threshold: 3, StatInterval: time.Hour,
		Cluster: &rules.Cluster{Strict: true, Fallback: rules.FallbackBlock}}}})

	require.NoError(t, err)
	r, mp := reader(t)
	reg, err := sluiceotel.Register(g, mp)
	require.NoError(t, err)
	defer reg.Unregister()
	require.Eventually(t, func() bool { s, _ := g.ClusterStatus(); return s.Live == 1 }, 10*time.Second, time.Millisecond)

	for i := 0; i < 5; i++ {
		if p, err := g.Entry("pay"); err == nil {
			p.Exit()
		}
	}
	got, _ := collect(t, r)
	for k, v := range map[string]float64{
		"sluice.passed[resource=pay]":               3,
		"sluice.blocked[resource=pay type=cluster]": 2,
		"sluice.cluster.fallback[]":                 0,
		"sluice.cluster.live_instances[]":           1,
		"sluice.cluster.store.takes[]":              5,
		"sluice.cluster.store.requests[]":           5,
		"sluice.cluster.store.take_errors[]":        0,
		"sluice.cluster.permits.given_back[]":       0,
		"sluice.cluster.permits.dropped[]":          0,
		"sluice.cluster.store.probes[]":             0,
		"sluice.cluster.heartbeat.failures[]":       0,
	} {
		v2, ok := got[k]
		if assert.True(t, ok, "%s missing from %v", k, got) {
			assert.Equal(t, v, v2, k)
		}
	}

	fail(errors.New("store down"))
	_, err = g.Entry("pay")
	require.ErrorIs(t, err, sluice.ErrBlocked, "the fallback blocks")
	got, _ = collect(t, r)
	assert.Equal(t, 1.0, got["sluice.cluster.fallback[]"])
	assert.Equal(t, 6.0, got["sluice.cluster.store.takes[]"])
	assert.Equal(t, 1.0, got["sluice.cluster.store.take_errors[]"])
	assert.Equal(t, 3.0, got["sluice.blocked[resource=pay type=cluster]"])
}
