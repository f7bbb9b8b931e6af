package sluice

import (
	"testing"

	"github.com/sluice-go/sluice/rules"
)

// BenchmarkSystemMetrics is what an exporter's scrape or a telemetry frame
// pays for load1 and CPU usage: SystemMetrics on an engine without a system
// rule (no inbound figures to scan), and with one (the inbound node's
// snapshot: its second and minute windows and totals).
func BenchmarkSystemMetrics(b *testing.B) {
	for _, ruled := range []bool{false, true} {
		b.Run(map[bool]string{false: "no-system-rule", true: "system-rule"}[ruled], func(b *testing.B) {
			g := benchEngine(b, "r")
			if ruled {
				if _, err := loadSystem(g, []rules.System{{Metric: rules.InboundQPS, Threshold: 1e12}}); err != nil {
					b.Fatal(err)
				}
			}
			p, err := g.Entry("r")
			if err != nil {
				b.Fatal(err)
			}
			p.Exit()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_ = g.SystemMetrics()
			}
		})
	}
}
