package sluiceotel_test

import (
	"context"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluice-go/sluice"
	sluiceotel "github.com/sluice-go/sluice/adapters/otel"
)

func ExampleRegister() {
	engine := sluice.New()
	defer engine.Close()
	reader := sdkmetric.NewManualReader() // or a periodic reader with an exporter
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())

	reg, err := sluiceotel.Register(engine, provider)
	if err != nil {
		panic(err)
	}
	defer reg.Unregister()

	for i := 0; i < 3; i++ {
		if p, err := engine.Entry("GET /orders"); err == nil {
			p.Exit()
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "sluice.passed" {
			p := m.Data.(metricdata.Sum[int64]).DataPoints[0]
			res, _ := p.Attributes.Value("resource")
			fmt.Println(m.Name, res.AsString(), p.Value)
		}
	}
	// Output: sluice.passed GET /orders 3
}
