package sluiceprom_test

import (
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-go/sluice"
	sluiceprom "github.com/sluice-go/sluice/adapters/prometheus"
	"github.com/sluice-go/sluice/rules"
)

func ExampleNewCollector() {
	engine := sluice.New()
	defer engine.Close()
	if err := engine.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "GET /orders", Threshold: 2}}}); err != nil {
		panic(err)
	}
	for i := 0; i < 3; i++ {
		if p, err := engine.Entry("GET /orders"); err == nil {
			p.Exit()
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(sluiceprom.NewCollector(engine))
	// Serve reg with promhttp.HandlerFor; here, two of its metrics.
	fams, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range fams {
		if f.GetName() != "sluice_passed_total" && f.GetName() != "sluice_blocked_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			fmt.Printf("%s{%s} %v\n", f.GetName(), strings.Join(labels, ","), m.GetCounter().GetValue())
		}
	}
	// Output:
	// sluice_blocked_total{resource="GET /orders",type="flow"} 1
	// sluice_passed_total{resource="GET /orders"} 2
}
