package sluicetest

import (
	"testing"

	"github.com/sluice-go/sluice"
)

// NewEngine returns an engine on a new ManualClock that reads 0, with opts
// applied after the clock, and closes it when the test ends (t.Cleanup). A
// sluice.WithClock among opts replaces the clock: the one returned is then
// the engine's if it is a *ManualClock, and nil otherwise.
func NewEngine(t testing.TB, opts ...sluice.Option) (*sluice.Engine, *ManualClock) {
	t.Helper()
	eng := sluice.New(append([]sluice.Option{sluice.WithClock(NewManualClock(0))}, opts...)...)
	t.Cleanup(func() { _ = eng.Close() })
	clk, _ := eng.Clock().(*ManualClock)
	return eng, clk
}
