package sluiceprom_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluiceprom "github.com/sluice-go/sluice/adapters/prometheus"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

// TestHostileNames: resource names and rule IDs that may come from traffic
// are escaped in the exposition (a name cannot forge a series), invalid
// UTF-8 is replaced rather than failing the scrape, and names that become
// equal once replaced are sent once. (Rules cannot hold invalid UTF-8: the
// rule validators refuse it, since no rule document can hold it; names
// from traffic can.)
func TestHostileNames(t *testing.T) {
	g, _ := sluicetest.NewEngine(t)
	const forge = "evil\"} 1\nsluice_passed_total{resource=\"forged\"} 99\n#"
	names := []string{forge, "back\\slash", "a\xff", "a\xfe", "a\uFFFD", "b\xff"}
	for _, n := range names {
		p, err := g.Entry(n)
		require.NoError(t, err)
		p.Exit()
	}
	// Two breakers on one resource with one ID: one series.
	cb := rules.CircuitBreaker{ID: "same\uFFFD", Resource: "pay\uFFFD", Strategy: rules.ErrorCount, Threshold: 1, RetryTimeout: time.Second}
	cb2 := cb
	cb2.Strategy, cb2.Threshold = rules.ErrorRatio, 0.5
	err := g.LoadRules(rules.Set{CircuitBreaker: []rules.CircuitBreaker{cb, cb2}})
	require.NoError(t, err)
	bad := cb
	bad.Resource = "pay\xff"
	err = g.LoadRules(rules.Set{CircuitBreaker: []rules.CircuitBreaker{bad}})
	require.ErrorContains(t, err, "not valid UTF-8")
	reg := prometheus.NewRegistry()
	reg.MustRegister(sluiceprom.NewCollector(g))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	fams := scrape(t, srv.URL)
	got := map[string]float64{}
	for _, m := range fams["sluice_passed_total"].GetMetric() {
		got[m.GetLabel()[0].GetValue()] += m.GetCounter().GetValue()
	}
	assert.Equal(t, map[string]float64{
		forge:         1,
		"back\\slash": 1,
		"a\uFFFD":     1, // one of a\xff, a\xfe and a\uFFFD
		"b\uFFFD":     1,
		"pay\uFFFD":   0, // made by its breaker rules
	}, got)
	assert.Len(t, fams["sluice_breaker_state"].GetMetric(), 1)
	assert.Equal(t, 0.0, value(t, fams, "sluice_breaker_state", "resource", "pay\uFFFD", "rule", "same\uFFFD"))
}
