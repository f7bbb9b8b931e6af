package sluiceprom_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice"
	sluiceprom "github.com/sluice-go/sluice/adapters/prometheus"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// workload runs a known workload: on "GET /orders", 3 passed (one failed,
// RTs 10, 20 and 30 ms) and 2 refused by the flow rule; on "GET /items",
// one in flight and a batch of 4 refused by the isolation rule; a breaker
// on "pay" opened by two errors.
func workload(t *testing.T, g *sluice.Engine, clk *sluicetest.ManualClock) {
	t.Helper()
	err := g.UpdateRules(func(s *rules.Set) {
		s.Flow = []rules.Flow{{Resource: "GET /orders", Threshold: 3}, {Metric: rules.Concurrency, Resource: "GET /items", Threshold: 1}}
	})
	require.NoError(t, err)
	err = g.UpdateRules(func(s *rules.Set) {
		s.CircuitBreaker = []rules.CircuitBreaker{{ID: "pay-errors", Resource: "pay", Strategy: rules.ErrorCount, Threshold: 2, MinRequestAmount: 1, StatInterval: time.Second, RetryTimeout: time.Minute}}
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
	for i := 0; i < 2; i++ {
		p, err := g.Entry("pay")
		require.NoError(t, err)
		p.SetError(errors.New("boom"))
		p.Exit()
	}
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	require.NoError(t, err)
	return fams
}

// value returns the value of the series of family name whose labels are
// exactly labels (name=value pairs).
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	f := fams[name]
	require.NotNil(t, f, name)
	want := map[string]string{}
	for i := 0; i < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		}
		t.Fatalf("%s%v: not a counter or gauge", name, labels)
	}
	t.Fatalf("%s%v: no such series", name, labels)
	return 0
}

func TestScrapeOverHTTP(t *testing.T) {
	g, clk := sluicetest.NewEngine(t)
	workload(t, g, clk)
	reg := prometheus.NewRegistry()
	reg.MustRegister(sluiceprom.NewCollector(g))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	clk.Advance(5 * time.Minute) // totals, not windows

	fams := scrape(t, srv.URL+"/metrics")
	const o = "GET /orders"
	assert.Equal(t, 3.0, value(t, fams, "sluice_passed_total", "resource", o))
	assert.Equal(t, 2.0, value(t, fams, "sluice_blocked_total", "resource", o, "type", "flow"))
	assert.Equal(t, 3.0, value(t, fams, "sluice_completed_total", "resource", o))
	assert.Equal(t, 1.0, value(t, fams, "sluice_errors_total", "resource", o))
	assert.Equal(t, 0.0, value(t, fams, "sluice_in_flight", "resource", o))
	var sum float64
	var count uint64
	for _, m := range fams["sluice_rt_seconds"].GetMetric() {
		if m.GetLabel()[0].GetValue() == o {
			sum, count = m.GetSummary().GetSampleSum(), m.GetSummary().GetSampleCount()
		}
	}
	assert.InDelta(t, 0.060, sum, 1e-9)
	assert.Equal(t, uint64(3), count)

	const i = "GET /items"
	assert.Equal(t, 1.0, value(t, fams, "sluice_passed_total", "resource", i))
	assert.Equal(t, 4.0, value(t, fams, "sluice_blocked_total", "resource", i, "type", "flow"))
	assert.Equal(t, 1.0, value(t, fams, "sluice_in_flight", "resource", i))
	assert.Len(t, fams["sluice_blocked_total"].GetMetric(), 2, "only types that refused something")

	assert.Equal(t, 1.0, value(t, fams, "sluice_breaker_state", "resource", "pay", "rule", "pay-errors"))
	assert.Nil(t, fams["sluice_system_load1"], "no reading before the sampler runs")

	problems, err := testutil.CollectAndLint(sluiceprom.NewCollector(g))
	require.NoError(t, err)
	assert.Empty(t, problems)
}

// TestParamValuesMakeNoSeries: a million distinct values of a param rule's
// argument add no series; series are per resource.
func TestParamValuesMakeNoSeries(t *testing.T) {
	g, _ := sluicetest.NewEngine(t)
	err := g.UpdateRules(func(s *rules.Set) { s.Param = []rules.Param{{Resource: "GET /user", Index: 0, Threshold: 1000}} })
	require.NoError(t, err)
	c := sluiceprom.NewCollector(g)
	p, err := g.Entry("GET /user", sluice.WithArgs("first"))
	require.NoError(t, err)
	p.Exit()
	before := testutil.CollectAndCount(c)
	n := 1_000_000
	if testing.Short() {
		n = 10_000
	}
	for k := 0; k < n; k++ {
		p, err := g.Entry("GET /user", sluice.WithArgs(k))
		if err == nil {
			p.Exit()
		}
	}
	assert.Equal(t, before, testutil.CollectAndCount(c))
	s, _ := g.Snapshot("GET /user")
	assert.Equal(t, uint64(n+1), s.TotalPass+s.TotalBlock)
}

// TestScrapesLeaveInboundUncounted: a scrape reads load1 and CPU usage
// through SystemMetrics, which without a system rule makes no entry count
// on the engine-wide inbound node (it used to, for a minute after each
// call): what the exporter reads costs the request path nothing.
func TestScrapesLeaveInboundUncounted(t *testing.T) {
	g, clk := sluicetest.NewEngine(t)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(sluiceprom.NewCollector(g))
	gather := func() map[string]*dto.MetricFamily {
		fams, err := reg.Gather()
		require.NoError(t, err)
		m := map[string]*dto.MetricFamily{}
		for _, f := range fams {
			m[f.GetName()] = f
		}
		return m
	}
	for round := 1; round <= 3; round++ {
		gather()
		for i := 0; i < 100; i++ {
			p, err := g.Entry("r")
			require.NoError(t, err)
			p.Exit()
		}
		clk.Advance(time.Second)
		assert.Zero(t, g.SystemMetrics().Inbound.TotalPass, "round %d", round)
	}
	assert.Equal(t, 300.0, value(t, gather(), "sluice_passed_total", "resource", "r"))
}
