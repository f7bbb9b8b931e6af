// Package sluiceotel exports an engine's statistics as OpenTelemetry
// metrics, through the go.opentelemetry.io/otel/metric API.
//
// Register creates observable instruments on a meter of the provider
// given and one callback that reads the engine when the provider's reader
// collects (Engine.Each, CircuitBreakerStates, SystemMetrics,
// ClusterStatus): nothing runs on the request path and nothing between
// collections. A collection adds no work to later calls beyond what reading
// a resource does (its exits time a sample of their RT): reading load1 and
// CPU usage through SystemMetrics does not make inbound entries count
// engine-wide, which only a system rule does.
//
//	reg, err := sluiceotel.Register(engine, provider)
//	if err != nil {
//		return err
//	}
//	defer reg.Unregister()
//
// The metric set is the Prometheus exporter's (package sluiceprom), named
// the OpenTelemetry way: dotted names, units in the instrument, no _total
// suffix. The usual translation of an OpenTelemetry Prometheus exporter
// (dots to underscores, units in braces dropped, s to _seconds, 1 to
// _ratio, _total on counters) gives the sluiceprom names back, except for
// the response time (a counter of seconds here, sluice.rt, which becomes
// sluice_rt_seconds_total, where sluiceprom has the summary
// sluice_rt_seconds) and the CPU usage (sluice_system_cpu_usage_ratio).
// Dimensionless gauges other than the CPU usage have no unit.
// Attributes are the sluiceprom labels: resource, type, rule, to.
//
//	sluice.passed{resource}                   counter        {request}  requests that passed every rule
//	sluice.blocked{resource,type}             counter        {request}  requests refused, by block type; only types that refused something
//	sluice.shadow_blocked{resource,type}      counter        {request}  requests a rule in shadow mode would have refused (they passed), by block type; only types that would have refused something
//	sluice.completed{resource}                counter        {request}  requests that exited
//	sluice.errors{resource}                   counter        {request}  requests that exited with an error
//	sluice.rt{resource}                       counter        s          response times of exited requests, summed (to the microsecond)
//	sluice.in_flight{resource}                updown counter {request}  requests in flight
//	sluice.adaptive.limit{resource}           gauge          {request}  the limit in force of the resource's adaptive concurrency rule (only resources with one)
//	sluice.breaker.state{resource,rule}       gauge                     0 closed, 1 open, 2 half-open
//	sluice.breaker.transitions{resource,rule,to} counter     {transition} changes of state by the state changed to
//	sluice.system.load1                       gauge                     the host's one-minute load average (absent before the first good reading)
//	sluice.system.cpu.usage                   gauge          1          the process's CPU usage in [0, 1] (absent before the first good reading)
//	sluice.cluster.fallback                   gauge                     1 while cluster rules decide locally, 0 while the store decides
//	sluice.cluster.live_instances             gauge          {instance} live instances of the application
//	sluice.cluster.store.takes                counter        {call}     store calls for permits
//	sluice.cluster.store.take_errors          counter        {call}     of which failed or timed out
//	sluice.cluster.store.requests             counter        {request}  requests those calls carried
//	sluice.cluster.permits.given_back         counter        {permit}   unused leased permits given back
//	sluice.cluster.permits.dropped            counter        {permit}   unused leased permits that could not go back
//	sluice.cluster.store.probes               counter        {probe}    probes of a failing store
//	sluice.cluster.heartbeat.failures         counter        {heartbeat} heartbeats that failed
//
// The cluster metrics are reported only by an engine with a cluster store
// (sluice.WithCluster). Counters are cumulative totals read from the engine;
// a resource forgotten when idle and seen again starts from zero.
package sluiceotel

import (
	"context"
	"math"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/adapters/otel/internal/export"
	"github.com/sluice-go/sluice/stat"
)

// observeResource reports the figures of one resource, named name (valid
// UTF-8).
func (in *instruments) observeResource(o metric.Observer, name string, s *stat.Snapshot) {
	res := attribute.String("resource", name)
	set := metric.WithAttributeSet(attribute.NewSet(res))
	o.ObserveInt64(in.passed, int64(s.TotalPass), set)
	for t, n := range s.BlockedBy {
		if n == 0 {
			continue
		}
		typ := "other"
		if t != 0 {
			typ = sluice.BlockType(t).String()
		}
		o.ObserveInt64(in.blocked, int64(n), metric.WithAttributes(res, attribute.String("type", typ)))
	}
	for t, n := range s.ShadowBlockedBy {
		if n == 0 {
			continue
		}
		typ := "other"
		if t != 0 {
			typ = sluice.BlockType(t).String()
		}
		o.ObserveInt64(in.shadow, int64(n), metric.WithAttributes(res, attribute.String("type", typ)))
	}
	o.ObserveInt64(in.completed, int64(s.TotalComplete), set)
	o.ObserveInt64(in.errs, int64(s.TotalError), set)
	o.ObserveFloat64(in.rt, s.TotalRT.Seconds(), set)
	o.ObserveInt64(in.inFlight, s.Concurrency, set)
	if s.AdaptiveLimit > 0 {
		o.ObserveInt64(in.limit, s.AdaptiveLimit, set)
	}
}

// ScopeName is the instrumentation scope of the meter Register uses.
const ScopeName = "github.com/sluice-go/sluice/adapters/otel"

// instruments are the observable instruments of one registration.
type instruments struct {
	passed, blocked, completed, errs metric.Int64ObservableCounter
	shadow                           metric.Int64ObservableCounter
	rt                               metric.Float64ObservableCounter
	inFlight                         metric.Int64ObservableUpDownCounter
	state, limit                     metric.Int64ObservableGauge
	moves                            metric.Int64ObservableCounter
	load1, cpu                       metric.Float64ObservableGauge

	fallback, live                                         metric.Int64ObservableGauge
	takes, takeErrs, reqs, given, dropped, probes, hbFails metric.Int64ObservableCounter
}

