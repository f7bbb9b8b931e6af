package sluice

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluice-go/sluice/sluicetest"
)

// BenchmarkTelemetryFrame measures building one frame (the once-a-second
// work of WithTelemetry, off the request path) for engines tracking 100 and
// 10,000 resources, each with traffic in the second.
func BenchmarkTelemetryFrame(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			clk := sluicetest.NewManualClock(0)
			eng := New(WithClock(clk), WithLimits(Limits{Resources: n + 10}))
			defer eng.Close()
			for i := 0; i < n; i++ {
				p, err := eng.Entry("r" + strconv.Itoa(i))
				if err != nil {
					b.Fatal(err)
				}
				p.Exit()
			}
			clk.Advance(time.Second)
			p := &publisher{eng: eng, app: "shop", maxRes: DefaultFrameResources}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f := p.frame(clk.Nanotime(), 0)
				if len(f.Resources) != DefaultFrameResources {
					b.Fatalf("%d resources", len(f.Resources))
				}
			}
		})
	}
}
