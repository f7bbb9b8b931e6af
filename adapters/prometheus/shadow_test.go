package sluiceprom_test

import (
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	sluiceprom "github.com/sluice-go/sluice/adapters/prometheus"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

// TestShadowBlockedSeries: what a rule in shadow mode would have refused
// is exported as sluice_shadow_blocked_total by block type, apart from
// sluice_blocked_total, which counts only real refusals.
func TestShadowBlockedSeries(t *testing.T) {
	g, _ := sluicetest.NewEngine(t)
	require.NoError(t, g.LoadRules(rules.Set{
		Flow:  []rules.Flow{{Resource: "GET /orders", Threshold: 2, Shadow: true}},
		Param: []rules.Param{{Resource: "GET /orders", Threshold: 1, Shadow: true}},
	}))
	for i := 0; i < 5; i++ {
		p, err := g.Entry("GET /orders", sluice.WithStringArg(0, "u"))
		require.NoError(t, err)
		p.Exit()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(sluiceprom.NewCollector(g))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	fams := scrape(t, srv.URL)
	assert.Equal(t, 3.0, value(t, fams, "sluice_shadow_blocked_total", "resource", "GET /orders", "type", "flow"))
	assert.Equal(t, 4.0, value(t, fams, "sluice_shadow_blocked_total", "resource", "GET /orders", "type", "param"))
	assert.Equal(t, 5.0, value(t, fams, "sluice_passed_total", "resource", "GET /orders"))
	assert.Nil(t, fams["sluice_blocked_total"], "nothing was refused")
}
