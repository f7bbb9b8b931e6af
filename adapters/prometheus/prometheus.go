// Package sluiceprom exports an engine's statistics to Prometheus.
//
// NewCollector returns a prometheus.Collector that reads the engine at
// scrape time (Engine.Each, CircuitBreakerStates, SystemMetrics, ClusterStatus): nothing
// is counted twice and nothing runs between scrapes. A scrape adds no work to
// later calls beyond what reading a resource does (its exits time a sample
// of their RT): reading load1 and CPU usage through SystemMetrics does not
// make inbound entries count engine-wide, which only a system rule does.
// Register it with a registry and serve that registry:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(sluiceprom.NewCollector(engine))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// Series are per resource (label resource), never per parameter value or
// request: their number is bounded by the engine's resource limit
// (sluice.Limits). The metrics, all with the prefix sluice_:
//
//	passed_total{resource}             counter  requests that passed every rule
//	blocked_total{resource,type}       counter  requests refused, by block type ("flow", "system", ...; "other" for custom types); only types that refused something
//	shadow_blocked_total{resource,type}
//	                                   counter  requests a rule in shadow mode would have refused (they passed), by block type; only types that would have refused something
//	completed_total{resource}          counter  requests that exited
//	errors_total{resource}             counter  requests that exited with an error
//	rt_seconds{resource}               summary  response times of exited requests: _sum (seconds, to the microsecond) and _count (= completed_total), no quantiles
//	in_flight{resource}                gauge    requests in flight
//	adaptive_limit{resource}           gauge    the limit in force of the resource's adaptive concurrency rule (only resources with one)
//	breaker_state{resource,rule}       gauge    0 closed, 1 open, 2 half-open; rule is the rule's ID, or its index among the circuit-breaker rules when it has none
//	breaker_transitions_total{resource,rule,to}
//	                                   counter  changes of state by the state changed to ("open", "half-open", "closed"), since the rule was loaded
//	system_load1                       gauge    the host's one-minute load average (absent before the first good reading)
//	system_cpu_usage                   gauge    the process's CPU usage, a ratio in [0, 1] (absent before the first good reading)
//
// With a cluster store (sluice.WithCluster), from Engine.ClusterStatus:
//
//	cluster_fallback                      gauge    1 while cluster rules decide locally (the store failed), 0 while the store decides
//	cluster_live_instances                gauge    live instances of the application, this one included
//	cluster_store_takes_total             counter  store calls for permits (lease refills and strict requests, batched)
//	cluster_store_take_errors_total       counter  of which failed or timed out
//	cluster_store_requests_total          counter  requests those calls carried
//	cluster_permits_given_back_total      counter  unused leased permits given back to the store
//	cluster_permits_dropped_total         counter  unused leased permits that could not be given back
//	cluster_store_probes_total            counter  probes of a failing store
//	cluster_heartbeat_failures_total      counter  heartbeats that failed
//
// Counts are of requests: an entry made with sluice.WithBatch(n) counts n.
// Counters are totals since the engine started tracking the resource; a
// resource forgotten when idle (after two minutes) and seen again
// starts from zero, which Prometheus treats as a counter reset. Resource
// names and rule IDs, which may come from traffic, are escaped in the
// exposition and made valid UTF-8 (see Collector.Collect).
package sluiceprom

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/prometheus/internal/export"
	"github.com/sluice-go/sluice/stat"
)

// Collector is a prometheus.Collector of one engine's statistics. It is
// safe for concurrent use (scrapes may overlap).
type Collector struct {
	eng                                      *sluice.Engine
	passed, blocked, completed, errs, rt, in *prometheus.Desc
	limit                                    *prometheus.Desc
	breaker, moves, load1, cpu               *prometheus.Desc
	shadow                                   *prometheus.Desc
	cluster                                  clusterDescs
}

