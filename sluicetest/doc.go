// Package sluicetest helps test code that uses sluice: a ManualClock that
// moves only when the test says so, to drive an engine built with
// sluice.WithClock through exact instants without sleeping.
//
//	clk := sluicetest.NewManualClock(0)
//	g := sluice.New(sluice.WithClock(clk))
//	defer g.Close()
//	clk.Advance(time.Second) // the next second's window
package sluicetest
