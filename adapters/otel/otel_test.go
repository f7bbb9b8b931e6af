package sluiceotel_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice"
	sluiceotel "github.com/sluice-go/sluice/adapters/otel"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// reader returns a manual reader on a provider, shut down by the test's
// cleanup.
func reader(t *testing.T) (*sdkmetric.ManualReader, *sdkmetric.MeterProvider) {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { require.NoError(t, mp.Shutdown(context.Background())) })
	return r, mp
}

// collect reads every data point, keyed by metric name and its attributes
// in order ("sluice.passed{resource=GET /orders}").
func collect(t *testing.T, r *sdkmetric.ManualReader) (map[string]float64, map[string]metricdata.Metrics) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	points := map[string]float64{}
	metrics := map[string]metricdata.Metrics{}
	key := func(name string, set attribute.Set) string {
		var kv []string
		for _, a := range set.ToSlice() {
			kv = append(kv, string(a.Key)+"="+a.Value.Emit())
		}
		sort.Strings(kv)
		return fmt.Sprintf("%s%v", name, kv)
	}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, sluiceotel.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			metrics[m.Name] = m
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					points[key(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					points[key(m.Name, p.Attributes)] = p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					points[key(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					points[key(m.Name, p.Attributes)] = p.Value
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return points, metrics
}

// TestCollectAfterWorkload: a known workload on a manual clock, read by a
// manual reader, exact.
func TestCollectAfterWorkload(t *testing.T) {
	g, clk := sluicetest.NewEngine(t)
	r, mp := reader(t)
	reg, err := sluiceotel.Register(g, mp)
	require.NoError(t, err)
	defer func() { require.NoError(t, reg.Unregister()) }()

	err = g.UpdateRules(func(s *rules.Set) {
		s.Flow = []rules.Flow{{Resource: "GET /orders", Threshold: 3}, {Metric: rules.Concurrency, Resource: "GET /items", Threshold: 1}}
	})
	require.NoError(t, err)
	err = g.UpdateRules(func(s *rules.Set) {
		s.CircuitBreaker = []rules.CircuitBreaker{{ID: "pay-errors", Resource: "pay", Strategy: rules.ErrorCount,
			Threshold: 1, MinRequestAmount: 1, RetryTimeout: time.Second}}
	})

	require.NoError(t, err)
	for i, rt := range []time.Duration{10, 20, 30} {
		p, err := g.Entry("GET /orders")
		require.NoError(t, err)
		clk.Advance(rt * time.Millisecond)
		if i == 2 {
			p.SetError(errors.New("boom"))
		}
		p.Exit()
	}
	for i := 0; i < 2; i++ {
		_, err := g.Entry("GET /orders")
		require.ErrorIs(t, err, sluice.ErrBlocked)
	}
	_, err = g.Entry("GET /items")
	require.NoError(t, err) // kept in flight
	_, err = g.Entry("GET /items", sluice.WithBatch(4))
	require.ErrorIs(t, err, sluice.ErrBlocked)
	pay := func(fail bool) {
		p, err := g.Entry("pay")
		require.NoError(t, err)
		if fail {
			p.SetError(errors.New("boom"))
		}
		p.Exit()
	}
	pay(true) // closed > open
	clk.Advance(time.Second)
	pay(false)                   // open > half-open > closed
	clk.Advance(5 * time.Minute) // totals, not windows

	got, metrics := collect(t, r)
	want := map[string]float64{
		"sluice.passed[resource=GET /orders]":                                   3,
		"sluice.blocked[resource=GET /orders type=flow]":                        2,
		"sluice.completed[resource=GET /orders]":                                3,
		"sluice.errors[resource=GET /orders]":                                   1,
		"sluice.rt[resource=GET /orders]":                                       0.060,
		"sluice.in_flight[resource=GET /orders]":                                0,
		"sluice.passed[resource=GET /items]":                                    1,
		"sluice.blocked[resource=GET /items type=flow]":                         4,
		"sluice.completed[resource=GET /items]":                                 0,
		"sluice.errors[resource=GET /items]":                                    0,
		"sluice.rt[resource=GET /items]":                                        0,
		"sluice.in_flight[resource=GET /items]":                                 1,
		"sluice.passed[resource=pay]":                                           2,
		"sluice.completed[resource=pay]":                                        2,
		"sluice.errors[resource=pay]":                                           1,
		"sluice.rt[resource=pay]":                                               0,
		"sluice.in_flight[resource=pay]":                                        0,
		"sluice.breaker.state[resource=pay rule=pay-errors]":                    0,
		"sluice.breaker.transitions[resource=pay rule=pay-errors to=closed]":    1,
		"sluice.breaker.transitions[resource=pay rule=pay-errors to=open]":      1,
		"sluice.breaker.transitions[resource=pay rule=pay-errors to=half-open]": 1,
	}
	require.Len(t, got, len(want), "%v", got)
	for k, v := range want {
		assert.InDelta(t, v, got[k], 1e-9, k)
	}
	// Counters are monotonic and cumulative; in flight may go down.
	for _, name := range []string{"sluice.passed", "sluice.blocked", "sluice.rt", "sluice.breaker.transitions"} {
		switch d := metrics[name].Data.(type) {
		case metricdata.Sum[int64]:
			assert.True(t, d.IsMonotonic, name)
			assert.Equal(t, metricdata.CumulativeTemporality, d.Temporality, name)
		case metricdata.Sum[float64]:
			assert.True(t, d.IsMonotonic, name)
		}
	}
	assert.False(t, metrics["sluice.in_flight"].Data.(metricdata.Sum[int64]).IsMonotonic)
	assert.Equal(t, "s", metrics["sluice.rt"].Unit)
	assert.Equal(t, "{request}", metrics["sluice.passed"].Unit)

	// Unregistered: the next collection reads nothing from the engine.
	require.NoError(t, reg.Unregister())
	got, _ = collect(t, r)
	assert.Empty(t, got)
}

// TestCollectionsReadTheEngineThen: entries between collections are counted by
// the engine only; a collection reads the totals at that time.
func TestCollectionsReadTheEngineThen(t *testing.T) {
	g, _ := sluicetest.NewEngine(t)
	r, mp := reader(t)
	reg, err := sluiceotel.Register(g, mp)
	require.NoError(t, err)
	defer reg.Unregister()
	for round := 1; round <= 3; round++ {
		for i := 0; i < 1000; i++ {
			p, err := g.Entry("r")
			require.NoError(t, err)
			p.Exit()
		}
		got, _ := collect(t, r)
		assert.Equal(t, float64(1000*round), got["sluice.passed[resource=r]"], "round %d", round)
	}
}

// TestHostileNames: invalid UTF-8 in resource names and rule IDs becomes
// U+FFFD, and names equal once replaced are observed once.
func TestHostileNames(t *testing.T) {
	g, _ := sluicetest.NewEngine(t)
	r, mp := reader(t)
	reg, err := sluiceotel.Register(g, mp)
	require.NoError(t, err)
	defer reg.Unregister()
	for _, n := range []string{"a\xff", "a\xfe", "a\uFFFD", "quote\"\n"} {
		p, err := g.Entry(n)
		require.NoError(t, err)
		p.Exit()
	}
	// Rules cannot hold invalid UTF-8 (no rule document can); a breaker
	// on the replaced name shares the resource of the repaired entries.
	cb := rules.CircuitBreaker{ID: "same", Resource: "pay\uFFFD", Strategy: rules.ErrorCount, Threshold: 1, RetryTimeout: time.Second}
	cb2 := cb
	cb2.Strategy, cb2.Threshold = rules.ErrorRatio, 0.5
	err = g.UpdateRules(func(s *rules.Set) { s.CircuitBreaker = []rules.CircuitBreaker{cb, cb2} })
	require.NoError(t, err)
	got, _ := collect(t, r)
	passed := map[string]float64{}
	for k, v := range got {
		if name, ok := strings.CutPrefix(k, "sluice.passed[resource="); ok {
			passed[strings.TrimSuffix(name, "]")] = v
		}
	}
	assert.Equal(t, map[string]float64{"a\uFFFD": 1, "quote\"\n": 1, "pay\uFFFD": 0}, passed)
	assert.Equal(t, 0.0, got["sluice.breaker.state[resource=pay\uFFFD rule=same]"])
	n := 0
	for k := range got {
		if strings.HasPrefix(k, "sluice.breaker.state") {
			n++
		}
	}
	assert.Equal(t, 1, n)
}

// TestCollectionsLeaveInboundUncounted: a collection reads load1 and CPU
// usage through SystemMetrics, which without a system rule makes no entry
// count on the engine-wide inbound node (it used to, for a minute after
// each call): what the exporter reads costs the request path nothing.
func TestCollectionsLeaveInboundUncounted(t *testing.T) {
	g, clk := sluicetest.NewEngine(t)
	r, mp := reader(t)
	reg, err := sluiceotel.Register(g, mp)
	require.NoError(t, err)
	defer reg.Unregister()
	for round := 1; round <= 3; round++ {
		collect(t, r)
		for i := 0; i < 100; i++ {
			p, err := g.Entry("r")
			require.NoError(t, err)
			p.Exit()
		}
		clk.Advance(time.Second)
		assert.Zero(t, g.SystemMetrics().Inbound.TotalPass, "round %d", round)
	}
	got, _ := collect(t, r)
	assert.Equal(t, float64(300), got["sluice.passed[resource=r]"])
}
