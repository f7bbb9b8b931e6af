package sluiceprom_test

import (
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice"
	sluiceprom "github.com/sluice-go/sluice/adapters/prometheus"
)

// described returns the names of the metrics the collector describes, with
// their help strings.
func described(t *testing.T) map[string]bool {
	t.Helper()
	g := sluice.New()
	defer g.Close()
	ch := make(chan *prometheus.Desc, 64)
	sluiceprom.NewCollector(g).Describe(ch)
	close(ch)
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for d := range ch {
		m := fq.FindStringSubmatch(d.String())
		require.NotNil(t, m, d.String())
		names[m[1]] = true
	}
	return names
}

// TestGrafanaDashboardUsesExportedMetrics parses docs/grafana-sluice.json:
// every metric name its queries use is one the collector exports (a
// summary's _sum and _count series count as the summary), and every
// exported metric has a panel.
func TestGrafanaDashboardUsesExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile("../../docs/grafana-sluice.json")
	require.NoError(t, err)
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	exported := described(t)
	require.Len(t, exported, 21)

	name := regexp.MustCompile(`\bsluice_[a-z0-9_]+`)
	used := map[string]bool{}
	check := func(where, expr string) {
		for _, n := range name.FindAllString(expr, -1) {
			base := n
			if b, ok := strings.CutSuffix(n, "_sum"); ok && exported[b] {
				base = b
			} else if b, ok := strings.CutSuffix(n, "_count"); ok && exported[b] {
				base = b
			}
			assert.True(t, exported[base], "%s: %s is not a metric the exporter produces", where, n)
			used[base] = true
		}
	}
	queries := 0
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr, "panel %q", p.Title)
			check(p.Title, tg.Expr)
			queries++
		}
	}
	for _, v := range dash.Templating.List {
		check("variable", v.Definition)
	}
	t.Logf("%d panels, %d queries", len(dash.Panels), queries)
	var unused []string
	for n := range exported {
		if !used[n] {
			unused = append(unused, n)
		}
	}
	sort.Strings(unused)
	assert.Empty(t, unused, "exported metrics without a panel")
}
