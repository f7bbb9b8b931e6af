package sluiceprom_test

import (
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	sluiceprom "github.com/sluice-go/sluice/adapters/prometheus"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

// serve registers a collector of g on a fresh registry served on loopback,
// and returns the URL of its /metrics.
func serve(t *testing.T, g *sluice.Engine) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(sluiceprom.NewCollector(g))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

// TestBreakerTransitionsOverHTTP drives a breaker closed > open >
// half-open > open > half-open > closed on a manual clock and scrapes the
// counts by target state.
func TestBreakerTransitionsOverHTTP(t *testing.T) {
	g, clk := sluicetest.NewEngine(t)
	err := g.UpdateRules(func(s *rules.Set) {
		s.CircuitBreaker = []rules.CircuitBreaker{{Resource: "pay", Strategy: rules.ErrorCount,
			Threshold: 1, MinRequestAmount: 1, RetryTimeout: time.Second}}
	})

	require.NoError(t, err)
	url := serve(t, g)
	call := func(fail bool) error {
		p, err := g.Entry("pay")
		if err != nil {
			return err
		}
		if fail {
			p.SetError(assert.AnError)
		}
		p.Exit()
		return nil
	}
	to := func(fams map[string]*dto.MetricFamily, state string) float64 {
		return value(t, fams, "sluice_breaker_transitions_total", "resource", "pay", "rule", "0", "to", state)
	}
	fams := scrape(t, url)
	for _, s := range []string{"closed", "open", "half-open"} {
		assert.Equal(t, 0.0, to(fams, s), "every target state is exported from zero: %s", s)
	}
	require.NoError(t, call(true)) // closed > open
	require.ErrorIs(t, call(false), sluice.ErrBlocked)
	clk.Advance(time.Second)
	require.NoError(t, call(true)) // open > half-open > open
	clk.Advance(time.Second)
	require.NoError(t, call(false)) // open > half-open > closed

	fams = scrape(t, url)
	assert.Equal(t, 2.0, to(fams, "open"))
	assert.Equal(t, 2.0, to(fams, "half-open"))
	assert.Equal(t, 1.0, to(fams, "closed"))
	assert.Equal(t, 0.0, value(t, fams, "sluice_breaker_state", "resource", "pay", "rule", "0"))
	assert.Nil(t, fams["sluice_cluster_fallback"], "no cluster metrics without a cluster store")
}

// TestClusterMetrics runs an engine on a store in memory: a strict cluster
// rule (one store call per entry) under a known workload, then the store
// down (fallback, a failed heartbeat) and back (a probe, back to remote).
// The Redis store's own failures are tested in its module (cluster/redis);
// here, what the engine reports of them is exported.
func TestClusterMetrics(t *testing.T) {
	clk := sluicetest.NewManualClock(int64(time.Hour))
	store, fail := sluicetest.NewStore(clk)
	g, _ := sluicetest.NewEngine(t, sluice.WithClock(clk), sluice.WithCluster(store,
		sluice.ClusterConfig{App: "shop", InstanceID: "a", Timeout: time.Second, ProbeInterval: time.Second, HeartbeatInterval: time.Second}))
	err := g.UpdateRules(func(s *rules.Set) {
		s.Flow = []rules.Flow{{Resource: "pay", Threshold: 3, StatInterval: time.Hour,
			Cluster: &rules.Cluster{Strict: true, Fallback: rules.FallbackBlock}}}
	})

	require.NoError(t, err)
	url := serve(t, g)
	status := func() sluice.ClusterStatus { s, _ := g.ClusterStatus(); return s }
	// The first heartbeat runs at New, on the engine's goroutine.
	require.Eventually(t, func() bool { return status().Live == 1 }, 10*time.Second, time.Millisecond)

	passed := 0
	for i := 0; i < 5; i++ {
		if p, err := g.Entry("pay"); err == nil {
			passed++
			p.Exit()
		}
	}
	require.Equal(t, 3, passed, "the store's budget")
	fams := scrape(t, url)
	got := func(name string) float64 { return value(t, fams, name) }
	assert.Equal(t, 0.0, got("sluice_cluster_fallback"))
	assert.Equal(t, 1.0, got("sluice_cluster_live_instances"))
	assert.Equal(t, 5.0, got("sluice_cluster_store_takes_total"), "strict: one call per entry")
	assert.Equal(t, 5.0, got("sluice_cluster_store_requests_total"))
	assert.Equal(t, 0.0, got("sluice_cluster_store_take_errors_total"))
	assert.Equal(t, 0.0, got("sluice_cluster_store_probes_total"))
	assert.Equal(t, 0.0, got("sluice_cluster_heartbeat_failures_total"))
	assert.Equal(t, 0.0, got("sluice_cluster_permits_given_back_total"))
	assert.Equal(t, 0.0, got("sluice_cluster_permits_dropped_total"))
	assert.Equal(t, 2.0, value(t, fams, "sluice_blocked_total", "resource", "pay", "type", "cluster"))

	fail(errors.New("store down"))
	_, err = g.Entry("pay")
	require.ErrorIs(t, err, sluice.ErrBlocked, "the fallback blocks")
	require.True(t, status().Fallback)
	clk.Advance(time.Second) // the next heartbeat, which fails
	require.Eventually(t, func() bool { return status().HeartbeatFailures == 1 }, 10*time.Second, time.Millisecond)
	fams = scrape(t, url)
	assert.Equal(t, 1.0, got("sluice_cluster_fallback"))
	assert.Equal(t, 6.0, got("sluice_cluster_store_takes_total"))
	assert.Equal(t, 1.0, got("sluice_cluster_store_take_errors_total"))
	assert.Equal(t, 1.0, got("sluice_cluster_heartbeat_failures_total"))
	assert.Equal(t, 0.0, got("sluice_cluster_store_probes_total"))

	fail(nil)
	_, _ = g.Entry("pay") // a decision a probe interval after the failure queues a probe
	require.Eventually(t, func() bool { return !status().Fallback }, 10*time.Second, time.Millisecond)
	fams = scrape(t, url)
	assert.Equal(t, 0.0, got("sluice_cluster_fallback"))
	assert.Equal(t, 1.0, got("sluice_cluster_store_probes_total"))
	assert.Equal(t, 1.0, got("sluice_cluster_store_take_errors_total"))

	problems, err := testutil.CollectAndLint(sluiceprom.NewCollector(g))
	require.NoError(t, err)
	assert.Empty(t, problems)
}