// clusterDescs describe the metrics of the engine's cluster store.
type clusterDescs struct {
	fallback, live, takes, takeErrs, reqs, given, dropped, probes, hbFails *prometheus.Desc
}

func (d *clusterDescs) all() []*prometheus.Desc {
	return []*prometheus.Desc{d.fallback, d.live, d.takes, d.takeErrs, d.reqs, d.given, d.dropped, d.probes, d.hbFails}
}

// NewCollector returns a collector of eng's statistics.
func NewCollector(eng *sluice.Engine) *Collector {
	res := []string{"resource"}
	return &Collector{
		eng:       eng,
		passed:    prometheus.NewDesc("sluice_passed_total", "Requests that passed every rule.", res, nil),
		blocked:   prometheus.NewDesc("sluice_blocked_total", "Requests refused, by the type of the rule that refused them.", []string{"resource", "type"}, nil),
		shadow:    prometheus.NewDesc("sluice_shadow_blocked_total", "Requests a rule in shadow mode would have refused (they passed), by the type of the rule.", []string{"resource", "type"}, nil),
		completed: prometheus.NewDesc("sluice_completed_total", "Requests that exited.", res, nil),
		errs:      prometheus.NewDesc("sluice_errors_total", "Requests that exited with an error.", res, nil),
		rt:        prometheus.NewDesc("sluice_rt_seconds", "Response times of exited requests.", res, nil),
		in:        prometheus.NewDesc("sluice_in_flight", "Requests in flight.", res, nil),
		limit:     prometheus.NewDesc("sluice_adaptive_limit", "The limit in force of the resource's adaptive concurrency rule.", res, nil),
		breaker:   prometheus.NewDesc("sluice_breaker_state", "Circuit breaker state: 0 closed, 1 open, 2 half-open.", []string{"resource", "rule"}, nil),
		moves:     prometheus.NewDesc("sluice_breaker_transitions_total", "Circuit breaker changes of state, by the state changed to.", []string{"resource", "rule", "to"}, nil),
		load1:     prometheus.NewDesc("sluice_system_load1", "The host's one-minute load average.", nil, nil),
		cpu:       prometheus.NewDesc("sluice_system_cpu_usage", "The process's CPU usage, a ratio of what it may use.", nil, nil),
		cluster: clusterDescs{
			fallback: prometheus.NewDesc("sluice_cluster_fallback", "1 while cluster rules decide locally because the store failed, 0 while the store decides.", nil, nil),
			live:     prometheus.NewDesc("sluice_cluster_live_instances", "Live instances of the application, this one included.", nil, nil),
			takes:    prometheus.NewDesc("sluice_cluster_store_takes_total", "Store calls for permits: lease refills and strict requests, batched.", nil, nil),
			takeErrs: prometheus.NewDesc("sluice_cluster_store_take_errors_total", "Store calls for permits that failed or timed out.", nil, nil),
			reqs:     prometheus.NewDesc("sluice_cluster_store_requests_total", "Requests carried by store calls for permits.", nil, nil),
			given:    prometheus.NewDesc("sluice_cluster_permits_given_back_total", "Unused leased permits given back to the store.", nil, nil),
			dropped:  prometheus.NewDesc("sluice_cluster_permits_dropped_total", "Unused leased permits that could not be given back to the store.", nil, nil),
			probes:   prometheus.NewDesc("sluice_cluster_store_probes_total", "Probes of a failing store.", nil, nil),
			hbFails:  prometheus.NewDesc("sluice_cluster_heartbeat_failures_total", "Heartbeats that failed.", nil, nil),
		},
	}
}

