package fleet

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/internal/sluicetest"
	"github.com/sluice-go/sluice/rules"
)

// TestFrameBlockedBySameSecond: a frame's refusals by type cover the same
// second as its refusal total, whenever the frame is taken: here after
// refusals of the next second, and after a second with no frame.
// (Counted between two frames, they said "blocked 3 (flow 6)".)
func TestFrameBlockedBySameSecond(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	eng := sluice.New(sluice.WithClock(clk))
	defer eng.Close()
	if err := eng.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "api", Threshold: 2}}}); err != nil {
		t.Fatal(err)
	}
	p := newPublisher(&Member{eng: eng, app: "shop", id: "i1"}, Config{App: "shop", Telemetry: noTelemetry{}})
	enter := func(n int) {
		for i := 0; i < n; i++ {
			if e, err := eng.Entry("api"); err == nil {
				e.Exit()
			}
		}
	}
	check := func(sec int64, pass, block uint64) {
		t.Helper()
		f, ok := p.frame(clk.Nanotime(), sec)
		if !ok || len(f.Resources) != 1 {
			t.Fatalf("second %d: %+v", sec, f)
		}
		r := f.Resources[0]
		var sum uint64
		for _, n := range r.BlockedBy {
			sum += n
		}
		if r.Pass != pass || r.Block != block || r.BlockedBy[sluice.BlockFlow] != block || sum != block {
			t.Fatalf("second %d: pass %d, blocked %d, by type %v; want %d, %d", sec, r.Pass, r.Block, r.BlockedBy, pass, block)
		}
	}
	clk.Set(int64(900 * time.Millisecond))
	enter(5) // second 0: 2 pass, 3 refused
	clk.Set(int64(1100 * time.Millisecond))
	enter(8) // second 1: all 8 refused (the window holds 0.9 s), before second 0's frame
	check(0, 2, 3)
	clk.Set(int64(2300 * time.Millisecond))
	enter(3) // second 2: 2 pass, 1 refused; no frame of second 1 was taken
	check(1, 0, 8)
	clk.Set(int64(3050 * time.Millisecond))
	check(2, 2, 1)
	clk.Set(int64(3500 * time.Millisecond))
	check(3, 0, 0)
}

// noTelemetry is a cluster.Telemetry that keeps nothing.
type noTelemetry struct{}

func (noTelemetry) Publish(context.Context, cluster.Frame, int, time.Duration) error { return nil }
func (noTelemetry) Frames(context.Context, string, int64) ([]cluster.Frame, error) {
	return nil, nil
}

// BenchmarkTelemetryFrame measures building one frame (the once-a-second
// work of a publishing Member, off the request path) for engines tracking
// 100 and 10,000 resources, each with traffic in the second.
func BenchmarkTelemetryFrame(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			clk := sluicetest.NewManualClock(0)
			eng := sluice.New(sluice.WithClock(clk), sluice.WithLimits(sluice.Limits{Resources: n + 10}))
			defer eng.Close()
			for i := 0; i < n; i++ {
				p, err := eng.Entry("r" + strconv.Itoa(i))
				if err != nil {
					b.Fatal(err)
				}
				p.Exit()
			}
			clk.Advance(time.Second)
			p := newPublisher(&Member{eng: eng, app: "shop"}, Config{App: "shop", Telemetry: noTelemetry{}})
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f, _ := p.frame(clk.Nanotime(), 0)
				if len(f.Resources) != defaultMaxResources {
					b.Fatalf("%d resources", len(f.Resources))
				}
			}
		})
	}
}

// TestFrameAdaptiveTierShadow: a frame carries a resource's adaptive limit
// at the second's end, its tiered rule's step and the second's shadow
// would-be refusals.
func TestFrameAdaptiveTierShadow(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	eng := sluice.New(sluice.WithClock(clk))
	defer eng.Close()
	tiered := rules.Flow{Resource: "tier", Threshold: 100, Tiers: []rules.Tier{{Above: 10, Threshold: 50}}, Shadow: true}
	err := eng.LoadRules(rules.Set{Flow: []rules.Flow{
		{Resource: "ad", Metric: rules.Concurrency, Adaptive: &rules.Adaptive{Min: 7, Max: 7}},
		{Resource: "sh", Threshold: 1, Shadow: true},
		tiered,
	}})
	if err != nil {
		t.Fatal(err)
	}
	p := newPublisher(&Member{eng: eng, app: "shop", id: "i1"}, Config{App: "shop", Telemetry: noTelemetry{}})
	e, err := eng.Entry("tier")
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(50 * time.Millisecond)
	e.Exit() // RT 50 ms > 10: the next period's entry moves to tier 1
	clk.Advance(100 * time.Millisecond)
	for _, res := range []string{"tier", "ad", "sh", "sh", "sh"} {
		if e, err := eng.Entry(res); err != nil {
			t.Fatalf("%s: %v", res, err)
		} else {
			e.Exit()
		}
	}
	clk.Set(int64(1100 * time.Millisecond))
	f, ok := p.frame(clk.Nanotime(), 0)
	if !ok {
		t.Fatal("no frame")
	}
	by := map[string]cluster.ResourceSecond{}
	for _, r := range f.Resources {
		by[r.Resource] = r
	}
	if r := by["ad"]; r.AdaptiveLimit != 7 {
		t.Errorf("ad: adaptive limit %d, want 7", r.AdaptiveLimit)
	}
	if r := by["sh"]; r.ShadowBlock != 2 || r.Block != 0 {
		t.Errorf("sh: shadow %d, blocked %d; want 2, 0", r.ShadowBlock, r.Block)
	}
	if r := by["tier"]; r.Tier != 1 || r.AdaptiveLimit != 0 {
		t.Errorf("tier: tier %d, adaptive limit %d; want 1, 0", r.Tier, r.AdaptiveLimit)
	}
}
