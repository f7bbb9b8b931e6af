package sluice

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice/cluster"
	"github.com/sluice-go/sluice/core"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

// TestTelemetryFrameBlockedBySameSecond: a frame's refusals by type cover
// the same second as its refusal total, whenever the frame is taken: here
// after refusals of the next second, and after a second with no frame.
// (Counted between two frames, they said "blocked 3 (flow 6)".)
func TestTelemetryFrameBlockedBySameSecond(t *testing.T) {
	clk := sluicetest.NewManualClock(0)
	eng := New(WithClock(clk), WithInstanceID("i1"))
	defer eng.Close()
	if _, err := loadFlow(eng, []rules.Flow{{Resource: "api", Threshold: 2}}); err != nil {
		t.Fatal(err)
	}
	p, err := newPublisher(eng, noTelemetry{}, TelemetryConfig{App: "shop"}, "shop")
	if err != nil {
		t.Fatal(err)
	}
	enter := func(n int) {
		for i := 0; i < n; i++ {
			if e, err := eng.Entry("api"); err == nil {
				e.Exit()
			}
		}
	}
	check := func(sec int64, pass, block uint64) {
		t.Helper()
		f := p.frame(clk.Nanotime(), sec)
		if len(f.Resources) != 1 {
			t.Fatalf("second %d: %+v", sec, f)
		}
		r := f.Resources[0]
		var sum uint64
		for _, n := range r.BlockedBy {
			sum += n
		}
		if r.Pass != pass || r.Block != block || r.BlockedBy[core.BlockFlow] != block || sum != block {
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
