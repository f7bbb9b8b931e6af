// Command example shows sluiceotel exporting an engine's figures as
// OpenTelemetry metrics. A flow rule admits 5 of 8 requests to GET /orders;
// a circuit breaker opens after three failed calls to payments and refuses
// the next two. The program then collects the metrics once, as an exporter's
// reader would, prints every data point and exits.
//
//	go run ./adapters/otel/example                                    # in the repository
//	go run github.com/sluice-go/sluice/adapters/otel/example@latest  # anywhere
//
// The reader here is an in-process sdkmetric.ManualReader, so nothing leaves
// the process; a service gives its meter provider a periodic reader with an
// exporter (OTLP, Prometheus...) instead, and sluiceotel is registered the
// same way.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"sort"
	"strings"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluice-go/sluice"
	sluiceotel "github.com/sluice-go/sluice/adapters/otel"
	"github.com/sluice-go/sluice/rules"
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run writes the data points to w. opts are the engine's options (the test
// gives it a manual clock, so that a slow host cannot start a new second
// between the requests).
func run(w io.Writer, opts ...sluice.Option) error {
	engine := sluice.New(opts...)
	defer engine.Close()
	err := engine.LoadRules(rules.Set{
		Flow: []rules.Flow{{ID: "orders", Resource: "GET /orders", Threshold: 5}},
		CircuitBreaker: []rules.CircuitBreaker{{ID: "payments", Resource: "payments", Strategy: rules.ErrorCount,
			Threshold: 3, MinRequestAmount: 3, StatInterval: time.Second, RetryTimeout: time.Minute}},
	})
	if err != nil {
		return err
	}

	// The metrics pipeline: a meter provider with a reader, and sluice's
	// instruments registered on it.
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())
	reg, err := sluiceotel.Register(engine, provider)
	if err != nil {
		return err
	}
	defer reg.Unregister()

	// Traffic: 8 orders, 5 payments that fail.
	for range 8 {
		if p, err := engine.Entry("GET /orders"); err == nil {
			p.Exit()
		}
	}
	for range 5 {
		_ = engine.Do("payments", func() error { return errors.New("payment provider down") },
			sluice.WithTraffic(sluice.Outbound))
	}

	// One collection: the callback reads the engine now.
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		return err
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != sluiceotel.ScopeName {
			continue
		}
		for _, m := range sm.Metrics {
			lines = append(lines, points(m)...)
		}
	}
	sort.Strings(lines)
	fmt.Fprintln(w, "collected (name{attributes} value unit):")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	return nil
}

// points formats each data point of m as: name{attributes} value unit.
func points(m metricdata.Metrics) []string {
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		return format(m, d.DataPoints)
	case metricdata.Sum[float64]:
		return format(m, d.DataPoints)
	case metricdata.Gauge[int64]:
		return format(m, d.DataPoints)
	case metricdata.Gauge[float64]:
		return format(m, d.DataPoints)
	}
	return nil
}

func format[N int64 | float64](m metricdata.Metrics, dps []metricdata.DataPoint[N]) []string {
	var out []string
	for _, p := range dps {
		var attrs []string
		for _, kv := range p.Attributes.ToSlice() { // sorted by key
			attrs = append(attrs, fmt.Sprintf("%s=%q", kv.Key, kv.Value.Emit()))
		}
		out = append(out, strings.TrimSpace(fmt.Sprintf("%s{%s} %v %s", m.Name, strings.Join(attrs, ","), p.Value, m.Unit)))
	}
	return out
}
