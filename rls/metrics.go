package rls

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sluice-go/sluice/rls/config"
)

// maxSeries bounds the per-limit series of the metrics (detailed_metric
// makes one per distinct value); hits beyond go to the series key="_other".
const maxSeries = 10_000

// metrics counts what the service decided, in envoyproxy/ratelimit's terms
// (total_hits, over_limit, within_limit, shadow_mode per limit, counted in
// hits), and writes them in Prometheus' text format.
type metrics struct {
	mu     sync.RWMutex
	limits map[string]*limitStats

	requests, overLimit, errors, globalShadow atomic.Uint64
	configLoads, configErrors                 atomic.Uint64
	fallback                                  atomic.Uint64 // decisions made locally while Redis failed
	remote                                    atomic.Int32  // 1 while Redis answers, 0 in fallback, -1 without Redis
}

type limitStats struct{ total, over, within, shadow atomic.Uint64 }

func newMetrics() *metrics {
	m := &metrics{limits: map[string]*limitStats{}}
	m.remote.Store(-1)
	return m
}

func (m *metrics) request(over bool) {
	m.requests.Add(1)
	if over {
		m.overLimit.Add(1)
	}
}

func (m *metrics) series(key string) *limitStats {
	m.mu.RLock()
	st := m.limits[key]
	m.mu.RUnlock()
	if st != nil {
		return st
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if st = m.limits[key]; st == nil {
		if len(m.limits) >= maxSeries {
			key = "_other"
			if st = m.limits[key]; st != nil {
				return st
			}
		}
		st = &limitStats{}
		m.limits[key] = st
	}
	return st
}

func (m *metrics) limit(l *config.Limit, d *descriptor) {
	key := l.Key
	if d.metricKey != "" {
		key = d.metricKey
	}
	st := m.series(key)
	st.total.Add(d.addend)
	switch {
	case d.over && l.Shadow:
		st.shadow.Add(d.addend)
		st.over.Add(d.addend)
	case d.over:
		st.over.Add(d.addend)
	default:
		st.within.Add(d.addend)
	}
}

// ServeHTTP writes the metrics in Prometheus' text exposition format.
func (m *metrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	m.write(w)
}

// write writes the metrics in Prometheus' text exposition format.
func (m *metrics) write(w io.Writer) {
	counter := func(name, help string, v uint64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", name, help, name, name, v)
	}
	counter("sluice_rls_requests_total", "ShouldRateLimit requests answered.", m.requests.Load())
	counter("sluice_rls_over_limit_requests_total", "Requests answered OVER_LIMIT.", m.overLimit.Load())
	counter("sluice_rls_errors_total", "Requests answered with an error.", m.errors.Load())
	counter("sluice_rls_global_shadow_total", "Requests answered OK by the global shadow mode.", m.globalShadow.Load())
	counter("sluice_rls_config_loads_total", "Configs loaded.", m.configLoads.Load())
	counter("sluice_rls_config_errors_total", "Configs refused (the config in force stayed).", m.configErrors.Load())
	counter("sluice_rls_fallback_hits_total", "Descriptors counted locally while Redis failed.", m.fallback.Load())
	fmt.Fprintf(w, "# HELP sluice_rls_redis_up 1 while Redis answers, 0 while the local fallback decides, -1 without Redis.\n# TYPE sluice_rls_redis_up gauge\nsluice_rls_redis_up %d\n", m.remote.Load())
	m.mu.RLock()
	keys := make([]string, 0, len(m.limits))
	for k := range m.limits {
		keys = append(keys, k)
	}
	m.mu.RUnlock()
	sort.Strings(keys)
	for _, kind := range [...]string{"total_hits", "over_limit", "within_limit", "shadow_mode"} {
		name := "sluice_rls_" + kind + "_total"
		fmt.Fprintf(w, "# HELP %s Hits per limit (envoyproxy/ratelimit's %s).\n# TYPE %s counter\n", name, kind, name)
		for _, k := range keys {
			st := m.series(k)
			v := map[string]uint64{"total_hits": st.total.Load(), "over_limit": st.over.Load(),
				"within_limit": st.within.Load(), "shadow_mode": st.shadow.Load()}[kind]
			fmt.Fprintf(w, "%s{key=\"%s\"} %d\n", name, labelEscape(k), v)
		}
	}
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func labelEscape(s string) string { return labelEscaper.Replace(s) }
