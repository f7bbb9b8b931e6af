package sluicetest_test

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/rules"
	"github.com/sluice-go/sluice/sluicetest"
)

// TestNewEngine: the engine reads the clock returned, which starts at 0; a
// WithClock among the options replaces it (returned when it is a
// ManualClock, nil otherwise); every engine is closed by the test's
// cleanup (goleak in TestMain would see its goroutines otherwise).
func TestNewEngine(t *testing.T) {
	eng, clk := sluicetest.NewEngine(t)
	if clk == nil || clk.Nanotime() != 0 || eng.Clock() != sluice.Clock(clk) {
		t.Fatalf("NewEngine's clock %v, engine's %v", clk, eng.Clock())
	}
	if err := eng.LoadRules(rules.Set{Flow: []rules.Flow{{Resource: "r", Threshold: 1}}}); err != nil {
		t.Fatal(err)
	}
	pass := func() bool {
		p, err := eng.Entry("r")
		if err == nil {
			p.Exit()
		}
		return err == nil
	}
	if !pass() || pass() {
		t.Fatal("want one entry in the first second")
	}
	clk.Advance(time.Second)
	if !pass() {
		t.Fatal("want one entry in the next second")
	}

	mine := sluicetest.NewManualClock(42)
	if _, got := sluicetest.NewEngine(t, sluice.WithClock(mine)); got != mine {
		t.Fatalf("with WithClock(a ManualClock): got %p, want %p", got, mine)
	}
	if _, got := sluicetest.NewEngine(t, sluice.WithClock(struct{ sluice.Clock }{sluicetest.NewManualClock(0)})); got != nil {
		t.Fatalf("with WithClock(a clock not a ManualClock): got %v, want nil", got)
	}
}