// Register creates the instruments on mp's meter of scope ScopeName and
// registers the callback that reads eng at every collection. The returned
// registration's Unregister stops the reading; the instruments stay with
// the meter. Register is safe for concurrent use; two registrations of one
// engine on one provider report every value twice.
func Register(eng *sluice.Engine, mp metric.MeterProvider) (metric.Registration, error) {
	m := mp.Meter(ScopeName)
	var in instruments
	var errs []error
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, err := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	fgauge := func(name, unit, desc string) metric.Float64ObservableGauge {
		g, err := m.Float64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	in.passed = counter("sluice.passed", "{request}", "Requests that passed every rule.")
	in.blocked = counter("sluice.blocked", "{request}", "Requests refused, by the type of the rule that refused them.")
	in.shadow = counter("sluice.shadow_blocked", "{request}", "Requests a rule in shadow mode would have refused (they passed), by the type of the rule.")
	in.completed = counter("sluice.completed", "{request}", "Requests that exited.")
	in.errs = counter("sluice.errors", "{request}", "Requests that exited with an error.")
	rt, err := m.Float64ObservableCounter("sluice.rt", metric.WithUnit("s"), metric.WithDescription("Response times of exited requests, summed."))
	errs = append(errs, err)
	in.rt = rt
	inFlight, err := m.Int64ObservableUpDownCounter("sluice.in_flight", metric.WithUnit("{request}"), metric.WithDescription("Requests in flight."))
	errs = append(errs, err)
	in.inFlight = inFlight
	in.limit = gauge("sluice.adaptive.limit", "{request}", "The limit in force of the resource's adaptive concurrency rule.")
	in.state = gauge("sluice.breaker.state", "", "Circuit breaker state: 0 closed, 1 open, 2 half-open.")
	in.moves = counter("sluice.breaker.transitions", "{transition}", "Circuit breaker changes of state, by the state changed to.")
	in.load1 = fgauge("sluice.system.load1", "", "The host's one-minute load average.")
	in.cpu = fgauge("sluice.system.cpu.usage", "1", "The process's CPU usage, a ratio of what it may use.")
	in.fallback = gauge("sluice.cluster.fallback", "", "1 while cluster rules decide locally because the store failed, 0 while the store decides.")
	in.live = gauge("sluice.cluster.live_instances", "{instance}", "Live instances of the application, this one included.")
	in.takes = counter("sluice.cluster.store.takes", "{call}", "Store calls for permits: lease refills and strict requests, batched.")
	in.takeErrs = counter("sluice.cluster.store.take_errors", "{call}", "Store calls for permits that failed or timed out.")
	in.reqs = counter("sluice.cluster.store.requests", "{request}", "Requests carried by store calls for permits.")
	in.given = counter("sluice.cluster.permits.given_back", "{permit}", "Unused leased permits given back to the store.")
	in.dropped = counter("sluice.cluster.permits.dropped", "{permit}", "Unused leased permits that could not be given back to the store.")
	in.probes = counter("sluice.cluster.store.probes", "{probe}", "Probes of a failing store.")
	in.hbFails = counter("sluice.cluster.heartbeat.failures", "{heartbeat}", "Heartbeats that failed.")
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		in.observe(eng, o)
		return nil
	}, in.passed, in.blocked, in.shadow, in.completed, in.errs, in.rt, in.inFlight, in.limit, in.state, in.moves, in.load1, in.cpu,
		in.fallback, in.live, in.takes, in.takeErrs, in.reqs, in.given, in.dropped, in.probes, in.hbFails)
}

// observe reads eng once and reports every value to o.
//
// Attribute values come from resource names and rule IDs, which may come
// from traffic; exporters need valid UTF-8 (OTLP's protobuf refuses
// others), so each invalid byte becomes U+FFFD, and a resource or breaker
// whose attributes, made valid so, equal those of one already observed in
// the collection is left out of it (internal/export.Walk).
func (in *instruments) observe(eng *sluice.Engine, o metric.Observer) {
	export.Walk(eng, func(name string, s *stat.Snapshot) { in.observeResource(o, name, s) },
		func(resource, rule string, b *sluice.BreakerStatus) {
			res, r := attribute.String("resource", resource), attribute.String("rule", rule)
			o.ObserveInt64(in.state, int64(b.State), metric.WithAttributes(res, r))
			for to, n := range b.Transitions {
				o.ObserveInt64(in.moves, int64(n), metric.WithAttributes(res, r, attribute.String("to", stat.BreakerState(to).String())))
			}
		})
	sys := eng.SystemMetrics()
	if !math.IsNaN(sys.Load1) {
		o.ObserveFloat64(in.load1, sys.Load1)
	}
	if !math.IsNaN(sys.CPUUsage) {
		o.ObserveFloat64(in.cpu, sys.CPUUsage)
	}
	cs, ok := eng.ClusterStatus()
	if !ok {
		return
	}
	fallback := int64(0)
	if cs.Fallback {
		fallback = 1
	}
	o.ObserveInt64(in.fallback, fallback)
	o.ObserveInt64(in.live, int64(cs.Live))
	o.ObserveInt64(in.takes, cs.Takes)
	o.ObserveInt64(in.takeErrs, cs.TakeErrors)
	o.ObserveInt64(in.reqs, cs.Requests)
	o.ObserveInt64(in.given, cs.Given)
	o.ObserveInt64(in.dropped, cs.Dropped)
	o.ObserveInt64(in.probes, cs.Probes)
	o.ObserveInt64(in.hbFails, cs.HeartbeatFailures)
}