// collectResource sends the metrics of one resource, labelled name (valid
// UTF-8).
func (c *Collector) collectResource(ch chan<- prometheus.Metric, name string, s *stat.Snapshot) {
	ch <- prometheus.MustNewConstMetric(c.passed, prometheus.CounterValue, float64(s.TotalPass), name)
	for t, n := range s.BlockedBy {
		if n == 0 {
			continue
		}
		typ := "other"
		if t != 0 {
			typ = sluice.BlockType(t).String()
		}
		ch <- prometheus.MustNewConstMetric(c.blocked, prometheus.CounterValue, float64(n), name, typ)
	}
	for t, n := range s.ShadowBlockedBy {
		if n != 0 {
			ch <- prometheus.MustNewConstMetric(c.shadow, prometheus.CounterValue, float64(n), name, blockType(t))
		}
	}
	ch <- prometheus.MustNewConstMetric(c.completed, prometheus.CounterValue, float64(s.TotalComplete), name)
	ch <- prometheus.MustNewConstMetric(c.errs, prometheus.CounterValue, float64(s.TotalError), name)
	ch <- prometheus.MustNewConstSummary(c.rt, s.TotalComplete, s.TotalRT.Seconds(), nil, name)
	ch <- prometheus.MustNewConstMetric(c.in, prometheus.GaugeValue, float64(s.Concurrency), name)
	if s.AdaptiveLimit > 0 {
		ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(s.AdaptiveLimit), name)
	}
}

// Describe sends the descriptors of every metric the collector exports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.passed, c.blocked, c.shadow, c.completed, c.errs, c.rt, c.in, c.limit, c.breaker, c.moves, c.load1, c.cpu} {
		ch <- d
	}
	for _, d := range c.cluster.all() {
		ch <- d
	}
}

// Collect reads the engine and sends its metrics.
//
// Label values come from resource names and rule IDs, which may come from
// traffic: Prometheus takes only valid UTF-8, so each invalid byte becomes
// U+FFFD. A series whose labels, made valid so, equal those of one already
// sent in the scrape is left out of it, so that one odd name can never make
// a whole scrape fail (internal/export.Walk).
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	export.Walk(c.eng, func(name string, s *stat.Snapshot) { c.collectResource(ch, name, s) },
		func(resource, rule string, b *sluice.BreakerStatus) {
			ch <- prometheus.MustNewConstMetric(c.breaker, prometheus.GaugeValue, float64(b.State), resource, rule)
			for to, n := range b.Transitions {
				ch <- prometheus.MustNewConstMetric(c.moves, prometheus.CounterValue, float64(n), resource, rule, stat.BreakerState(to).String())
			}
		})
	sys := c.eng.SystemMetrics()
	if !math.IsNaN(sys.Load1) {
		ch <- prometheus.MustNewConstMetric(c.load1, prometheus.GaugeValue, sys.Load1)
	}
	if !math.IsNaN(sys.CPUUsage) {
		ch <- prometheus.MustNewConstMetric(c.cpu, prometheus.GaugeValue, sys.CPUUsage)
	}
	if cs, ok := c.eng.ClusterStatus(); ok {
		d := &c.cluster
		fallback := 0.0
		if cs.Fallback {
			fallback = 1
		}
		ch <- prometheus.MustNewConstMetric(d.fallback, prometheus.GaugeValue, fallback)
		ch <- prometheus.MustNewConstMetric(d.live, prometheus.GaugeValue, float64(cs.Live))
		for _, m := range []struct {
			d *prometheus.Desc
			n int64
		}{
			{d.takes, cs.Takes}, {d.takeErrs, cs.TakeErrors}, {d.reqs, cs.Requests},
			{d.given, cs.Given}, {d.dropped, cs.Dropped}, {d.probes, cs.Probes}, {d.hbFails, cs.HeartbeatFailures},
		} {
			ch <- prometheus.MustNewConstMetric(m.d, prometheus.CounterValue, float64(m.n))
		}
	}
}

// blockType is the type label of index t of Snapshot.BlockedBy and
// ShadowBlockedBy: the block type's name, "other" for index 0.
func blockType(t int) string {
	if t == 0 {
		return "other"
	}
	return sluice.BlockType(t).String()
}
